"""Stand-in for sgl_kernel, the CUDA kernel package of SGLang, used only by the CPU tests.

The real sgl_kernel 0.3.21 wheel loads CUDA libraries when imported and cannot load
on a machine without a GPU. SGLang 0.5.9 imports it unguarded in one place on the
path the tests take (srt/mem_cache/memory_pool_host.py:32, the host KV-cache pool),
and only for the names in .kvcacheio. Nothing the tests run calls those kernels; if
something ever does, the stand-in raises instead of pretending.
"""
