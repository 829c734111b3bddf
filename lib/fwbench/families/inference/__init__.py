"""The inference family (10_inference): both frameworks' forward pass timed alike, and where its time goes."""
