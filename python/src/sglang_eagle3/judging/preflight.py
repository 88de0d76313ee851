"""Preflight: everything that can be checked in seconds before SGLang spends minutes loading.

Each check ends in a finding (see findings): OK, WARN (starts, but something requested will
not be active) or FAIL (would not start, or would crash after the load). Failures say what
is wrong and how to fix it. The checks live by concern: the host's GPUs and port (host/), the
settings against the tree's own rules (settings_rules), the draft's settings (draft_settings);
this module runs them in order and judges the models, the key files and the probe.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .. import SGLANG_VERSIONS
from ..errors import shown, shown_path
from ..host import driver as host_driver
from ..host import gpus as host_gpus
from ..host.gpus import Gpu, Topology
from ..host.ports import port_problem
from ..models import draft_inputs
from ..serving import credentials
from ..serving.settings import TUNED_COMPUTE_CAPABILITY, ServerSettings, default
from ..source import sglang_release, sglang_source
from ..source.source_index import SourceIndex, SourceLayoutError
from . import draft_settings, findings, probe, settings_rules, sglang_validation
from .findings import Report, Status


@dataclass
class Preflight(Report):
    gpus: list[Gpu] = field(default_factory=list)


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
    want = ".".join(map(str, host_driver.STACK_CUDA))
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
    if (version // 1000, version % 1000 // 10) < host_driver.STACK_CUDA:
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
        pin = f"pin it: `sglang-eagle3 models lock {shown_path(path)}` prints the commit for {revision_field}"
        if revision is None:
            result.add(what, Status.WARN, f"{shown_path(path)} (Hugging Face id) has no pinned revision and loads "
                       f"whatever its main branch holds at start-up; {pin}, or serve a fetched directory")  # fmt: skip
        elif not COMMIT_SHA.fullmatch(revision):
            result.add(what, Status.WARN, f"{shown_path(path)}@{revision}: {revision_field} {shown(revision)} is a "
                       f"branch or tag and can move; only a 40-hex commit sha pins it ({pin})")  # fmt: skip
        else:
            result.add(
                what,
                Status.OK,
                f"{shown_path(path)}@{revision} (Hugging Face id pinned to a commit, fetched by SGLang)",
            )
        return None
    directory = draft_inputs.expanded(path)
    if not directory.is_dir():
        result.add(
            what, Status.FAIL, f"{shown_path(directory)} does not exist; download the model there or give its hub id"
        )
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


def check_port(result: Report, host: str, port: int) -> None:
    problem = port_problem(host, port)
    result.add("port", Status.FAIL if problem else Status.OK, problem or f"{host}:{port} is free")


def run(
    settings: ServerSettings,
    sglang_target: sglang_source.SGLangTree | str | None = None,
    nvidia_smi: str | None = None,
    drafts: bool = True,
) -> Preflight:
    """Every check before the load. ``drafts=False``: the host, SGLang and the target only, for a caller
    that checks each draft on its own (bench sweep across drafts)."""
    result = Preflight()

    # GPUs first: on a machine without them nothing else matters much, but we still
    # report every check so one run shows every problem.
    try:
        result.gpus = host_gpus.query_gpus(nvidia_smi)
    except FileNotFoundError:
        devices = host_gpus.device_nodes()
        if devices:
            # Containers and build sandboxes may get the devices without nvidia-smi, but SGLang
            # 0.5.9 runs it in ServerArgs.__post_init__ (get_nvgpu_memory_capacity) and stops.
            result.add(
                "gpus",
                Status.FAIL,
                f"nvidia-smi not found, though /dev has {len(devices)} GPU device node(s): SGLang runs it at "
                "start and stops without it; put the driver's nvidia-smi on PATH (NixOS: the "
                "services.sglang-eagle3 unit adds hardware.nvidia.package's; containers: the NVIDIA "
                "container toolkit mounts it with the utility capability, NVIDIA_DRIVER_CAPABILITIES=compute,utility)",
            )
            check_driver(result, nvidia_smi, os.environ)
        else:
            result.add(
                "gpus",
                Status.FAIL,
                "no NVIDIA driver: nvidia-smi not found; run on the GPU host (or install the driver)",
            )
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
            result.add(
                "gpus",
                Status.OK,
                f"{len(result.gpus)} x {', '.join(names)} (compute capability {', '.join(caps)})",
            )
            check_driver(result, nvidia_smi, os.environ)

    arch = check_model_dir(result, "model", settings.model_path, settings.revision) or probe.DEFAULT_ARCH
    drafts = drafts and bool(settings.speculative_algorithm)
    if drafts:
        check_model_dir(
            result, "draft model", settings.speculative_draft_model_path,
            settings.speculative_draft_model_revision, "speculative_draft_model_revision",
        )  # fmt: skip

    compute_capability = result.gpus[0].compute_capability if result.gpus else TUNED_COMPUTE_CAPABILITY
    # The link between the GPUs this node's ranks use, which decides SGLang's all-reduce paths.
    topology = host_gpus.query_topology(nvidia_smi, settings.gpus_per_node) if result.gpus else None
    if topology is not None:
        result.add("topology", Status.OK, f"{'NVLink' if topology.kind == 'nvlink' else 'PCIe'} ({topology.how})")
    elif result.gpus and settings.gpus_per_node > 1:
        span = f"GPU0-GPU{settings.gpus_per_node - 1}"
        result.add(
            "topology", Status.NOT_CHECKED,
            f"nvidia-smi topo -m gave no link for each pair of {span}; the all-reduce paths are judged for PCIe "
            "(the tuned host's)",
        )  # fmt: skip
    try:
        given = isinstance(sglang_target, sglang_source.SGLangTree)
        tree = sglang_target if given else sglang_source.locate(sglang_target)
    except sglang_source.SGLangNotFound as err:
        result.add("sglang", Status.FAIL, str(err))
    else:
        if tree.version not in SGLANG_VERSIONS:
            result.add(
                "sglang", Status.WARN,
                f"SGLang {tree.version or '(unknown version)'} at {tree.root}; this launcher is written for "
                f"{' and '.join(SGLANG_VERSIONS)}",
            )  # fmt: skip
        settings_rules.check_settings_version(result, settings, tree, compute_capability)
        check_probe(result, settings, tree, arch, compute_capability, topology)
        if drafts:
            draft_settings.check_draft_path(result, settings, tree, arch)
            draft_settings.check_draft_revision(result, settings, SourceIndex(tree))
        settings_rules.check_extra_args(result, settings, tree)
        models_ok = findings.passed(f for f in result.findings if f.name.endswith("model"))
        if drafts and models_ok:
            draft_settings.check_draft(result, settings, tree)
        if models_ok:
            sglang_validation.check(result, settings, tree, result.gpus, explicit=sglang_target is not None)
    check_port(result, settings.host, settings.port)
    check_key_files(result, settings, os.environ)
    return result


def check_key_files(result: Report, settings: ServerSettings, environ) -> None:
    """Each configured key file: there, a regular file, private (no group/other bits), one line, not empty."""
    for secret in credentials.SECRET_ARGS:
        path = credentials.key_file(secret, getattr(settings, secret.setting), environ)
        if path is None:
            continue
        problem = credentials.check_key_file(path, secret.setting)
        name = secret.credential.replace("-", " ")  # "api key", "admin api key"
        result.add(name, Status.FAIL if problem else Status.OK, problem or f"{path} (the key is not shown)")


def check_probe(
    result: Report,
    settings: ServerSettings,
    tree,
    arch: str,
    compute_capability: str,
    topology: Topology | None = None,
) -> None:
    try:
        probed = probe.probe(
            tree,
            arch=arch,
            algorithm=settings.speculative_algorithm or default("speculative_algorithm"),
            compute_capability=compute_capability,
            tp_size=settings.tp_size,
            torch_symm_mem=settings.enable_torch_symm_mem,
            allreduce_fusion=settings.enable_flashinfer_allreduce_fusion,
            pcie_ipc=settings.pcie_ipc_allreduce,
            topology=topology.kind if topology else None,
            topology_how=topology.how if topology else None,
            environment=settings.environment,
            nnodes=settings.nnodes,
        )
    except SourceLayoutError as err:
        result.add("probe", Status.FAIL, sglang_release.layout_problem(tree, err))
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
        result.add("probe", Status.NOT_CHECKED, f"SGLang {tree.version}: {probe.UNREAD_CALL_SITES}")
    else:
        result.add("probe", Status.OK, f"SGLang {tree.version} can serve {probed.arch} ({probed.algorithm})")
    for finding in found:
        if finding.name in flags and finding.status in (Status.WARN, Status.NOT_CHECKED):
            result.add("optimisations", finding.status, f"{finding.name}: {finding.message}")
