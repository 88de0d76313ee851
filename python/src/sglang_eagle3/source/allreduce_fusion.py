"""What SGLang will do with ``--enable-flashinfer-allreduce-fusion`` on a given GPU generation, read from the tree.

0.5.9: the runtime gate apply_flashinfer_allreduce_fusion (layers/communicator.py) only lets listed SM generations
through; server_args.py auto-enables it for some. Elsewhere the flag is accepted and silently ignored. FlashInfer's
JIT comm module (flashinfer/jit/comm.py) is only built for some majors. Later releases (PR #30700): the flag is the
"auto" backend, whose resolver (_resolve_backend) raises at start-up on GPUs it does not admit, a patched tree may
admit SM120 under an opt-in condition (read, not assumed), and a run-time gate decides whether layers apply it.
"""

from __future__ import annotations

import ast
import re

from .flag_effects import Effect, FlagEffect, _assignments, _sm_majors, _value
from .index import SourceIndex, SourceLayoutError, expect

FUSION_FLAG = "--enable-flashinfer-allreduce-fusion"


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
    gate = next((n for n in module.body if isinstance(n, ast.FunctionDef)
                 and n.name == "apply_flashinfer_allreduce_fusion"), None)  # fmt: skip
    gate = expect(gate, f"apply_flashinfer_allreduce_fusion in {index.rel(comm_path)}")
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
    # srt/environ.py EnvBool
    missing = [v for v in switches if environment.get(v, "").strip().lower() not in ("true", "1", "yes", "y")]
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
