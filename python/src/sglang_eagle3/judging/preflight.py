"""Preflight: everything that can be checked in seconds before SGLang spends minutes loading.

One way through it, ``preflight()``, for `serve` (and its dry run) and `bench sweep`: the launch plan
(serving/launch_plan; an unusable key file is bad input, exit 2, said before a release is fetched), the SGLang tree
(trees/release.find), every check of CHECKS on one Launch, and the judged plan (judged_plan.JudgedPlan). Each check
ends in a finding; failures say what is wrong and how to fix it. The checks live by concern: the host (host/), the
settings against the tree's own rules (settings_rules), the draft's settings (draft_settings), SGLang's own
validation (sglang_validation); the models and the probe are judged here.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import stacks
from ..errors import shown, shown_path
from ..host import driver as host_driver
from ..host import gpus as host_gpus
from ..host.gpus import Gpu, Topology
from ..host.ports import port_problem
from ..models import draft_inputs, lockfile
from ..serving import launch_plan
from ..serving.launch_plan import LaunchPlan
from ..serving.settings import TUNED_COMPUTE_CAPABILITY, ServerSettings
from ..source.index import SourceIndex, SourceLayoutError
from ..source.tree import SGLangTree
from ..trees import release
from . import draft_settings, findings, settings_rules, sglang_validation, speculative_support
from .findings import Report, Status
from .judged_plan import JudgedPlan, not_the_one_run


@dataclass
class Preflight(Report):
    """The findings, and the facts the checks found on the way that later checks use."""

    gpus: list[Gpu] = field(default_factory=list)
    topology: Topology | None = None
    arch: str = speculative_support.DEFAULT_ARCH  # the target's, from its config.json
    drafts: dict[str | None, Report] = field(default_factory=dict)  # bench sweep: each draft's own findings

    @property
    def compute_capability(self) -> str:
        """The GPUs' (the first one's), else the tuned host's."""
        return self.gpus[0].compute_capability if self.gpus else TUNED_COMPUTE_CAPABILITY


def check_driver(result: Report, nvidia_smi: str | None, environ) -> None:
    """The CUDA driver library SGLang loads: there (a container gets it only with the compute capability), and
    new enough for the stack's CUDA."""
    given = environ.get(host_driver.LIBCUDA_ENV)
    if given is None and (nvidia_smi or environ.get(host_gpus.NVIDIA_SMI_ENV)):
        result.add(
            "driver", Status.NOT_CHECKED,
            "the GPUs were read from a given nvidia-smi, not this host's driver; libcuda.so.1 is not checked "
            f"(set {host_driver.LIBCUDA_ENV} to judge a driver library)",
        )  # fmt: skip
        return
    want = ".".join(map(str, stacks.cuda()))
    try:
        path, version = host_driver.driver_cuda_version(given)
    except OSError:
        capabilities = environ.get("NVIDIA_DRIVER_CAPABILITIES")
        here = f" (it is {shown(capabilities)} here)" if capabilities is not None else " (it is unset here)"
        result.add(
            "driver", Status.FAIL,
            "libcuda.so.1, the CUDA driver library, is not found: CUDA cannot start. In a container, set "
            f"NVIDIA_DRIVER_CAPABILITIES=compute,utility{here}: the NVIDIA Container Toolkit mounts libcuda only "
            "for the compute capability (unset, it gives utility alone: nvidia-smi and NVML). On a host, install "
            "the driver's CUDA library (NixOS: hardware.nvidia)",
        )  # fmt: skip
        return
    except (RuntimeError, AttributeError) as err:  # AttributeError: a library without cuDriverGetVersion
        result.add("driver", Status.FAIL, f"the CUDA driver library does not answer: {err}")
        return
    runs = f"{version // 1000}.{version % 1000 // 10}"
    if (version // 1000, version % 1000 // 10) < stacks.cuda():
        result.add(
            "driver", Status.FAIL,
            f"the NVIDIA driver runs CUDA up to {runs} ({path}), too old for this stack's CUDA {want}: CUDA {want} "
            "needs a 580 or newer driver; upgrade the host's driver (NixOS: hardware.nvidia.package)",
        )  # fmt: skip
        return
    result.add("driver", Status.OK, f"runs CUDA up to {runs}, this stack needs {want} ({path})")


def read_model_config(directory: Path) -> tuple[dict | None, str | None]:
    """(config.json as a dict, None), or (None, what is wrong with it and how to fix it)."""
    try:
        config = draft_inputs.read_config(directory, "model")
        draft_inputs.Fields(config, str(directory / "config.json")).architecture()
    except draft_inputs.DraftInputError as err:
        return None, str(err)
    return config, None


COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


def check_model_dir(
    result: Report, what: str, path: str | None, revision: str | None = None, revision_field: str = "revision"
) -> str | None:
    """Check a model setting; returns the local model's architecture (None for hub ids and failures)."""
    if path is None:
        return None
    if not draft_inputs.looks_local(path):
        # A hub id without a commit resolves when SGLang starts: a re-upload changes what is served.
        lock = f"sglang-eagle3 models lock {shown_path(path)} -o {lockfile.file_name(path)}"
        pin = f"pin it: `{lock}` prints the commit for {revision_field}"
        if revision is None:
            result.add(what, Status.WARN, f"{shown_path(path)} (Hugging Face id) has no pinned revision and loads "
                       f"whatever its main branch holds at start-up; {pin}, or serve a fetched directory")  # fmt: skip
        elif not COMMIT_SHA.fullmatch(revision):
            result.add(what, Status.WARN, f"{shown_path(path)}@{revision}: {revision_field} {shown(revision)} is a "
                       f"branch or tag and can move; only a 40-hex commit sha pins it ({pin})")  # fmt: skip
        else:
            result.add(what, Status.OK, f"{shown_path(path)}@{revision} (Hugging Face id pinned to a commit, fetched "
                       "by SGLang)")  # fmt: skip
        return None
    directory = draft_inputs.expanded(path)
    if not directory.is_dir():
        result.add(what, Status.FAIL, f"{shown_path(directory)} does not exist; download the model there or give its "
                   "hub id")  # fmt: skip
    elif not (directory / "config.json").is_file():
        result.add(what, Status.FAIL, f"{shown_path(directory)} has no config.json; point at the model's top directory")
    else:
        if revision is not None:
            result.add(what, Status.WARN, f"{directory}: {revision_field} {shown(revision)} is ignored for a local "
                       "directory; check its content with `sglang-eagle3 models verify`")  # fmt: skip
        if what != "model":  # a draft's config.json is the draft checks' business (check_draft)
            result.add(what, Status.OK, f"{directory}")
            return None
        config, problem = read_model_config(directory)
        if problem:
            result.add(what, Status.FAIL, problem)
            return None
        result.add(what, Status.OK, f"{directory} ({config['architectures'][0]})")
        return config["architectures"][0]
    return None


@dataclass
class Launch:
    """What preflight judges, built once and handed to every check: the settings, the launch plan made of them, and
    the SGLang tree whose source judges them (None: none was found, ``tree_problem`` says why)."""

    settings: ServerSettings
    plan: LaunchPlan
    tree: SGLangTree | None
    tree_problem: str | None = None
    explicit: bool = False  # the tree was named (--sglang), not the one this Python imports
    nvidia_smi: str | None = None  # a stand-in nvidia-smi (tests, a host without GPUs)
    drafts: bool = True  # judge the settings' draft too
    each_draft: tuple[str | None, ...] = ()  # bench sweep's drafts, each judged on its own (Preflight.drafts)


def check_gpus(result: Preflight, launch: Launch) -> None:
    """GPUs first: on a machine without them nothing else matters much, but every check still reports, so one
    run shows every problem."""
    settings = launch.settings
    try:
        result.gpus = host_gpus.query_gpus(launch.nvidia_smi)
    except FileNotFoundError:
        devices = host_gpus.device_nodes()
        if devices:
            # Containers and build sandboxes may get the devices without nvidia-smi, but SGLang
            # 0.5.9 runs it in ServerArgs.__post_init__ (get_nvgpu_memory_capacity) and stops.
            result.add(
                "gpus", Status.FAIL,
                f"nvidia-smi not found, though /dev has {len(devices)} GPU device node(s): SGLang runs it at start and "
                "stops without it; put the driver's nvidia-smi on PATH (NixOS: the services.sglang-eagle3 unit adds "
                "hardware.nvidia.package's; containers: the NVIDIA container toolkit mounts it with the utility "
                "capability, NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
            )  # fmt: skip
            check_driver(result, launch.nvidia_smi, os.environ)
        else:
            result.add("gpus", Status.FAIL, "no NVIDIA driver: nvidia-smi not found; run on the GPU host (or install "
                       "the driver)")  # fmt: skip
    except (RuntimeError, subprocess.TimeoutExpired, ValueError, OSError) as err:
        result.add("gpus", Status.FAIL, f"nvidia-smi failed: {err}")
    else:
        need = settings.gpus_per_node
        if len(result.gpus) < need:
            result.add(
                "gpus", Status.FAIL,
                f"{len(result.gpus)} GPU(s) visible, tp_size {settings.tp_size} over {settings.nnodes} node(s) needs "
                f"{need} here; lower tp_size or check CUDA_VISIBLE_DEVICES",
            )  # fmt: skip
        else:
            caps = sorted({g.compute_capability for g in result.gpus})
            names = sorted({g.name for g in result.gpus})
            result.add("gpus", Status.OK, f"{len(result.gpus)} x {', '.join(names)} (compute capability "
                       f"{', '.join(caps)})")  # fmt: skip
            check_driver(result, launch.nvidia_smi, os.environ)


def check_models(result: Preflight, launch: Launch) -> None:
    """The target (its architecture, for the probe) and, when judged, the draft."""
    settings = launch.settings
    result.arch = check_model_dir(result, "model", settings.model_path, settings.revision) or result.arch
    if launch.drafts:
        check_model_dir(
            result, "draft model", settings.speculative_draft_model_path,
            settings.speculative_draft_model_revision, "speculative_draft_model_revision",
        )  # fmt: skip


def check_topology(result: Preflight, launch: Launch) -> None:
    """The link between the GPUs this node's ranks use, which decides SGLang's all-reduce paths."""
    per_node = launch.settings.gpus_per_node
    result.topology = host_gpus.query_topology(launch.nvidia_smi, per_node) if result.gpus else None
    if result.topology is not None:
        kind = "NVLink" if result.topology.kind == "nvlink" else "PCIe"
        result.add("topology", Status.OK, f"{kind} ({result.topology.how})")
    elif result.gpus and per_node > 1:
        result.add(
            "topology", Status.NOT_CHECKED,
            f"nvidia-smi topo -m gave no link for each pair of GPU0-GPU{per_node - 1}; the all-reduce paths are "
            "judged for PCIe (the tuned host's)",
        )  # fmt: skip


def check_sglang(result: Preflight, launch: Launch) -> None:
    """The SGLang tree the other checks read: found, and a version this launcher is written for."""
    tree = launch.tree
    if tree is None:
        result.add("sglang", Status.FAIL, launch.tree_problem or "no SGLang found")
    elif stacks.get(tree.version) is None:
        result.add("sglang", Status.WARN, f"{stacks.not_a_stack(tree.version)}; read at {tree.root}")


def check_settings(result: Preflight, launch: Launch) -> None:
    settings_rules.check_settings_version(result, launch.settings, launch.plan.args, launch.tree,
                                          result.compute_capability)  # fmt: skip


def check_probe(result: Preflight, launch: Launch) -> None:
    """The probe of the tree for these settings (the target's methods, the all-reduce requests on these GPUs)."""
    settings, tree, topology = launch.settings, launch.tree, result.topology
    try:
        probed = speculative_support.probe_settings(
            tree, settings, result.arch, result.compute_capability, topology.kind if topology else None,
            topology.how if topology else None,
        )  # fmt: skip
    except SourceLayoutError as err:
        result.add("probe", Status.FAIL, release.layout_problem(tree, err))
        return
    except ValueError as err:  # e.g. a compute capability nvidia-smi reported that is no known GPU's
        result.add("probe", Status.FAIL, str(err))
        return
    found = probed.findings
    if probed.class_location is None:
        result.add("probe", Status.FAIL, f"{found[0].message}; check 'architectures' in the model's config.json")
        return
    flags = {flag.flag for flag in probed.allreduce.flags}
    # Without speculative decoding only the all-reduce flags matter.
    judged = found if settings.speculative_algorithm else [f for f in found if f.name in flags]
    failed = [f"{f.name}: {f.message}" for f in judged if f.status is Status.FAIL]
    if failed:
        result.add("probe", Status.FAIL, "; ".join(failed) + f" (fix: {probed.apply_command})")
    elif not probed.call_sites_read and settings.speculative_algorithm:
        result.add("probe", Status.NOT_CHECKED, f"SGLang {tree.version}: {speculative_support.UNREAD_CALL_SITES}")
    else:
        result.add("probe", Status.OK, f"SGLang {tree.version} can serve {probed.arch} ({probed.algorithm})")
    for finding in found:
        if finding.name in flags and finding.status in (Status.WARN, Status.NOT_CHECKED):
            result.add("optimisations", finding.status, f"{finding.name}: {finding.message}")


def check_draft_source(result: Preflight, launch: Launch) -> None:
    """The draft's path and revision against what this tree does with them."""
    if launch.drafts:
        draft_settings.check_draft_path(result, launch.settings, launch.tree, result.arch)
        draft_settings.check_draft_revision(result, launch.settings, SourceIndex(launch.tree))


def check_extra_args(result: Preflight, launch: Launch) -> None:
    settings_rules.check_extra_args(result, launch.settings, launch.plan.args, launch.tree)


def _models_passed(result: Preflight) -> bool:
    return findings.passed(f for f in result.findings if f.name.endswith("model"))


def check_draft(result: Preflight, launch: Launch) -> None:
    """The draft's config and weights against the target and this tree (once both models are there)."""
    if launch.drafts and _models_passed(result):
        draft_settings.check_draft(result, launch.settings, launch.tree)


def check_sglang_own(result: Preflight, launch: Launch) -> None:
    """SGLang's own validation of the plan (once the models are there: it reads the target's config.json)."""
    if _models_passed(result):
        sglang_validation.check(result, launch.settings, launch.plan, launch.tree, result.gpus,
                                explicit=launch.explicit)  # fmt: skip


def check_port(result: Preflight, launch: Launch) -> None:
    host, port = launch.settings.host, launch.settings.port
    problem = port_problem(host, port)
    result.add("port", Status.FAIL if problem else Status.OK, problem or f"{host}:{port} is free")


def report_key_files(result: Preflight, launch: Launch) -> None:
    """The key files in the plan: launch_plan.build read each one (an unusable one stopped it, bad input); named."""
    for secret, path in launch.plan.key_files.items():  # SGLang's field: "api key", "admin api key"
        result.add(secret.replace("_", " "), Status.OK, f"{path} (the key is not shown)")


def check_each_draft(result: Preflight, launch: Launch) -> None:
    """Bench sweep's drafts, once the rest passed, each on its own (a draft that fails is skipped, not the sweep):
    its directory, then its config and weights against the target and the tree."""
    if not result.passed:
        return
    for draft in launch.each_draft:
        own = result.drafts[draft] = Report()
        check_model_dir(own, "draft model", draft)
        if own.passed:
            drafted = launch.settings.model_copy(update={"speculative_draft_model_path": draft})
            draft_settings.check_draft(own, drafted, launch.tree)


Check = Callable[[Preflight, Launch], None]
# Every check before the load, in order; each adds its findings. The host first, then the models, then what reads
# the SGLang tree (ON_TREE: skipped when there is none, which check_sglang reports), then the port and key files;
# last, bench sweep's drafts on their own.
CHECKS: tuple[Check, ...] = (
    check_gpus, check_models, check_topology, check_sglang, check_settings, check_probe, check_draft_source,
    check_extra_args, check_draft, check_sglang_own, check_port, report_key_files, check_each_draft,
)  # fmt: skip
ON_TREE = frozenset({check_settings, check_probe, check_draft_source, check_extra_args, check_draft, check_sglang_own,
                     check_each_draft})  # fmt: skip


def judge(launch: Launch) -> Preflight:
    """Every check of CHECKS on one launch."""
    result = Preflight()
    for check in CHECKS:
        if launch.tree is not None or check not in ON_TREE:
            check(result, launch)
    return result


def preflight(
    settings: ServerSettings,
    sglang: str | None = None,
    *,
    drafts: bool | Sequence[str | None] = True,
    nvidia_smi: str | None = None,
) -> JudgedPlan:
    """Preflight on the launch ``settings`` make (see the module's docstring), reading the SGLang ``sglang`` names
    (a directory, a wheel, a release version: bad input when it is none of them), else the importable one (a
    FAIL when there is none). ``drafts``: True judges the settings' draft with the rest; False leaves it out; a
    list (bench sweep's drafts) leaves it out too and, once the rest passed, judges each one on its own
    (JudgedPlan.checks.drafts)."""
    plan = launch_plan.build(settings)  # the key files: bad input here
    tree, problem = release.find(sglang)
    each = () if isinstance(drafts, bool) else tuple(drafts)
    with_draft = drafts is True and bool(settings.speculative_algorithm)
    checks = judge(Launch(settings, plan, tree, problem, sglang is not None, nvidia_smi, with_draft, each))
    runs = launch_plan.imported_sglang(plan)
    return JudgedPlan(plan, checks, tree.package if tree else None, runs, not_the_one_run(tree, runs, plan.argv[0]))
