"""Can this SGLang tree serve the target with speculative decoding: the calls the speculative path makes on the
target, whether its class provides them, and the all-reduce requests on this GPU. ``sglang-eagle3 probe``
(commands/probe.py) prints it; preflight judges it as its ``probe`` finding.

It answers in well under a second, with no GPU and no weights, by reading SGLang's source: every call the
speculative path makes on the *target* model (in srt/speculative/, and in srt/model_executor/ when guarded by a
speculative condition) with the condition under which it runs; whether the architecture's class provides each
method (defined, inherited, or forwarded to an inner model); the all-reduce optimisations on the given compute
capability (allreduce_gates); and with a draft model, the draft checks (draft_check), which the caller adds (draft_check
reads patch check's outcomes, and patch check this module's defaults).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..serving import settings
from ..source import allreduce_gates, flag_effects, model_calls, spec_conditions
from ..source.index import SourceIndex
from ..source.model_class import lookup
from ..source.tree import SGLangTree
from ..trees import patchset
from . import findings
from .findings import Finding, Judged, Status

OK, WARN, FAIL = Status.OK, Status.WARN, Status.FAIL

DEFAULT_ARCH = "KimiK25ForConditionalGeneration"

# Receivers that denote the model a runner holds. In srt/speculative/ only the
# target worker's model counts; in srt/model_executor/ the runner's own model
# counts when the call is guarded by a speculative condition.
TARGET_RECEIVER_SUFFIX = "target_worker.model_runner.model"
RUNNER_RECEIVERS = {"self.model", "self.model_runner.model"}


class RunsWhen(enum.StrEnum):
    ALWAYS = "always"
    DEPENDS = "depends"  # on settings only known at start-up (e.g. the draft's config)


@dataclass
class CallSite:
    method: str
    location: str  # srt/speculative/eagle_worker.py:157
    function: str  # EAGLEWorker.__init__
    condition: str  # the guards, "always" if none
    worker: str | None = None  # worker class whose module this is, if chosen by create_worker
    worker_chosen_if: str | None = None  # create_worker's condition for that worker
    when: RunsWhen = RunsWhen.ALWAYS
    via: list[str] = field(default_factory=list)  # helper calls that lead here, "file:line in function"


@dataclass
class MethodCheck:
    method: str
    provided: bool
    how: str
    call_sites: list[CallSite] = field(default_factory=list)


@dataclass
class ProbeResult(Judged):
    sglang_root: str
    sglang_version: str | None
    arch: str
    algorithm: str
    class_location: str | None
    methods: list[MethodCheck]
    allreduce: allreduce_gates.AllReduceEffects
    arch_suggestions: list[str] = field(default_factory=list)
    draft: Any = None  # draft_check.DraftReport when a draft model was given (set by the caller)
    canonical_algorithm: str = ""  # the algorithm as SGLang names it (NEXTN -> EAGLE), for the draft checks
    # False when no call on the target was found even for EAGLE-3, which needs some: the tree calls the target
    # in a way this reader does not follow (0.5.23 goes through helpers taking the model as an argument).
    call_sites_read: bool = True
    apply_command: str = ""  # how to apply the patch set to this tree (the fix for a missing method)

    @property
    def missing(self) -> list[str]:
        return [m.method for m in self.methods if not m.provided]

    @property
    def findings(self) -> list[Finding]:
        """The target class, each method it must provide, each all-reduce flag, and the draft checks."""
        if self.class_location is None:
            hint = f"; did you mean {', '.join(self.arch_suggestions)}?" if self.arch_suggestions else ""
            found = [
                Finding("target class", FAIL, f"no class {self.arch} in {self.sglang_root}/sglang/srt/models{hint}")
            ]
        else:
            found = [Finding("target class", OK, self.arch, where=self.class_location)]
        found += [method_finding(m) for m in self.methods]
        if not self.call_sites_read:
            found.append(Finding("call sites", Status.NOT_CHECKED, UNREAD_CALL_SITES))
        found += [flag_finding(f) for f in self.allreduce.flags]
        found += [f.prefixed("draft") for f in self.draft.findings] if self.draft else []
        return found

    def to_dict(self) -> dict:
        data = asdict(self)
        data["draft"] = self.draft.to_dict() if self.draft else None
        data.update(findings.to_json(self.findings))
        return data


UNREAD_CALL_SITES = (
    "no call the speculative path makes on the target model was found in this SGLang's source (read: "
    f"...{TARGET_RECEIVER_SUFFIX}.m() in srt/speculative/, self.model.m() in srt/model_executor/ under a "
    "speculative condition, and the same in the SGLang helpers they hand the model to); which methods the "
    "target class must provide is not checked"
)


def method_finding(m: MethodCheck) -> Finding:
    """A method the speculative path calls on the target: OK if the class provides it, else FAIL."""
    if m.provided:
        return Finding(m.method, OK, m.how)
    return Finding(m.method, FAIL, f"{m.how}; first called at {m.call_sites[0].location}")


def flag_finding(flag: flag_effects.FlagEffect) -> Finding:
    """What SGLang does with an all-reduce flag: FAIL if it crashes the server; WARN with a warning, and whenever a
    requested flag ends up off (disabled or ignored: not what was asked for, whatever the reason); else OK."""
    off = flag.requested and flag.effect in (flag_effects.Effect.DISABLED, flag_effects.Effect.IGNORED)
    if off and not flag.warning:
        flag = replace(flag, warning=f"{flag.flag} is requested but not active")
    if flag.effect is flag_effects.Effect.CRASH:
        return Finding(flag.flag, FAIL, f"would crash the server: {flag.detail}")
    if flag.effect is flag_effects.Effect.UNKNOWN:
        return Finding(flag.flag, Status.NOT_CHECKED, flag.detail)
    effect = str(flag.effect)
    message = flag.detail if flag.detail.startswith(effect) else f"{effect}: {flag.detail}" if flag.detail else effect
    if flag.warning and flag.effect is not flag_effects.Effect.IGNORED:  # an ignored flag's detail says it
        message += f"; {flag.warning}"
    return Finding(flag.flag, WARN if flag.warning else OK, message)


# -- 1. call sites ---------------------------------------------------------------------


def _is_target(receiver: str) -> bool:
    return receiver.endswith(TARGET_RECEIVER_SUFFIX)


def find_call_sites(index: SourceIndex, algebra: spec_conditions.SpecAlgebra, algorithm: str) -> list[CallSite]:
    srt = index.tree.srt
    files = sorted((srt / "speculative").glob("*.py")) + sorted((srt / "model_executor").glob("*.py"))
    sites = []
    for path in files:
        in_speculative = path.parent.name == "speculative"
        worker = algebra.workers.get(path)
        if in_speculative:
            if worker is None:
                module_value: spec_conditions.Tri = None  # helper module: used by some worker
            else:
                module_value = spec_conditions.tri_or([algebra.path_value(p, algorithm) for p in worker[1]])
            if module_value is False:
                continue
        else:
            module_value = True
        is_model = _is_target if in_speculative else RUNNER_RECEIVERS.__contains__
        for qualname, func in model_calls.functions(index.module(path)):
            for call in model_calls.model_calls(index, path, qualname, func, is_model):
                if not in_speculative and not algebra.mentions_speculation(call.conditions):
                    continue
                value = spec_conditions.tri_and([module_value, algebra.path_value(call.conditions, algorithm)])
                if value is False:
                    continue
                sites.append(CallSite(
                    call.method, f"{index.rel(call.path)}:{call.line}", call.function,
                    algebra.describe([call.conditions], algorithm), worker[0] if worker else None,
                    algebra.describe(worker[1], algorithm) if worker else None,
                    RunsWhen.ALWAYS if value is True else RunsWhen.DEPENDS, list(call.via),
                ))  # fmt: skip
    return sites


# -- the probe ---------------------------------------------------------------------------


def probe(
    tree: SGLangTree,
    arch: str = DEFAULT_ARCH,
    algorithm: str = settings.default("speculative_algorithm"),
    compute_capability: str = settings.TUNED_COMPUTE_CAPABILITY,
    tp_size: int = settings.default("tp_size"),
    torch_symm_mem: bool = settings.default("enable_torch_symm_mem"),
    allreduce_fusion: bool = settings.default("enable_flashinfer_allreduce_fusion"),
    pcie_ipc: bool = settings.default("pcie_ipc_allreduce"),
    topology: str | None = None,
    environment: dict | None = None,
    topology_how: str | None = None,
    nnodes: int = settings.default("nnodes"),
) -> ProbeResult:
    """Raises ValueError on a bad algorithm or capability."""
    index = SourceIndex(tree)
    srt = tree.srt
    algebra = spec_conditions.load(index, sorted((srt / "model_executor").rglob("*.py")))
    canonical = algebra.canonical(algorithm)

    sites = find_call_sites(index, algebra, canonical)
    by_method: dict[str, list[CallSite]] = {}
    for site in sites:
        by_method.setdefault(site.method, []).append(site)

    # The default algorithm (EAGLE-3) always calls the target; finding none for it means the layout is not followed.
    eagle3 = algebra.canonical(settings.default("speculative_algorithm"))
    read = bool(sites) or bool(canonical != eagle3 and find_call_sites(index, algebra, eagle3))
    found = index.find_model_class(arch)
    methods = []
    for method, method_sites in by_method.items():
        if found is None:
            provided, how = False, "target class not found"
        else:
            provided, how = lookup(index, *found, method)
        methods.append(MethodCheck(method, provided, how, method_sites))

    allreduce = allreduce_gates.effects(
        index, compute_capability, tp_size, torch_symm_mem=torch_symm_mem, allreduce_fusion=allreduce_fusion,
        pcie_ipc=pcie_ipc, topology=topology, environment=environment, topology_how=topology_how, nnodes=nnodes,
    )  # fmt: skip
    algorithm_label = canonical if canonical == algorithm.upper() else f"{algorithm.upper()} (= {canonical})"
    location = f"{index.rel(found[0])}:{found[1].lineno}" if found else None
    return ProbeResult(
        str(tree.root), tree.version, arch, algorithm_label, location, methods, allreduce,
        [] if found else index.similar_model_classes(arch), canonical_algorithm=canonical, call_sites_read=read,
        apply_command=patchset.apply_command(tree),
    )  # fmt: skip


def probe_settings(
    tree: SGLangTree,
    server: settings.ServerSettings,
    arch: str,
    compute_capability: str,
    topology: str | None = None,
    topology_how: str | None = None,
) -> ProbeResult:
    """The probe of what `serve` starts with these settings (the probe command's and preflight's one reading of
    them): its algorithm (the baseline has none: the default's is probed, and preflight judges only the
    all-reduce flags then), tensor parallel size, all-reduce requests, environment and nodes."""
    return probe(
        tree, arch=arch, algorithm=server.speculative_algorithm or settings.default("speculative_algorithm"),
        compute_capability=compute_capability, tp_size=server.tp_size, torch_symm_mem=server.enable_torch_symm_mem,
        allreduce_fusion=server.enable_flashinfer_allreduce_fusion, pcie_ipc=server.pcie_ipc_allreduce,
        topology=topology, topology_how=topology_how, environment=server.environment, nnodes=server.nnodes,
    )  # fmt: skip


def render_text(result: ProbeResult) -> str:
    found = result.findings
    by_name = {f.name: f for f in found}
    lines = [
        f"SGLang {result.sglang_version or '(unknown version)'} at {result.sglang_root}",
        f"Target {result.arch} ({result.class_location or 'NOT FOUND'}), speculative algorithm {result.algorithm}",
        "",
        "Methods the speculative path calls on the target model:",
    ]
    if not result.methods:
        lines.append("  (none)" if result.call_sites_read else f"  {by_name['call sites'].render()}")
    for m in result.methods:
        lines.append(f"  {by_name[m.method].render()}")
        for s in m.call_sites:
            lines += _call_site_lines(s)
    effects = result.allreduce
    flags = [by_name[flag.flag] for flag in effects.flags]
    lines += [
        "",
        f"All-reduce optimisations on compute capability {effects.compute_capability}, tp {effects.tp_size}, "
        f"{_topology_words(effects)}:",
        *(f"  {f.render()}" for f in flags),
        "",
    ]
    if result.draft is not None:
        lines += [*result.draft.render_lines(), ""]
    lines.append(findings.render_verdict(found))
    lines += [f"  {f.render()}" for f in found if f.status is not OK]
    if result.class_location is not None and (result.missing or any(f.status is FAIL for f in flags)):
        lines.append(f"  Fix: apply this project's patch set ({result.apply_command}), then probe again.")
    return "\n".join(lines)


def _call_site_lines(site: CallSite) -> list[str]:
    """Where a call site is, under what condition, and the way there (the calls, the worker) when it is not direct."""
    guard = f"if {site.condition}" if site.condition != "always" else "always"
    lines = [f"      {site.location} in {site.function}: {guard}"]
    if site.via:
        lines.append(f"        reached from {' -> '.join(site.via)}")
    if site.worker:
        lines.append(f"        runs when the worker is {site.worker}, chosen if {site.worker_chosen_if}")
    return lines


def _topology_words(effects: allreduce_gates.AllReduceEffects) -> str:
    """The link the all-reduce judgement assumed or read, and how it was known."""
    link = "PCIe" if effects.topology == "pcie" else "NVLink"
    if effects.topology_assumed:
        return f"{link} (assumed: the tuned host's; --topology, or nvidia-smi topo -m on the GPU host, says otherwise)"
    return f"{link} ({effects.topology_how})" if effects.topology_how else link
