"""What a run leaves behind: the record format and its schema, and the DuckDB index over executed notebooks."""
