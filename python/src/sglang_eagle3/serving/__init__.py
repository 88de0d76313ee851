"""Serving: the settings, the launch plan, the launcher, credentials, and the entry points
SGLang and its router are started through."""

# The two servers a settings file can describe. Here, not in settings.py, so that the command line can offer them
# without loading pydantic and the settings model, which the `models` commands never need.
PROFILES = ("eagle3", "baseline")
