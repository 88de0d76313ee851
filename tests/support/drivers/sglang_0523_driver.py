"""Run SGLang 0.5.23's own code for patches 0003 and 0005 on CPU; print one JSON object.

Usage: python sglang_0523_driver.py TREE fusion|gate|keys [API_KEY ADMIN_KEY]

TREE holds sglang/ (pristine or patched). What stands in, and why:
- sglang/__init__.py is not run (the package is entered directly): it patches transformers 5.19
  (0.5.23's pin; it needs torch 2.14) at import, and the test environment has 0.5.9's
  transformers 4.57 and torch 2.9. Every module used below imports as it is.
- The GPU generation: SGLang's own override_platform(is_sm90=..., ...), which every reader of
  get_platform() sees. The published config leaves (get_exec, get_parallel) and the model config
  (no model directory here) are stand-ins holding only the fields the code under test reads.
- engine.py and http_server.py cannot be imported (they import transformers 5 models), so
  _server_args_for_logging and the /server_info handler are compiled on their own from the
  tree's source, with the real functions they call; add_norm.py needs the GPU kernel package
  (tvm_ffi), so its run-time gate is compiled the same way.
"""

from __future__ import annotations

import ast
import asyncio
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace as NS

ROOT = Path(sys.argv[1])
package = types.ModuleType("sglang")
package.__path__ = [str(ROOT / "sglang")]
sys.modules["sglang"] = package

from sglang.srt.runtime_context import get_platform, override_platform  # noqa: E402

GPUS = {
    "sm90": {"is_sm90": True, "is_sm100": False, "is_sm120": False, "is_blackwell": False},
    "sm100": {"is_sm90": False, "is_sm100": True, "is_sm120": False, "is_blackwell": True},
    "sm120": {"is_sm90": False, "is_sm100": False, "is_sm120": True, "is_blackwell": True},
}
REQUESTS = (None, "auto", "trtllm", "mnnvl")  # None: the user did not ask (the auto-enable decides)


def compiled(rel: str, namespace: dict, keep) -> dict:
    """The top-level statements of sglang/<rel> that ``keep`` selects, run in ``namespace`` (decorators dropped)."""
    nodes = [n for n in ast.parse((ROOT / "sglang" / rel).read_text()).body if keep(n)]
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.decorator_list = []
    exec(compile(ast.Module(nodes, []), rel, "exec"), namespace)
    return namespace


def named(*names: str):
    return lambda n: isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names


def fusion() -> dict:
    """For each GPU, request and node count: the backend the fusion runs with, None (off), or the ValueError."""
    from sglang.srt.arg_groups import overrides
    from sglang.srt.layers import flashinfer_comm_fusion as resolver

    overrides.model_config_of = lambda view: NS(hf_config=NS(architectures=["KimiK25ForConditionalGeneration"]))
    overrides.attn_dp_enabled_of = lambda view: False
    result = {}
    for gpu, facts in GPUS.items():
        for requested in REQUESTS:
            for nnodes in (1, 2):
                view = NS(flashinfer_allreduce_fusion_backend=requested, tp_size=8, nnodes=nnodes,
                          moe_a2a_backend="none", disable_custom_all_reduce=False)  # fmt: skip
                with override_platform(**facts):
                    enabled = overrides._flashinfer_allreduce_fusion_auto_enable(view)
                    backend = enabled.get("flashinfer_allreduce_fusion_backend", requested)
                    resolver.get_exec = lambda b=backend: NS(comm=NS(flashinfer_allreduce_fusion_backend=b))
                    resolver.get_parallel = lambda n=nnodes: NS(nnodes=n)
                    try:
                        chosen = resolver.resolve_flashinfer_allreduce_fusion_backend()
                    except ValueError as err:
                        chosen = f"ValueError: {err}"
                result[f"{gpu} {requested} nnodes={nnodes}"] = chosen
    return result


def gate() -> dict:
    """flashinfer_ar_fusion_applies() per GPU, with and without a backend set (CUDA and FlashInfer present)."""
    rel = "srt/layers/layer_boundary/residual/add_norm.py"

    def keep(node: ast.stmt) -> bool:  # the function and the module-level flags it reads
        flags = isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).startswith(("_is_sm", "FUSE_"))
        return flags or named("flashinfer_ar_fusion_applies")(node)

    result = {}
    for gpu, facts in GPUS.items():
        for backend in (None, "trtllm"):
            namespace = {
                "_is_cuda": True, "_is_flashinfer_available": True, "get_platform": get_platform,
                "get_exec": lambda b=backend: NS(comm=NS(flashinfer_allreduce_fusion_backend=b)),
                "is_dp_attention_enabled": lambda: False, "uses_cutedsl_ar_fusion": lambda: False,
                "is_flashinfer_allreduce_unavailable": lambda: False,
            }  # fmt: skip
            with override_platform(**facts):  # the module-level _is_sm* flags are read here, as at import
                applies = compiled(rel, namespace, keep)["flashinfer_ar_fusion_applies"]
            result[f"{gpu} {backend}"] = applies(16)
    return result


def keys(api: str, admin: str) -> dict:
    """What the start-up log line, /server_info, the launch command and repr() show, keys given on the command line."""
    from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.common import build_server_info
    from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

    args = prepare_server_args(["--model-path", "m", "--api-key", api, f"--admin-api-key={admin}"])
    real = {"redact_watermark_secrets": redact_watermark_secrets, "build_server_info": build_server_info,
            "msgspec_to_builtins": msgspec_to_builtins, "__version__": "0.5.23", "ServerArgs": object,
            "List": list, "Dict": dict, "Any": object}  # fmt: skip
    for_logging = compiled("srt/entrypoints/engine.py", dict(real), named("_server_args_for_logging"))

    async def get_internal_state():  # each scheduler's state starts from the resolved server args
        return [args.resolved_dict()]

    manager = NS(server_args=args, startup_time=0.0, get_internal_state=get_internal_state)
    handler = compiled("srt/entrypoints/http_server.py", {**real, "_global_state": NS(
        tokenizer_manager=manager, scheduler_info={})}, named("server_info"))  # fmt: skip
    info = asyncio.run(handler["server_info"]())
    return {
        "log": f"server_args={for_logging['_server_args_for_logging'](args)}",  # engine.py's logger.info line
        "server_info": json.dumps(info, default=str),
        "info": {k: info.get(k) for k in ("api_key", "admin_api_key", "model_path")},
        "internal_state": {k: info["internal_states"][0].get(k) for k in ("api_key", "admin_api_key")},
        "launch_command": args.launch_command,
        "repr": repr(args),
    }


if __name__ == "__main__":
    what = sys.argv[2]
    print(json.dumps({"fusion": fusion, "gate": gate}[what]() if what != "keys" else keys(*sys.argv[3:5])))
