"""Tools around an SGLang EAGLE-3 server (0.5.9, and the 0.5.23 stack): patch set, probe, launcher, benchmark."""

__version__ = "0.1.0"

# The SGLang releases the tools are written for are the pinned stacks' (nix/pins.json): sglang_eagle3.stacks.
