"""Stand-in for the sglang package, for launcher, benchmark and sweep tests (SGLang needs GPUs).

Only ``python -m sglang.launch_server`` exists here: a loopback HTTP server that speaks
SGLang 0.5.9's response formats and streams tokens at a known rate. Put this directory
first on PYTHONPATH for the server process only.
"""
