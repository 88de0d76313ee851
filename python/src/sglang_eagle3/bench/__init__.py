"""Throughput benchmark: single-stream decode speed, the EAGLE-3 vs baseline gate, sweeps."""

from ..errors import BadInput


class BenchError(BadInput):
    """The benchmark cannot go on (server unreachable or not SGLang, bad results file); says what to fix."""
