"""Looking at results: a self-contained HTML report (`report_html`) and a local run viewer (`app`)."""
