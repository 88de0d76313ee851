/* A stand-in for the NVIDIA driver's libcuda.so.1, which cannot load without the driver: the one entry
 * point preflight's driver check calls (cuDriverGetVersion), answering the CUDA version it was built for
 * (-DSTAND_IN_CUDA_VERSION=13000 is CUDA 13.0), and cuInit reporting no device. Built by the tests
 * (tests/support/driver_tree.py), with the real soname. */
#ifndef STAND_IN_CUDA_VERSION
#define STAND_IN_CUDA_VERSION 13000
#endif

int cuDriverGetVersion(int *version) {
    *version = STAND_IN_CUDA_VERSION;
    return 0; /* CUDA_SUCCESS */
}

int cuInit(unsigned int flags) {
    (void)flags;
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
