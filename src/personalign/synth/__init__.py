"""Data synthesis: generate new CUPID-, HiCUPID- and BenchPreS-style data with any model."""
