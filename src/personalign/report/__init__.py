"""Paper-style tables from run directories: Markdown, CSV and JSON."""
