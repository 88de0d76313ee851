"""The click commands, one module per command group; cli.py puts them under the `sglang-eagle3` group."""
