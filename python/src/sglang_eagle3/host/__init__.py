"""Facts about the host, read from it: its GPUs and the links between them (nvidia-smi), its device nodes, its
CUDA driver library and the CUDA it runs, whether a port is free. No judgement here: preflight and the probe
judge a setup against these facts."""
