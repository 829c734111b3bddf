"""Validation (01_validation): the two frameworks compute the same function on the same
weights, proven in float64, and count the same FLOPs."""
