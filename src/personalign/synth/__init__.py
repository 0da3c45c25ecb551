"""Data synthesis: generate new CUPID-, HiCUPID- and BenchPreS-style data with any model."""

# Importing the package registers the scripted model's answers to the synthesis prompts (dry runs).
from personalign.synth import scripted as scripted
