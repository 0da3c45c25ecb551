"""`python -m personalign` is the `personalign` command."""

from personalign.cli import main

main()
