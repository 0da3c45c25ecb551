"""Metrics are pure functions over result records."""

from personalign.metrics.bootstrap import bootstrap_ci
from personalign.metrics.prf import PRF, MatchCounts, instance_prf, pooled_prf

__all__ = ["PRF", "MatchCounts", "bootstrap_ci", "instance_prf", "pooled_prf"]
