"""The analysis of a run as a whole (20_analysis): what it says of its own trust, history,
failures and retries, whatever family it measured."""
