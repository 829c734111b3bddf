"""The report: tables, roofline, sentences, charts and sections built from the index, and their rendering."""
