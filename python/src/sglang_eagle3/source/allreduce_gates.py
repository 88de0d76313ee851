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

from ..errors import shown
from .index import SourceIndex, SourceLayoutError, expect

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
    UNKNOWN = "not checked"  # depends on something the source does not let us decide


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
    pcie_ipc: FlagEffect | None = None  # None: this SGLang has no PCIe-IPC all-reduce and it was not asked for
    topology: str = "pcie"
    topology_assumed: bool = True
    topology_how: str | None = None  # where it was read (nvidia-smi topo -m), or given (--topology)

    @property
    def flags(self) -> list[FlagEffect]:
        return [f for f in (self.torch_symm_mem, self.allreduce_fusion, self.pcie_ipc) if f is not None]


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


def _lookup(cls: ast.ClassDef, table: str) -> tuple[int | None, bool]:
    """(line, tolerant) of the first lookup of ``table``: ``table.get(key)`` tolerates a missing key, ``table[key]``
    raises KeyError."""
    for n in ast.walk(cls):
        if isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith(table):
            return n.lineno, False
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get":
            if ast.unparse(n.func.value).endswith(table):
                return n.lineno, True
    return None, False


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
    minimum, minimum_line = next(
        (
            (n.comparators[0].value, n.lineno)
            for n in ast.walk(cls)
            if isinstance(n, ast.Compare)
            and ast.unparse(n.left) == "self.device_capability"
            and isinstance(n.ops[0], ast.Lt)
            and isinstance(n.comparators[0], ast.Constant)
        ),
        (0, cls.lineno),
    )
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
        return FlagEffect(
            flag,
            True,
            Effect.CRASH,
            f"KeyError: {major} at {line('_WORLD_SIZES_MULTIMEM')} on the first all-reduce: "
            f"_WORLD_SIZES_MULTIMEM has keys {sorted(multimem)} only",
        )
    kernel = "multimem" if tp_size in multimem.get(major, ()) else "two-shot"
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


def allreduce_fusion_effect(index: SourceIndex, major: int, requested: bool, environment: dict | None = None):
    resolver = index.tree.srt / "layers" / "flashinfer_comm_fusion.py"
    if not (index.tree.srt / "layers" / "communicator.py").is_file() and resolver.is_file():
        return _resolver_fusion_effect(index, resolver, major, requested, environment or {})
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
    gate_majors = _gate_majors(index, module, gate, comm_path)
    auto_majors = _server_args_auto_majors(index)
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


def _gate_majors(index: SourceIndex, module: ast.Module, gate: ast.FunctionDef, comm_path) -> set[int]:
    """The majors the run-time gate admits: what the ``_is_smNN_supported`` names it tests are assigned from."""
    module_assigns = _assignments(module.body)
    majors: set[int] = set()
    names = {n.id for n in ast.walk(gate) if isinstance(n, ast.Name) and re.fullmatch(r"_is_sm\d+_supported", n.id)}
    for name in names:
        assignment = expect(module_assigns.get(name), f"{name} = ... in {index.rel(comm_path)}")
        for c in ast.walk(assignment.value):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                majors.update(_sm_majors(index, c.func.id))
    return majors


def _server_args_auto_majors(index: SourceIndex) -> set[int]:
    """The majors server_args.py switches the fusion on for by itself (``if is_smNN...(): self.enable_... = True``)."""
    majors: set[int] = set()
    for node in ast.walk(index.module(index.tree.srt / "server_args.py")):
        if isinstance(node, ast.If) and any(_sets_fusion_on(s) for s in node.body):
            for call in ast.walk(node.test):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("is_sm"):
                    majors.update(_sm_majors(index, call.func.id))
    return majors


def _sets_fusion_on(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Assign)
        and ast.unparse(statement.targets[0]) == "self.enable_flashinfer_allreduce_fusion"
        and isinstance(statement.value, ast.Constant)
        and statement.value.value is True
    )


def _sm(node: ast.AST) -> set[int]:
    """Majors named by ``get_platform().is_sm90`` / ``is_sm100`` / ``is_sm120`` in an expression."""
    names = [
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(node)
        if isinstance(n, (ast.Attribute, ast.Name))
    ]
    return {int(m.group(1)) // 10 for m in (re.fullmatch(r"_?is_sm(\d+)(?:_supported)?", x) for x in names) if m}


sm_majors = _sm  # judging/settings_rules.py reads the majors a resolver lets through the same way


def _env_switches(node: ast.AST) -> list[str]:
    """``envs.NAME.get()`` calls in an expression: the SGLang variables it reads."""
    return [
        n.func.value.attr for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
        and isinstance(n.func.value, ast.Attribute) and ast.unparse(n.func.value.value) == "envs"
    ]  # fmt: skip


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("true", "1", "yes", "y")  # srt/environ.py EnvBool


def _resolver_fusion_effect(index: SourceIndex, resolver, major: int, requested: bool, environment: dict):
    """Releases after 0.5.9 (PR #30700): --enable-flashinfer-allreduce-fusion becomes backend "auto", and
    _resolve_backend raises ValueError on GPUs its first test does not admit, when the workspaces are built at
    start-up. A patched tree may admit SM120 under an extra condition (opt-in): that condition is read, not assumed."""
    where, admitted, conditional = _resolver_gate(index, resolver)
    allowed = ", ".join(f"SM{m}x" for m in sorted(admitted))
    auto = _auto_majors(index)
    if major in auto[0]:
        return FlagEffect(FUSION_FLAG, requested, Effect.AUTO, f"auto-enabled on SM{major}x for the supported "
                          f"models ({auto[1]})")  # fmt: skip
    if not requested:
        return FlagEffect(FUSION_FLAG, False, Effect.NOT_REQUESTED, "")
    runtime = _runtime_fusion_gate(index)
    if major in admitted:
        return _applied(major, f"{where} admits {allowed}", runtime)
    crash = (
        f"ValueError at {where} when the fusion workspaces are built at start-up: the backend resolver admits "
        f"{allowed} only"
    )
    if runtime is not None and major in runtime[0]:  # a tree with the run-time half of the opt-in only
        crash += f" (the run-time gate {runtime[1]} would apply it on SM{major}x, but start-up stops first)"
    if major not in conditional:
        return FlagEffect(FUSION_FLAG, True, Effect.CRASH, crash)
    return _opt_in_effect(major, where, conditional[major], crash, runtime, environment)


def _resolver_gate(index: SourceIndex, resolver) -> tuple[str, set[int], dict[int, list[ast.expr]]]:
    """_resolve_backend's ``if not (...): raise``: where it is, the majors it admits outright, and those it admits
    under further conditions (``is_sm120() and envs.X.get()``), with the conditions."""
    module = index.module(resolver)
    fn = expect(
        next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "_resolve_backend"), None),
        f"_resolve_backend in {index.rel(resolver)}",
    )
    gate = expect(
        next((n for n in fn.body if isinstance(n, ast.If) and any(isinstance(b, ast.Raise) for b in n.body)), None),
        f"a capability test that raises in {index.rel(resolver)} _resolve_backend",
    )
    where = f"{index.rel(resolver)}:{gate.lineno}"
    test = gate.test.operand if isinstance(gate.test, ast.UnaryOp) and isinstance(gate.test.op, ast.Not) else None
    if test is None:
        raise SourceLayoutError(f"{where}: expected `if not (...): raise`, found `if {ast.unparse(gate.test)}`")
    admitted, conditional = set(), {}
    for term in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]:
        majors = _sm(term)
        if isinstance(term, ast.BoolOp) and isinstance(term.op, ast.And):
            rest = [v for v in term.values if not _sm(v)]
            conditional.update(dict.fromkeys(majors, rest))
        else:
            admitted |= majors
    return where, admitted, conditional


def _opt_in_effect(
    major: int,
    where: str,
    conditions: list[ast.expr],
    crash: str,
    runtime: tuple[set[int], str] | None,
    environment: dict,
) -> FlagEffect:
    """The resolver admits SM``major`` only under ``conditions``: applied when each is a switch the environment
    sets, a crash when one is not set, unknown when one is not a switch the settings can say."""
    condition = " and ".join(ast.unparse(c) for c in conditions)
    switches = [v for c in conditions for v in _env_switches(c)]
    if len(switches) != len(conditions):
        return FlagEffect(FUSION_FLAG, True, Effect.UNKNOWN, f"{where} admits SM{major}x only if {condition}; "
                          "whether that holds at start-up is not read from the settings")  # fmt: skip
    missing = [v for v in switches if not _truthy(environment.get(v))]
    if missing:
        return FlagEffect(FUSION_FLAG, True, Effect.CRASH, f"{crash}, and SM{major}x only with {condition} (opt-in: "
                          f"set {', '.join(f'{v}=1' for v in missing)} in environment)")  # fmt: skip
    return _applied(major, f"{where} admits SM{major}x by explicit opt-in: {condition}", runtime)


RUNTIME_GATE = "flashinfer_ar_fusion_applies"


def _runtime_fusion_gate(index: SourceIndex) -> tuple[set[int], str] | None:
    """The majors the run-time gate (0.5.23: ``flashinfer_ar_fusion_applies`` in
    srt/layers/layer_boundary/residual/add_norm.py) applies the fusion on, from the ``_is_smNN_supported``
    names it tests and what the module sets them to; None when this tree has no such gate."""
    needle = f"def {RUNTIME_GATE}("
    for path in sorted((index.tree.srt / "layers").rglob("*.py")):
        if needle not in path.read_text(errors="replace"):
            continue
        module = index.module(path)
        fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == RUNTIME_GATE)
        assigns = _assignments(module.body)
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and re.fullmatch(r"_is_sm\d+_supported", n.id)}
        majors = {m for name in names if name in assigns for m in _sm(assigns[name].value)}
        return majors, f"{index.rel(path)}:{fn.lineno}"
    return None


def _applied(major: int, admitted: str, runtime: tuple[set[int], str] | None) -> FlagEffect:
    """The resolver let SM``major`` through at start-up: does the run-time gate then apply the fusion?"""
    unproven = (
        f"{FUSION_FLAG} on SM{major}x is opt-in and unproven: the fused kernels need peer-to-peer access, "
        "which PCIe hosts may lack (upstream PR #32330 regressed TP4); check the server log"
    )
    if runtime is None:
        return FlagEffect(
            FUSION_FLAG, True, Effect.UNKNOWN,
            f"the backend resolver lets it through ({admitted}); no run-time gate {RUNTIME_GATE} was found, so "
            "whether layers apply it is not checked",
        )  # fmt: skip
    majors, gate = runtime
    applied = ", ".join(f"SM{m}x" for m in sorted(majors))
    if major not in majors:
        return FlagEffect(
            FUSION_FLAG, True, Effect.IGNORED,
            f"accepted but never applied: the backend resolver lets it through ({admitted}), so start-up builds the "
            f"fusion workspaces, but the run-time gate ({gate}) applies it on {applied} only",
            warning=f"{FUSION_FLAG} is ignored on SM{major}x by this SGLang ({gate} applies it on {applied})",
        )  # fmt: skip
    return FlagEffect(
        FUSION_FLAG, True, Effect.ACTIVE,
        f"active because it was requested ({admitted}; the run-time gate {gate} applies it on {applied})",
        warning=unproven,
    )  # fmt: skip


BACKEND_FIELD = "flashinfer_allreduce_fusion_backend"


def _auto_majors(index: SourceIndex) -> tuple[set[int], str | None]:
    """Where SGLang turns fusion on by itself: an `if` returning {"flashinfer_allreduce_fusion_backend": ...}."""
    path = index.tree.srt / "arg_groups" / "overrides.py"
    try:
        module = index.module(path)
    except SourceLayoutError:
        return set(), None
    for node in ast.walk(module):
        if isinstance(node, ast.If) and any(
            isinstance(r, ast.Return) and isinstance(r.value, ast.Dict)
            and any(isinstance(k, ast.Constant) and k.value == BACKEND_FIELD for k in r.value.keys)
            and not (isinstance(r.value.values[0], ast.Constant) and r.value.values[0].value is None)
            for r in node.body
        ):  # fmt: skip
            return _sm(node.test), f"{index.rel(path)}:{node.lineno}"
    return set(), None


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
