"""What SGLang will do with the two all-reduce optimisations on a given GPU generation.

Read from the installed source, so a patched tree and a pristine one give different
answers:

- ``--enable-torch-symm-mem``: TorchSymmMemCommunicator looks the compute capability
  major up in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (all_reduce_utils.py) and
  _WORLD_SIZES_MULTIMEM (torch_symm_mem.py). A missing key is a KeyError at start-up.
- ``--enable-flashinfer-allreduce-fusion``: the runtime gate
  apply_flashinfer_allreduce_fusion (layers/communicator.py) only lets listed SM
  generations through; server_args.py auto-enables it for some. Elsewhere the flag is
  accepted and silently ignored. FlashInfer's JIT comm module (flashinfer/jit/comm.py)
  is only built for some majors.
"""

from __future__ import annotations

import ast
import enum
import re
from dataclasses import dataclass

from .source_index import SourceIndex, SourceLayoutError, expect

SYMM_MEM_FLAG = "--enable-torch-symm-mem"
FUSION_FLAG = "--enable-flashinfer-allreduce-fusion"


class Effect(enum.StrEnum):
    """What SGLang will do with a flag on this GPU generation."""

    NOT_REQUESTED = "not requested"
    CRASH = "crash"  # the server dies at start-up
    DISABLED = "disabled"  # accepted, then turned off by SGLang itself
    LOADS = "loads"  # starts; may still disable itself at run time (see the warning)
    ACTIVE = "active"  # in effect because it was asked for
    AUTO = "auto"  # SGLang turns it on by itself here
    IGNORED = "ignored"  # accepted and silently without effect


@dataclass
class FlagEffect:
    flag: str
    requested: bool
    effect: Effect
    detail: str
    warning: str | None = None  # something the user should know even though it starts


@dataclass
class AllReduceEffects:
    compute_capability: str
    tp_size: int
    torch_symm_mem: FlagEffect
    allreduce_fusion: FlagEffect


def _value(node: ast.expr, names: dict):
    """Evaluate a constant expression such as ``{9: {2: 64 * MiB}}`` without eval()."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        left, right = _value(node.left, names), _value(node.right, names)
        return left * right if isinstance(node.op, ast.Mult) else left + right
    if isinstance(node, ast.Dict):
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, names) for e in node.elts]
    raise ValueError(f"not a constant expression: {ast.unparse(node)}")


def _assignments(body: list[ast.stmt]) -> dict[str, ast.Assign]:
    return {
        t.id: node for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
    }


def _constants(body: list[ast.stmt]) -> dict:
    names: dict = {}
    for name, node in _assignments(body).items():
        try:
            names[name] = _value(node.value, names)
        except (ValueError, KeyError):
            pass
    return names


def _sm_majors(index: SourceIndex, function_name: str) -> list[int]:
    """``is_sm120_supported`` -> [12], from its partial(..., device_capability_majors=[12])."""
    common = index.tree.srt / "utils" / "common.py"
    node = _assignments(index.module(common).body).get(function_name)
    if node is None:
        match = re.fullmatch(r"is_sm(\d+)_supported", function_name)
        return [int(match.group(1)) // 10] if match else []
    for kw in (k for n in ast.walk(node.value) if isinstance(n, ast.Call) for k in n.keywords):
        if kw.arg == "device_capability_majors":
            return _value(kw.value, {})
    return []


def torch_symm_mem_effect(index: SourceIndex, major: int, tp_size: int, requested: bool) -> FlagEffect:
    comm_dir = index.tree.srt / "distributed" / "device_communicators"
    utils_path, comm_path = comm_dir / "all_reduce_utils.py", comm_dir / "torch_symm_mem.py"
    sizes = expect(
        _constants(index.module(utils_path).body).get("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"),
        f"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES in {index.rel(utils_path)}",
    )
    cls = expect(
        index.find_class_in(comm_path, "TorchSymmMemCommunicator"),
        f"TorchSymmMemCommunicator in {index.rel(comm_path)}",
    )
    multimem = expect(
        _constants(cls.body).get("_WORLD_SIZES_MULTIMEM"), "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM"
    )
    minimum = next(
        (
            n.comparators[0].value
            for n in ast.walk(cls)
            if isinstance(n, ast.Compare)
            and ast.unparse(n.left) == "self.device_capability"
            and isinstance(n.ops[0], ast.Lt)
            and isinstance(n.comparators[0], ast.Constant)
        ),
        0,
    )

    def line(table: str) -> str:
        lineno = next(
            (n.lineno for n in ast.walk(cls) if isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith(table)),
            cls.lineno,
        )
        return f"{index.rel(comm_path)}:{lineno}"

    flag = SYMM_MEM_FLAG
    if not requested:
        return FlagEffect(flag, False, Effect.NOT_REQUESTED, "")
    if major < minimum:
        return FlagEffect(
            flag, True, Effect.DISABLED, f"capability major {major} < {minimum}: the communicator disables itself"
        )
    if major not in sizes:
        return FlagEffect(
            flag,
            True,
            Effect.CRASH,
            f"KeyError: {major} at {line('TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES')}: "
            f"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has keys {sorted(sizes)} only",
        )
    if tp_size not in sizes[major]:
        return FlagEffect(
            flag, True, Effect.DISABLED, f"world size {tp_size} not in {sorted(sizes[major])} for SM{major}x: disabled"
        )
    if major not in multimem:
        return FlagEffect(
            flag,
            True,
            Effect.CRASH,
            f"KeyError: {major} at {line('_WORLD_SIZES_MULTIMEM')} on the first all-reduce: "
            f"_WORLD_SIZES_MULTIMEM has keys {sorted(multimem)} only",
        )
    kernel = "multimem" if tp_size in multimem[major] else "two-shot"
    return FlagEffect(
        flag,
        True,
        Effect.LOADS,
        f"loads, {kernel} kernel, buffer {sizes[major][tp_size] // (1 << 20)} MiB",
        warning=(
            f"{flag}: the communicator disables itself at start-up when the GPUs offer no "
            "multicast (handle.multicast_ptr == 0), as is likely on PCIe hosts without NVSwitch; "
            "look for 'multicast operations are not supported' in the server log"
        ),
    )


def _flashinfer_jit_majors(index: SourceIndex) -> tuple[list[int] | None, str | None]:
    """Majors FlashInfer's TRT-LLM comm module is compiled for, if FlashInfer sits beside SGLang."""
    comm = index.tree.root / "flashinfer" / "jit" / "comm.py"
    try:
        module = index.module(comm)
    except SourceLayoutError:  # no FlashInfer beside SGLang, or not one this tool can read
        return None, None
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef) and node.name == "gen_trtllm_comm_module":
            for kw in (k for n in ast.walk(node) if isinstance(n, ast.Call) for k in n.keywords):
                if kw.arg == "supported_major_versions":
                    return _value(kw.value, {}), f"flashinfer/jit/comm.py:{kw.value.lineno}"
    return None, None


def allreduce_fusion_effect(index: SourceIndex, major: int, requested: bool) -> FlagEffect:
    comm_path = index.tree.srt / "layers" / "communicator.py"
    module = index.module(comm_path)
    gate = expect(
        next(
            (
                n
                for n in module.body
                if isinstance(n, ast.FunctionDef) and n.name == "apply_flashinfer_allreduce_fusion"
            ),
            None,
        ),
        f"apply_flashinfer_allreduce_fusion in {index.rel(comm_path)}",
    )
    module_assigns = _assignments(module.body)
    gate_majors: set[int] = set()
    for name in {
        n.id for n in ast.walk(gate) if isinstance(n, ast.Name) and re.fullmatch(r"_is_sm\d+_supported", n.id)
    }:
        assignment = expect(module_assigns.get(name), f"{name} = ... in {index.rel(comm_path)}")
        calls = [
            c.func.id for c in ast.walk(assignment.value) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
        ]
        for call in calls:
            gate_majors.update(_sm_majors(index, call))

    auto_majors: set[int] = set()
    for node in ast.walk(index.module(index.tree.srt / "server_args.py")):
        if isinstance(node, ast.If) and any(
            isinstance(s, ast.Assign)
            and ast.unparse(s.targets[0]) == "self.enable_flashinfer_allreduce_fusion"
            and isinstance(s.value, ast.Constant)
            and s.value.value is True
            for s in node.body
        ):
            for call in ast.walk(node.test):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("is_sm"):
                    auto_majors.update(_sm_majors(index, call.func.id))

    gate_loc = f"{index.rel(comm_path)}:{gate.lineno}"
    allowed = ", ".join(f"SM{m}x" for m in sorted(gate_majors))
    if major in auto_majors:
        return FlagEffect(FUSION_FLAG, requested, Effect.AUTO, f"auto-enabled on SM{major}x for the supported models")
    if not requested:
        return FlagEffect(FUSION_FLAG, False, Effect.NOT_REQUESTED, "")
    if major not in gate_majors:
        return FlagEffect(
            FUSION_FLAG,
            True,
            Effect.IGNORED,
            f"accepted but silently ignored: the runtime gate ({gate_loc}) allows {allowed} only",
            warning=f"{FUSION_FLAG} is ignored on SM{major}x by this SGLang ({gate_loc} allows {allowed})",
        )
    jit_majors, jit_loc = _flashinfer_jit_majors(index)
    warning = None
    if jit_majors is not None and major not in jit_majors:
        warning = (
            f"{FUSION_FLAG} passes SGLang's gate on SM{major}x, but FlashInfer builds its comm module for "
            f"majors {jit_majors} only ({jit_loc}): expect 'No supported CUDA architectures found' when it JIT-compiles"
        )
    elif jit_majors is None:
        warning = (
            f"{FUSION_FLAG} on SM{major}x is opt-in and unproven: FlashInfer 0.6.3 compiles its comm module "
            "for SM9x/SM10x only and the fused kernels need peer-to-peer access; check the server log"
        )
    return FlagEffect(
        FUSION_FLAG,
        True,
        Effect.ACTIVE,
        f"active because it was requested explicitly ({gate_loc} allows {allowed})",
        warning,
    )


# NVIDIA GPU generations: Maxwell (5.x) to Blackwell (10.x, 12.x).
KNOWN_MAJORS = range(5, 13)


def capability_major(compute_capability: str) -> int:
    """12 for "12.0"; ValueError for anything that is not an NVIDIA compute capability."""
    match = re.fullmatch(r"(\d{1,2})\.(\d)", compute_capability.strip())
    if not match:
        raise ValueError(f"compute capability {compute_capability!r} is not of the form 12.0 (major.minor)")
    major = int(match.group(1))
    if major not in KNOWN_MAJORS:
        raise ValueError(
            f"compute capability {compute_capability!r} is no NVIDIA GPU's ({KNOWN_MAJORS[0]}.0 to "
            f"{KNOWN_MAJORS[-1]}.x; RTX PRO 6000 Blackwell is 12.0, H100/H200 9.0)"
        )
    return major


def effects(
    index: SourceIndex, compute_capability: str, tp_size: int, torch_symm_mem: bool, allreduce_fusion: bool
) -> AllReduceEffects:
    major = capability_major(compute_capability)
    symm = torch_symm_mem_effect(index, major, tp_size, torch_symm_mem)
    fusion = allreduce_fusion_effect(index, major, allreduce_fusion)
    return AllReduceEffects(compute_capability, tp_size, symm, fusion)
