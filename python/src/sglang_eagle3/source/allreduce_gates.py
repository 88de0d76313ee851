"""What SGLang will do with the all-reduce optimisations on a given GPU generation, read from the installed source,
so a patched tree and a pristine one give different answers: torch symmetric memory (a capability major missing
from its tables is a KeyError at start-up), FlashInfer's fusion (allreduce_fusion.py) and the PCIe-IPC all-reduce.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..errors import shown
from .allreduce_fusion import _env_switches, allreduce_fusion_effect
from .flag_effects import Effect, FlagEffect, _assignments, _constants, _lookup
from .index import SourceIndex, SourceLayoutError, expect

SYMM_MEM_FLAG = "--enable-torch-symm-mem"


@dataclass
class AllReduceEffects:
    compute_capability: str
    tp_size: int
    torch_symm_mem: FlagEffect
    allreduce_fusion: FlagEffect
    pcie_ipc: FlagEffect | None = None  # None: this SGLang has no PCIe-IPC all-reduce and it was not asked for
    topology: str = "pcie"
    topology_assumed: bool = True
    topology_how: str | None = None  # where it was read (nvidia-smi topo -m), or given (--topology)

    @property
    def flags(self) -> list[FlagEffect]:
        return [f for f in (self.torch_symm_mem, self.allreduce_fusion, self.pcie_ipc) if f is not None]


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
    minimum, minimum_line = next(((n.comparators[0].value, n.lineno) for n in ast.walk(cls)
                                  if isinstance(n, ast.Compare) and ast.unparse(n.left) == "self.device_capability"
                                  and isinstance(n.ops[0], ast.Lt) and isinstance(n.comparators[0], ast.Constant)),
                                 (0, cls.lineno))  # fmt: skip
    world_size_line = next(
        (n.lineno for n in ast.walk(cls) if isinstance(n, ast.Compare) and ast.unparse(n.left) == "self.world_size"
         and isinstance(n.ops[0], ast.NotIn)),
        cls.lineno,
    )  # fmt: skip

    def line(table: str) -> str:
        return f"{index.rel(comm_path)}:{_lookup(cls, table)[0] or cls.lineno}"

    flag = SYMM_MEM_FLAG
    if not requested:
        return FlagEffect(flag, False, Effect.NOT_REQUESTED, "")

    def disabled(why: str, where: str, on: str) -> FlagEffect:
        """SGLang turns the requested flag off by itself: one judgement whatever the reason (a WARN)."""
        return FlagEffect(
            flag, True, Effect.DISABLED, f"{why}: the communicator disables itself ({where}); all-reduce falls back",
            warning=f"{flag} is requested but not active {on}: unset enable_torch_symm_mem",
        )  # fmt: skip

    if major < minimum:
        return disabled(f"capability major {major} < {minimum}", f"{index.rel(comm_path)}:{minimum_line}",
                        f"on SM{major}x")  # fmt: skip
    if major not in sizes and _lookup(cls, "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES")[1]:
        return disabled(
            f"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no SM{major}x entry (keys {sorted(sizes)})",
            line("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"), f"on SM{major}x",
        )  # fmt: skip
    if major not in sizes:
        return FlagEffect(
            flag,
            True,
            Effect.CRASH,
            f"KeyError: {major} at {line('TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES')}: "
            f"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has keys {sorted(sizes)} only",
        )
    if tp_size not in sizes[major]:
        return disabled(f"world size {tp_size} not in {sorted(sizes[major])} for SM{major}x",
                        f"{index.rel(comm_path)}:{world_size_line}", f"at tp {tp_size}")  # fmt: skip
    if major not in multimem and not _lookup(cls, "_WORLD_SIZES_MULTIMEM")[1]:
        return FlagEffect(flag, True, Effect.CRASH, f"KeyError: {major} at {line('_WORLD_SIZES_MULTIMEM')} on the "
                          f"first all-reduce: _WORLD_SIZES_MULTIMEM has keys {sorted(multimem)} only")  # fmt: skip
    kernel = "multimem" if tp_size in multimem.get(major, ()) else "two-shot"
    buffer = sizes[major][tp_size] // (1 << 20)
    return FlagEffect(flag, True, Effect.LOADS, f"loads, {kernel} kernel, buffer {buffer} MiB",
                      warning=f"{flag}: the communicator disables itself at start-up when the GPUs offer no multicast "
                      "(handle.multicast_ptr == 0), as is likely on PCIe hosts without NVSwitch; look for 'multicast "
                      "operations are not supported' in the server log")  # fmt: skip


PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


def pcie_ipc_effect(
    index: SourceIndex, tp_size: int, requested: bool, topology: str, nnodes: int = 1
) -> FlagEffect | None:
    """FlashInfer's PCIe-IPC all-reduce (upstream PR #34528, srt/distributed/device_communicators/pcie_ipc_ar.py):
    built for the tp group when the variable is set (eligible_group), for the world sizes the kernels support, if
    FlashInfer has it; chosen for a reduction after custom all-reduce (parallel_state.py), for bf16 tensors up to
    the decode-sized workspace. It has no compute capability test. It is for one node (the module says so): a tp
    group over ``nnodes`` > 1 hosts fails to build its workspace, and SGLang keeps the reductions on NCCL."""
    path = index.tree.srt / "distributed" / "device_communicators" / "pcie_ipc_ar.py"
    if not path.is_file():
        if not requested:
            return None
        return FlagEffect(PCIE_IPC_ENV, True, Effect.IGNORED, f"this SGLang has no {index.rel(path)}",
                          warning=f"{PCIE_IPC_ENV} is ignored: this SGLang has no PCIe-IPC all-reduce")  # fmt: skip
    module = index.module(path)
    eligible = expect(
        next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "eligible_group"), None),
        f"eligible_group in {index.rel(path)}",
    )
    switch = next((n for n in ast.walk(eligible) if isinstance(n, ast.Call) and _env_switches(n)), None)
    if switch is None or PCIE_IPC_ENV not in _env_switches(switch):
        raise SourceLayoutError(f"{index.rel(path)}:{eligible.lineno}: eligible_group does not read {PCIE_IPC_ENV}")
    gate = f"{index.rel(path)}:{switch.lineno}"
    if not requested:
        return FlagEffect(PCIE_IPC_ENV, False, Effect.NOT_REQUESTED, f"off unless {PCIE_IPC_ENV} is set ({gate})")
    sizes_node = _assignments(module.body).get("_SUPPORTED_WORLD_SIZES")
    sizes = expect(
        _constants(module.body).get("_SUPPORTED_WORLD_SIZES"), f"_SUPPORTED_WORLD_SIZES in {index.rel(path)}"
    )
    unset = "unset pcie_ipc_allreduce"
    if tp_size not in sizes:
        return FlagEffect(PCIE_IPC_ENV, True, Effect.DISABLED, f"world size {tp_size} not in {sorted(sizes)} "
                          f"({index.rel(path)}:{sizes_node.lineno}): the communicator is not built",
                          warning=f"{PCIE_IPC_ENV} is requested but not active at tp {tp_size}: {unset}")  # fmt: skip
    across = _pcie_ipc_across_nodes(index, path, module, nnodes) if nnodes > 1 else None
    if across is not None:
        return FlagEffect(PCIE_IPC_ENV, True, Effect.DISABLED, across,
                          warning=f"{PCIE_IPC_ENV} is requested but not active across {nnodes} nodes: "
                          f"{unset} for a multi-node group")  # fmt: skip
    init = index.tree.root / "flashinfer" / "comm" / "__init__.py"
    if init.is_file() and "PcieIpcAllReduceWorkspace" not in init.read_text(errors="replace"):
        return FlagEffect(PCIE_IPC_ENV, True, Effect.DISABLED, "the FlashInfer beside this SGLang has no "
                          "PcieIpcAllReduceWorkspace: it falls back to NCCL",
                          warning=f"{PCIE_IPC_ENV} is requested but not active with this FlashInfer: "
                          f"{unset}")  # fmt: skip
    order = _pcie_ipc_order(index)
    detail = (
        f"active ({gate}), world size {tp_size}, no compute capability test; serves bf16 reductions up to the "
        f"decode-sized workspace (max_bs x draft tokens x hidden), NCCL the larger (prefill) ones"
    )
    warning = None if init.is_file() else (
        f"{PCIE_IPC_ENV}: whether the FlashInfer SGLang loads has PcieIpcAllReduceWorkspace is not checked "
        "(none beside this SGLang); without it the server logs 'no pcie_ipc_comm' and uses NCCL"
    )  # fmt: skip
    if topology == "nvlink" and tp_size > 2:
        return FlagEffect(PCIE_IPC_ENV, True, Effect.LOADS, f"loads, but on NVLink custom all-reduce is tried first "
                          f"({order}) and takes the reductions it accepts", warning)  # fmt: skip
    return FlagEffect(PCIE_IPC_ENV, True, Effect.ACTIVE, f"{detail}; custom all-reduce, tried first ({order}), is "
                      f"off on more than two PCIe-only GPUs", warning)  # fmt: skip


def _pcie_ipc_across_nodes(index: SourceIndex, path, module: ast.Module, nnodes: int) -> str | None:
    """Why the PCIe-IPC all-reduce is not built across ``nnodes`` hosts, read from the tree: its module is for
    intra-node machines (the docstring's first line), and a workspace that fails to build leaves the reductions on
    NCCL (the warning of the ``except`` around it); FlashInfer, where it sits beside the tree, refuses a group that
    spans hosts. None where the module does not say it is intra-node."""
    doc = module.body[0] if module.body and isinstance(module.body[0], ast.Expr) else None
    first = (ast.get_docstring(module, clean=True) or "").partition("\n")[0]
    if doc is None or "intra-node" not in first:
        return None
    fallback = next(
        (n.lineno for h in ast.walk(module) if isinstance(h, ast.ExceptHandler) for n in ast.walk(h)
         if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".warning") and n.args
         and isinstance(n.args[0], ast.Constant) and "stay on NCCL" in str(n.args[0].value)),
        None,
    )  # fmt: skip
    said = f"{index.rel(path)}:{doc.lineno}: {first!r}"
    topology = index.tree.root / "flashinfer" / "comm" / "pcie_ipc_topology.py"
    line = next((n.lineno for n in ast.walk(index.module(topology)) if isinstance(n, ast.Raise)
                 and "intra-node only" in ast.unparse(n)), None) if topology.is_file() else None  # fmt: skip
    refused = (
        f" (FlashInfer refuses a group that spans hosts: flashinfer/comm/pcie_ipc_topology.py:{line})" if line else ""
    )
    kept = f"SGLang keeps the reductions on NCCL ({index.rel(path)}:{fallback})" if fallback else "NCCL serves them"
    return (
        f"the tp group spans {nnodes} nodes and the PCIe-IPC all-reduce is for one ({said}): its workspace fails to "
        f"build{refused} and {kept}"
    )


def _pcie_ipc_order(index: SourceIndex) -> str:
    """Where parallel_state.py picks "ca" before "pcie_ipc" (file:line of each return)."""
    path = index.tree.srt / "distributed" / "parallel_state.py"
    lines = {
        n.value.value: n.lineno for n in ast.walk(index.module(path))
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Constant) and n.value.value in ("ca", "pcie_ipc")
    }  # fmt: skip
    utils = path.parent / "device_communicators" / "custom_all_reduce_utils.py"
    pcie_off = next(
        (n.lineno for n in ast.walk(index.module(utils)) if isinstance(n, ast.If)
         and ast.unparse(n.test).replace("(", "").replace(")", "") == "world_size > 2 and not full_nvlink"),
        "?",
    )  # fmt: skip
    return (
        f"{index.rel(path)}:{lines.get('ca', '?')} before :{lines.get('pcie_ipc', '?')}; off on PCIe: "
        f"{index.rel(utils)}:{pcie_off}"
    )


# NVIDIA GPU generations: Maxwell (5.x) to Blackwell (10.x, 12.x).
KNOWN_MAJORS = range(5, 13)


def capability_major(compute_capability: str) -> int:
    """12 for "12.0"; ValueError for anything that is not an NVIDIA compute capability."""
    match = re.fullmatch(r"(\d{1,2})\.(\d)", compute_capability.strip())
    if not match:
        raise ValueError(f"compute capability {shown(compute_capability)} is not of the form 12.0 (major.minor)")
    major = int(match.group(1))
    if major not in KNOWN_MAJORS:
        raise ValueError(
            f"compute capability {shown(compute_capability)} is no NVIDIA GPU's ({KNOWN_MAJORS[0]}.0 to "
            f"{KNOWN_MAJORS[-1]}.x; RTX PRO 6000 Blackwell is 12.0, H100/H200 9.0)"
        )
    return major


TOPOLOGIES = ("pcie", "nvlink")


def effects(
    index: SourceIndex,
    compute_capability: str,
    tp_size: int,
    torch_symm_mem: bool,
    allreduce_fusion: bool,
    pcie_ipc: bool = False,
    topology: str | None = None,
    environment: dict | None = None,
    topology_how: str | None = None,
    nnodes: int = 1,
) -> AllReduceEffects:
    """``topology`` None: the tuned host's (PCIe), reported as assumed; ``topology_how``: where it was read;
    ``nnodes``: the hosts the tp group spans."""
    major = capability_major(compute_capability)
    if topology is not None and topology not in TOPOLOGIES:
        raise ValueError(f"topology {shown(topology)}: expected one of {', '.join(TOPOLOGIES)}")
    symm = torch_symm_mem_effect(index, major, tp_size, torch_symm_mem)
    fusion = allreduce_fusion_effect(index, major, allreduce_fusion, environment)
    ipc = pcie_ipc_effect(index, tp_size, pcie_ipc, topology or "pcie", nnodes)
    return AllReduceEffects(
        compute_capability, tp_size, symm, fusion, ipc, topology or "pcie", topology is None, topology_how
    )
