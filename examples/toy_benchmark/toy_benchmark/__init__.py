"""A toy personalign benchmark: answer with the user's favourite colour from a short history.

The complete example of docs/write-a-benchmark.md: data (`data.py`), the per-item evaluator
(`evaluate.py`), the metrics (`metrics.py`), the report (`report.py`) and the `BenchmarkSpec` that
ties them together (`spec.py`), registered through the ``personalign.benchmarks`` entry point.
"""
