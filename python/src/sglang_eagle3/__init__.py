"""Tools around an SGLang 0.5.9 EAGLE-3 server: patch set, probe, launcher, benchmark."""

__version__ = "0.1.0"

# The one SGLang release this project's patches and launcher are written against.
SGLANG_VERSION = "0.5.9"
