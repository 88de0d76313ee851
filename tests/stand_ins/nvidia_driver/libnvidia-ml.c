/* A stand-in for the NVIDIA driver's libnvidia-ml.so.1 (NVML): enough for pynvml.nvmlInit() and
 * nvmlShutdown(). Built by the tests (tests/support/driver_tree.py), with the real soname. */
int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return 0; /* NVML_SUCCESS */
}

int nvmlInit_v2(void) { return 0; }

int nvmlShutdown(void) { return 0; }
