"""Shared data I/O: reading records with their row numbers, hub access and file hashes; each benchmark's
loader lives in its folder (`benchmarks/<name>/data.py`)."""
