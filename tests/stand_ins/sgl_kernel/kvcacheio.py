"""The kvcacheio names SGLang 0.5.9 imports (memory_pool_host.py:32); calling one is an error."""


def _unavailable(name):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"sgl_kernel.kvcacheio.{name} is a CUDA kernel; the CPU test stand-in cannot run it")

    kernel.__name__ = name
    return kernel


for _name in (
    "transfer_kv_all_layer",
    "transfer_kv_all_layer_direct_lf_pf",
    "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph",
    "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct",
    "transfer_kv_per_layer",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla",
    "transfer_kv_per_layer_mla_pf_lf",
    "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
):
    globals()[_name] = _unavailable(_name)
