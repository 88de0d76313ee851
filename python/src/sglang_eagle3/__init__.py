"""Tools around an SGLang EAGLE-3 server (0.5.9, and the 0.5.23 stack): patch set, probe, launcher, benchmark."""

__version__ = "0.1.0"

# The default stack's SGLang release (nix/pins.json stack.default), whose patch series is the default one.
SGLANG_VERSION = "0.5.9"
# Every SGLang release a stack of the flake is built on (nix/pins.json; a test keeps them equal). The tools read
# each tree's own source and parser; a setting one of them lacks is refused by preflight.
SGLANG_VERSIONS = (SGLANG_VERSION, "0.5.23")
