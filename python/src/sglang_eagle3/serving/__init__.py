"""Serving: the settings, the launch plan, the launcher, credentials, and the entry points
SGLang and its router are started through."""
