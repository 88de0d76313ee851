"""Throughput benchmark: single-stream decode speed, the EAGLE-3 vs baseline gate, sweeps."""
