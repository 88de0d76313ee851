"""Judging a setup from what the source layer read: the probe, the draft checks, preflight."""
