"""Judge roles and their strict parsers. Raw output is always kept next to the parsed value."""
