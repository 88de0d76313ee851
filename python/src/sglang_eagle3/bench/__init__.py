"""Throughput benchmark: single-stream decode speed, the EAGLE-3 vs baseline gate, sweeps."""


class BenchError(Exception):
    """The benchmark cannot go on (server unreachable or not SGLang, bad results file); says what to fix."""
