"""Preflight: everything that can be checked in seconds before SGLang spends minutes loading.

Each check ends in a finding (see findings): OK, WARN (starts, but something requested will
not be active) or FAIL (would not start, or would crash after the load). Failures say what
is wrong and how to fix it.
"""

from __future__ import annotations

import csv
import ctypes
import difflib
import errno
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import SGLANG_VERSION, SGLANG_VERSIONS
from ..serving import credentials
from ..serving import settings as server_settings
from ..serving.launch_plan import sglang_args
from ..serving.settings import TUNED_COMPUTE_CAPABILITY, ServerSettings, default, field_flag
from ..source import attention_backends, draft_inheritance, draft_inputs, eagle3_source, sglang_source
from ..source.source_index import SourceIndex, SourceLayoutError
from . import draft_check, findings, probe
from .findings import Finding, Judged, Status

NVIDIA_SMI_ENV = "SGLANG_EAGLE3_NVIDIA_SMI"  # tests point this at recorded outputs
QUERY = ["--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader"]
LIBCUDA_ENV = "SGLANG_EAGLE3_LIBCUDA"  # the driver library to judge instead of the one the loader finds (tests)
# The CUDA both stacks are built with (nix/pins.json "cuda"). A driver reports the newest CUDA it runs with
# cuDriverGetVersion (13000 = 13.0); CUDA's minor version compatibility lets a 13.0 driver run any 13.x.
STACK_CUDA = (13, 0)
DRIVER_LINK = Path("/run/opengl-driver")  # NixOS's driver, also where its container toolkit (CDI) mounts it


@dataclass
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory: str


@dataclass
class Preflight(Judged):
    findings: list[Finding] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)

    def add(self, name: str, status: Status, message: str, where: str | None = None) -> None:
        self.findings.append(Finding(name, status, message, where))

    def render_text(self) -> str:
        return "\n".join([*(f.render() for f in self.findings), findings.render_verdict(self.findings)])

    def to_dict(self) -> dict:
        return findings.to_json(self.findings)


def query_gpus(nvidia_smi: str | None = None) -> list[Gpu]:
    """GPUs as nvidia-smi reports them. Raises FileNotFoundError without a driver."""
    command = nvidia_smi or os.environ.get(NVIDIA_SMI_ENV) or shutil.which("nvidia-smi")
    if not command:
        raise FileNotFoundError("nvidia-smi")
    result = subprocess.run([command, *QUERY], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError((result.stderr or result.stdout).strip() or f"nvidia-smi exited {result.returncode}")
    gpus = []
    for row in csv.reader(line for line in result.stdout.splitlines() if line.strip()):
        index, name, cap, memory = (cell.strip() for cell in row)
        gpus.append(Gpu(int(index), name, cap, memory))
    return gpus


def driver_cuda_version(library: str | None = None) -> tuple[str, int]:
    """(the libcuda.so.1 SGLang's processes will load, the CUDA version it runs as cuDriverGetVersion gives it).

    The loader's search first (LD_LIBRARY_PATH: the wrapper links the host's or the container's driver there,
    nix/scripts/host-driver.sh), then NixOS's driver link, which CUDA libraries find through their RUNPATH.
    Raises OSError when there is no driver library, RuntimeError when it does not answer.
    """
    names = [library] if library else ["libcuda.so.1", str(DRIVER_LINK / "lib" / "libcuda.so.1")]
    failures = []
    for name in names:
        try:
            driver = ctypes.CDLL(name)
        except OSError as err:
            failures.append(str(err))
            continue
        version = ctypes.c_int(0)
        status = driver.cuDriverGetVersion(ctypes.byref(version))
        if status != 0:
            raise RuntimeError(f"cuDriverGetVersion of {name} failed (CUresult {status})")
        return _mapped_file("libcuda.so") or name, version.value
    raise OSError("; ".join(failures))


def _mapped_file(stem: str) -> str | None:
    """The file of a loaded library whose name starts with ``stem`` (from /proc/self/maps), or None."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    return next((line.split()[-1] for line in lines if Path(line.split()[-1]).name.startswith(stem)), None)


def check_driver(result: Preflight, nvidia_smi: str | None, environ) -> None:
    """The CUDA driver library SGLang loads: there (a container gets it only with the compute capability), and
    new enough for the stack's CUDA."""
    given = environ.get(LIBCUDA_ENV)
    if given is None and (nvidia_smi or environ.get(NVIDIA_SMI_ENV)):
        result.add(
            "driver", Status.NOT_CHECKED,
            "the GPUs were read from a given nvidia-smi, not this host's driver; libcuda.so.1 is not checked "
            f"(set {LIBCUDA_ENV} to judge a driver library)",
        )  # fmt: skip
        return
    want = ".".join(map(str, STACK_CUDA))
    try:
        path, version = driver_cuda_version(given)
    except OSError:
        capabilities = environ.get("NVIDIA_DRIVER_CAPABILITIES")
        here = f" (it is {capabilities!r} here)" if capabilities is not None else " (it is unset here)"
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
    if (version // 1000, version % 1000 // 10) < STACK_CUDA:
        result.add(
            "driver", Status.FAIL,
            f"the NVIDIA driver runs CUDA up to {runs} ({path}), too old for this stack's CUDA {want}: CUDA {want} "
            "needs a 580 or newer driver; upgrade the host's driver (NixOS: hardware.nvidia.package)",
        )  # fmt: skip
        return
    result.add("driver", Status.OK, f"runs CUDA up to {runs}, this stack needs {want} ({path})")


TOPO = ["topo", "-m"]
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nvidia-smi topo -m's legend: the PCIe paths; NV# is NVLink
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines the header row


@dataclass
class Topology:
    kind: str  # allreduce_gates.TOPOLOGIES: "nvlink" or "pcie"
    how: str  # what it was read from, for the report


def read_topology(text: str, count: int) -> Topology | None:
    """NVLink when every pair of GPU0..GPU<count-1> is NV# in ``nvidia-smi topo -m``'s matrix, else PCIe when each
    pair is NV# or a PCIe path (SGLang's custom all-reduce wants all pairs on NVLink); None when the matrix does not
    have those GPUs or a pair's link is none of the legend's."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), None)
    if header is None or count < 2:
        return None
    columns = [name for name in header if re.fullmatch(r"(GPU|NIC)\d+", name)]
    rows = {
        cells[0]: dict(zip(columns, cells[1:], strict=False)) for cells in (line.split() for line in lines) if cells
    }
    gpus = [f"GPU{i}" for i in range(count)]
    if any(g not in rows or g not in columns for g in gpus):
        return None
    links = {(a, b): rows[a].get(b, "") for i, a in enumerate(gpus) for b in gpus[i + 1 :]}
    if any(not (re.fullmatch(r"NV\d+", link) or link in PCIE_PATHS) for link in links.values()):
        return None
    span = f"{gpus[0]}-{gpus[-1]}"
    kinds = sorted(set(links.values()))
    if all(link.startswith("NV") for link in kinds):
        return Topology("nvlink", f"nvidia-smi topo -m: every pair of {span} is {', '.join(kinds)}")
    if not any(link.startswith("NV") for link in kinds):
        return Topology("pcie", f"nvidia-smi topo -m: {span} over PCIe only ({', '.join(kinds)})")
    pcie = next(f"{a}-{b} {link}" for (a, b), link in links.items() if not link.startswith("NV"))
    return Topology("pcie", f"nvidia-smi topo -m: {span} over {', '.join(kinds)}, not all NVLink ({pcie})")


def query_topology(nvidia_smi: str | None, count: int) -> Topology | None:
    """``read_topology`` of this host's ``nvidia-smi topo -m``; None when it cannot be run or read."""
    command = nvidia_smi or os.environ.get(NVIDIA_SMI_ENV) or shutil.which("nvidia-smi")
    if not command:
        return None
    try:
        result = subprocess.run([command, *TOPO], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return read_topology(result.stdout, count) if result.returncode == 0 else None


def device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """/dev/nvidia0, /dev/nvidia1, ... (not nvidiactl or nvidia-uvm)."""
    return sorted(p for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def _expanded(path: str) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~unknown-user: leave it as it is, the checks below report it
        return Path(path)


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or _expanded(path).exists()


def read_model_config(directory: Path) -> tuple[dict | None, str | None]:
    """(config.json as a dict, None), or (None, what is wrong with it and how to fix it)."""
    config = directory / "config.json"
    try:
        data = json.loads(config.read_bytes())
    except OSError as err:
        return None, f"cannot read {config}: {err.strerror}"
    except UnicodeDecodeError:
        return None, f"{config} is not UTF-8 text; download the model again"
    except json.JSONDecodeError as err:
        return None, f"{config} is not valid JSON ({err}); download the model again"
    if not isinstance(data, dict):
        return None, f"{config} holds a JSON {type(data).__name__}, not an object; is this a model's config.json?"
    architectures = data.get("architectures")
    if not (isinstance(architectures, list) and architectures and all(isinstance(a, str) for a in architectures)):
        return None, (
            f"{config} has no 'architectures' list of class names "
            '(e.g. "architectures": ["KimiK25ForConditionalGeneration"]); is this a model\'s config.json?'
        )
    return data, None


COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


def check_model_dir(
    result: Preflight, what: str, path: str | None, revision: str | None = None, revision_field: str = "revision"
) -> str | None:
    """Check a model setting; returns the local model's architecture (None for hub ids and failures)."""
    if path is None:
        return None
    if not _looks_local(path):
        # A hub id without a commit resolves when SGLang starts: a re-upload changes what is served.
        pin = f"pin it: `sglang-eagle3 models lock {path}` prints the commit for {revision_field}"
        if revision is None:
            result.add(what, Status.WARN, f"{path} (Hugging Face id) has no pinned revision and loads whatever "
                       f"its main branch holds at start-up; {pin}, or serve a fetched directory")  # fmt: skip
        elif not COMMIT_SHA.fullmatch(revision):
            result.add(what, Status.WARN, f"{path}@{revision}: {revision_field} {revision!r} is a branch or tag "
                       f"and can move; only a 40-hex commit sha pins it ({pin})")  # fmt: skip
        else:
            result.add(what, Status.OK, f"{path}@{revision} (Hugging Face id pinned to a commit, fetched by SGLang)")
        return None
    directory = _expanded(path)
    if not directory.is_dir():
        result.add(what, Status.FAIL, f"{directory} does not exist; download the model there or give its hub id")
    elif not (directory / "config.json").is_file():
        result.add(what, Status.FAIL, f"{directory} has no config.json; point at the model's top directory")
    else:
        if revision is not None:
            result.add(what, Status.WARN, f"{directory}: {revision_field} {revision!r} is ignored for a local "
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


def check_port(result: Preflight, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except (OSError, ValueError) as err:  # ValueError: a host name IDNA cannot encode
            if getattr(err, "errno", None) == errno.EADDRINUSE:
                result.add("port", Status.FAIL, f"{host}:{port} is in use; stop what listens there or set port")
            else:
                why = getattr(err, "strerror", None) or str(err)
                result.add("port", Status.FAIL, f"cannot listen on {host}:{port}: {why}; check host")
            return
    result.add("port", Status.OK, f"{host}:{port} is free")


# Where SGLang's parser is read from (sglang_source.server_flags): 0.5.9 adds each flag in server_args.py, later
# releases derive most from the fields of srt/arg_groups/fields/.
PARSER = "its parser: srt/server_args.py ServerArgs.add_cli_args"
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"  # 0.5.9: top-k 1 only (settings.SPEC_TREE_RULES["spec_v2"])


def check_settings_version(result: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """Every setting SGLang gets (a flag, or a variable of its environ.py) must be one this SGLang has: a flag it
    lacks stops it at start-up, a variable it lacks is silently ignored. Read from the tree's own source."""
    try:
        known, variables = sglang_source.server_flags(tree), sglang_source.environment_variables(tree)
    except sglang_source.SGLangNotFound as err:
        result.add("settings", Status.FAIL, str(err))
        return
    rendered = set(sglang_args(settings))
    problems = []
    for name, value in settings:
        flag, env = field_flag(name), server_settings.field_env(name)
        missing = (flag in rendered and flag not in known) or (env and value is True and env not in variables)
        if not missing:
            continue
        version, where = server_settings.field_origin(name)
        what = f"no flag {flag} ({PARSER})" if flag else f"no variable {env} (srt/environ.py, class Envs)"
        close = difflib.get_close_matches(flag, list(known), n=1) if flag else []
        instead = f"; its nearest flag is {close[0]} (put it in extra_args)" if close else ""
        problems.append(
            f"{name}: SGLang {tree.version} has {what}; it is in SGLang {version}"
            f"{f' ({where})' if where else ''}{instead}. Unset {name}, or use the {version} stack: "
            f"nix run .#{server_settings.stack_app(version)}"
        )
    for variable in sorted(v for v in settings.environment if v.startswith("SGLANG_") and v not in variables):
        if not variable.startswith(ENV_TOOL_PREFIX) and not _mentioned(tree, variable):
            problems.append(
                f"environment: SGLang {tree.version} does not read {variable} (not in srt/environ.py's Envs nor "
                f"anywhere in its source): it would be silently ignored; drop it or check its name"
            )
    # A version's own rule on a variable, only where that version reads it (0.5.23 refuses the variable above).
    if SPEC_V2 in variables and settings.speculative_algorithm:
        problem = server_settings.draft_tree_problem(
            settings.speculative_num_steps, settings.speculative_eagle_topk, settings.speculative_num_draft_tokens,
            settings.attention_backend, settings.environment.get(SPEC_V2),
        )  # fmt: skip
        problems += [problem] if problem else []
    if problems:
        result.add("settings", Status.FAIL, "; ".join(problems))
    elif tree.version not in SGLANG_VERSIONS:
        result.add("settings", Status.NOT_CHECKED, f"SGLang {tree.version or '(unknown version)'} is none of the "
                   f"versions the settings are written for ({', '.join(SGLANG_VERSIONS)}); its flags were read from "
                   "its source and every rendered one is there, but their meaning is not checked")  # fmt: skip
    else:
        result.add("settings", Status.OK, f"every flag and variable the settings give is one SGLang {tree.version} has")


ENV_TOOL_PREFIX = "SGLANG_EAGLE3_"


def _mentioned(tree: sglang_source.SGLangTree, variable: str) -> bool:
    """Whether any of SGLang's Python files names the variable (read with os.environ rather than Envs)."""
    needle = variable.encode()
    return any(needle in path.read_bytes() for path in tree.package.rglob("*.py"))


def check_extra_args(result: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """extra_args must be flags this SGLang knows, and not ones a setting already owns."""
    if not settings.extra_args:
        return
    try:
        known = sglang_source.server_flags(tree)
    except sglang_source.SGLangNotFound as err:
        result.add("extra_args", Status.FAIL, str(err))
        return
    owned = {field_flag(name) for name in ServerSettings.model_fields} - {None}
    owned_spellings = {spelling: flag for flag in owned if flag in known for spelling in known[flag][0]}
    args = list(settings.extra_args)
    while args:
        token = args.pop(0)
        name, has_inline_value = token.split("=", 1)[0], "=" in token
        if not name.startswith("--"):
            result.add(
                "extra_args", Status.FAIL, f"{token!r} is not a flag; extra_args are SGLang flags and their values"
            )
            return
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            result.add(
                "extra_args", Status.FAIL,
                f"SGLang {tree.version} has no flag {name}{hint} ({PARSER}; flags differ between SGLang versions: "
                "use one that this SGLang's `python -m sglang.launch_server --help` lists)",
            )  # fmt: skip
            return
        if name in owned_spellings:
            setting = next(n for n in ServerSettings.model_fields if field_flag(n) == owned_spellings[name])
            result.add("extra_args", Status.FAIL, f"{name} is the setting {setting!r}; set it there, not in extra_args")
            return
        if known[name][1] and not has_inline_value:
            if not args or args[0].startswith("--"):
                result.add("extra_args", Status.FAIL, f"{name} needs a value")
                return
            args.pop(0)
    result.add("extra_args", Status.OK, " ".join(settings.extra_args))


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
        result.gpus = query_gpus(nvidia_smi)
    except FileNotFoundError:
        devices = device_nodes()
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
    topology = query_topology(nvidia_smi, settings.gpus_per_node) if result.gpus else None
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
        check_settings_version(result, settings, tree)
        check_probe(result, settings, tree, arch, compute_capability, topology)
        if drafts:
            check_draft_path(result, settings, tree, arch)
            check_draft_revision(result, settings, SourceIndex(tree))
        check_extra_args(result, settings, tree)
        models_ok = findings.passed(f for f in result.findings if f.name.endswith("model"))
        if drafts and models_ok:
            check_draft(result, settings, tree)
    check_port(result, settings.host, settings.port)
    check_key_files(result, settings, os.environ)
    return result


def check_key_files(result: Preflight, settings: ServerSettings, environ) -> None:
    """Each configured key file: there, a regular file, private (no group/other bits), one line, not empty."""
    for secret in credentials.SECRET_ARGS:
        path = credentials.key_file(secret, getattr(settings, secret.setting), environ)
        if path is None:
            continue
        problem = credentials.check_key_file(path, secret.setting)
        name = secret.credential.replace("-", " ")  # "api key", "admin api key"
        result.add(name, Status.FAIL if problem else Status.OK, problem or f"{path} (the key is not shown)")


def check_probe(
    result: Preflight,
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
        )
    except SourceLayoutError as err:
        result.add(
            "probe", Status.FAIL,
            f"SGLang at {tree.root} does not have the source layout of {SGLANG_VERSION} ({err}); "
            f"install sglang=={SGLANG_VERSION}",
        )  # fmt: skip
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


def check_draft(result: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """The draft checks of `probe --draft` for the configured draft and target (see draft_check)."""
    if settings.speculative_draft_model_path is None:
        return
    try:
        draft = draft_check.check(
            tree, settings.speculative_draft_model_path, settings.model_path, algorithm=settings.speculative_algorithm
        )
    except draft_check.DraftInputError as err:
        result.add("draft", Status.FAIL, str(err))
        return
    except SourceLayoutError as err:
        result.add("draft", Status.FAIL, f"SGLang at {tree.root} does not have the source layout of "
                   f"{SGLANG_VERSION} ({err})")  # fmt: skip
        return
    result.findings += [f.prefixed("draft") for f in draft.findings]
    index = SourceIndex(tree)
    if draft.architecture:
        check_draft_attention(result, settings, index, draft.architecture)
        check_draft_model_impl(result, settings, index, draft.architecture)
        check_draft_chunked_prefix(result, settings, index, draft.architecture, draft.target.architecture)
    if draft.draft_directory:
        check_draft_quantization(result, settings, index, Path(draft.draft_directory))
        check_draft_context(result, settings, index, Path(draft.draft_directory), draft.target.directory)
        check_draft_load_format(result, settings, index, Path(draft.draft_directory))
        check_draft_model_override(result, settings, index, Path(draft.draft_directory), draft.target.directory)


def extra_arg(args: list[str], flag: str) -> str | None:
    """The value extra_args gives ``flag`` (``--flag V`` or ``--flag=V``; the last one wins), or None."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
    return value


def check_draft_quantization(result: Preflight, settings: ServerSettings, index: SourceIndex, draft: Path) -> None:
    """SGLang gives the draft the target's --quantization unless --speculative-draft-model-quantization is set:
    a target quantized that way (e.g. --quantization modelopt_fp4 for NVFP4) with a draft that is not fails to load."""
    name = "draft quantization"
    where = eagle3_source.draft_quantization_inheritance(index)
    target_method = extra_arg(settings.extra_args, "--quantization")
    draft_setting = extra_arg(settings.extra_args, "--speculative-draft-model-quantization")
    config = json.loads((draft / "config.json").read_text())  # read (and checked) by the draft checks already
    quant = config.get("quantization_config")
    draft_method = quant.get("quant_method") if isinstance(quant, dict) else None
    if where is None:
        result.add(
            name, Status.NOT_CHECKED, "how this SGLang picks the draft's quantization is not read from its source"
        )
    elif target_method is None or draft_setting is not None:
        how = f"--speculative-draft-model-quantization {draft_setting}" if draft_setting else "its own config.json"
        result.add(name, Status.OK, f"the draft's quantization comes from {how}, not from the target's", where)
    elif draft_method == target_method:
        result.add(
            name, Status.OK, f"the draft inherits --quantization {target_method}, which its config asks for", where
        )
    else:
        result.add(
            name, Status.FAIL,
            f"extra_args sets --quantization {target_method}, which SGLang also gives the draft unless "
            f"--speculative-draft-model-quantization is set; the draft {draft} is "
            f"{draft_method or 'not quantized'}, so it fails when it loads, after the target. Add "
            f"--speculative-draft-model-quantization {draft_method or 'unquant'} to extra_args",
            where,
        )  # fmt: skip


def check_draft_attention(result: Preflight, settings: ServerSettings, index: SourceIndex, draft_arch: str) -> None:
    """The draft runs with speculative_draft_attention_backend, else the target's attention_backend: that
    backend must serve the draft's attention (an MLA-only backend cannot run a Llama-architecture draft)."""
    name = "draft attention backend"
    chosen = settings.speculative_draft_attention_backend
    backend = chosen or settings.attention_backend
    table, mla, override = attention_backends.backends(index), attention_backends.mla_architectures(index), \
        attention_backends.draft_override(index)  # fmt: skip
    serves, where = table.get(backend, (attention_backends.Serves.UNKNOWN, None))
    if mla is None or serves is attention_backends.Serves.UNKNOWN:
        result.add(name, Status.NOT_CHECKED, f"which models the {backend} backend serves is not read from this "
                   "SGLang's source; the draft may or may not run with it", where)  # fmt: skip
        return
    draft_mla = draft_arch in mla[0]
    kind = attention_backends.Serves.MLA if draft_mla else attention_backends.Serves.MHA
    how = "set by speculative_draft_attention_backend" if chosen else (
        f"inherited from attention_backend: SGLang runs the draft with the target's backend unless "
        f"speculative_draft_attention_backend is set ({override})"
    )  # fmt: skip
    if serves in (attention_backends.Serves.BOTH, kind):
        result.add(
            name, Status.OK, f"{backend} ({how}) serves {serves.value}, the draft {draft_arch} among them", where
        )
        return
    fits = [b for b, (s, _) in table.items() if s in (attention_backends.Serves.BOTH, kind)]
    result.add(
        name, Status.FAIL,
        f"the draft {draft_arch} ({'MLA' if draft_mla else 'non-MLA'} attention, {mla[1]}) would run with {backend} "
        f"({how}), which serves {serves.value}: the draft fails when it loads, after the target. Set "
        f"speculative_draft_attention_backend to one that serves it ({', '.join(fits[:3])})",
        where,
    )  # fmt: skip


def check_draft_revision(result: Preflight, settings: ServerSettings, index: SourceIndex) -> None:
    """A pinned target revision reaches a draft hub id that has none of its own (the draft's repository has no
    such commit: the draft fails after the target has loaded). Local directories take no revision."""
    draft = settings.speculative_draft_model_path
    if settings.revision is None or draft is None or _looks_local(draft):
        return
    name = "draft revision"
    where = eagle3_source.draft_revision_inheritance(index)
    if settings.speculative_draft_model_revision is not None:
        result.add(name, Status.OK, f"{draft} has its own revision, {settings.speculative_draft_model_revision}", where)
    elif where is None:
        result.add(name, Status.NOT_CHECKED, "whether this SGLang gives the draft the target's revision is not in "
                   "its source; set speculative_draft_model_revision to be sure")  # fmt: skip
    else:
        result.add(
            name, Status.FAIL,
            f"revision {settings.revision} (the target's) is given to the draft {draft} too, since "
            f"speculative_draft_model_revision is not set; the draft's repository has no such commit, so the draft "
            f"fails after the target has loaded. Set speculative_draft_model_revision (`sglang-eagle3 models lock "
            f"{draft}` prints its commit)",
            where,
        )  # fmt: skip


def check_draft_path(result: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree, arch: str) -> None:
    """No draft path (only NEXTN gets past the settings without one): does SGLang take the target's own MTP
    layers, or load the whole target as the draft (sgl-project/sglang #36528)?"""
    if not settings.speculative_algorithm or settings.speculative_draft_model_path:
        return
    try:
        self_draft = eagle3_source.self_draft_targets(SourceIndex(tree))
    except SourceLayoutError:
        self_draft = None
    name = "draft model"
    if self_draft is None:
        result.add(name, Status.NOT_CHECKED, "speculative_draft_model_path is not set, and this SGLang's source does "
                   "not say which targets it drafts for themselves; set speculative_draft_model_path")  # fmt: skip
    elif arch in self_draft.architectures:
        result.add(name, Status.OK, f"speculative_draft_model_path not set: SGLang drafts {arch} with its own MTP "
                   "layers", self_draft.location)  # fmt: skip
    else:
        fallback = f" ({self_draft.fallback})" if self_draft.fallback else ""
        result.add(
            name, Status.FAIL,
            f"speculative_draft_model_path is not set: with speculative_algorithm {settings.speculative_algorithm} "
            f"SGLang {tree.version} fills it in only for {', '.join(self_draft.architectures)} "
            f"({self_draft.location}); "
            f"for {arch} the draft worker loads the target itself as the draft{fallback} and fails after the whole "
            "target has loaded. Set speculative_draft_model_path to an EAGLE-3 draft (e.g. AQ-MedAI/Kimi-K25-eagle3)",
            self_draft.location,
        )  # fmt: skip


def _text_config(config: dict) -> dict:
    """The part of a config.json SGLang reads the model's shape from (get_hf_text_config: text_config if any)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def check_draft_context(
    result: Preflight, settings: ServerSettings, index: SourceIndex, draft: Path, target: str | None
) -> None:
    """The draft gets the target's context length; SGLang refuses one longer than the draft's own unless an
    environment variable allows it (then the draft runs past the length it was trained for)."""
    name = "draft context length"
    rule = draft_inheritance.context_rule(index)
    if rule is None:
        result.add(name, Status.NOT_CHECKED, "which context length this SGLang gives the draft is not read from "
                   "its source")  # fmt: skip
        return
    draft_length = rule.derived(_text_config(json.loads((draft / "config.json").read_text())))
    if settings.context_length is not None:
        target_length, source = settings.context_length, "context_length"
    else:
        config = draft_inputs.read_config(Path(target), "target model") if target else None
        target_length, source = (rule.derived(_text_config(config)) if config else None), "the target's config"
    if draft_length is None or target_length is None:
        unknown = "the draft's" if draft_length is None else f"the target's ({source})"
        result.add(
            name, Status.NOT_CHECKED,
            f"{unknown} config.json names none of {', '.join(rule.keys)} ({rule.derive}), so its context length is "
            f"what its transformers config class defaults to; SGLang gives the draft the target's ({rule.override}) "
            f"and refuses one longer than the draft's own ({rule.refuse})",
            rule.refuse,
        )  # fmt: skip
        return
    how = f"the draft gets the target's context length {target_length} (from {source}, {rule.override})"
    if target_length <= draft_length:
        result.add(name, Status.OK, f"{how}, within its own {draft_length}", rule.refuse)
        return
    environ = {**os.environ, **settings.environment}
    allowed = [v for v in rule.allow_env if environ.get(v, "").lower() in (rule.true_values or ())]
    if allowed:
        result.add(
            name, Status.WARN,
            f"{how}, longer than its own {draft_length}; {allowed[0]} lets SGLang stretch the draft to it, past "
            f"the length it was trained for: fewer tokens accepted on long prompts. Set context_length to "
            f"{draft_length} to stay within it",
            rule.refuse,
        )  # fmt: skip
        return
    allow = f", or {rule.allow_env[0]}=1 in environment (the draft then runs past its length)" if rule.allow_env else ""
    result.add(
        name, Status.FAIL,
        f"{how}, longer than the draft's own {draft_length} ({rule.derive}): SGLang raises ValueError when the draft "
        f"loads, after the target. Set context_length to at most {draft_length}{allow}",
        rule.refuse,
    )  # fmt: skip


def check_draft_model_impl(result: Preflight, settings: ServerSettings, index: SourceIndex, draft_arch: str) -> None:
    """--model-impl reaches the draft too (there is no draft-only flag): an implementation that builds models from
    another class than their architecture does not build the draft as its EAGLE-3 class."""
    value = extra_arg(settings.extra_args, "--model-impl")
    if value is None:
        return
    name = "draft model implementation"
    rule = draft_inheritance.model_impl_rule(index)
    if rule is None or value not in rule.values:
        result.add(name, Status.NOT_CHECKED, f"what --model-impl {value} does to the draft is not read from this "
                   "SGLang's source")  # fmt: skip
    elif value in rule.replaced:
        result.add(
            name, Status.FAIL,
            f"extra_args sets --model-impl {value}, which SGLang gives the draft too ({rule.inherit}): the draft "
            f"{draft_arch} is then not built from its own class and fails when it loads, "
            "after the target. Remove --model-impl from extra_args (SGLang has no draft-only setting for it)",
            rule.replaced[value],
        )  # fmt: skip
    else:
        result.add(name, Status.OK, f"--model-impl {value} (given to the draft too, {rule.inherit}) builds the draft "
                   f"from its own class, {draft_arch}", rule.inherit)  # fmt: skip


def check_draft_load_format(result: Preflight, settings: ServerSettings, index: SourceIndex, draft: Path) -> None:
    """--load-format reaches the draft unless --speculative-draft-load-format is set: a format whose weight files
    the draft's directory does not have fails the draft's load, after the target's."""
    target_format = extra_arg(settings.extra_args, "--load-format")
    draft_format = extra_arg(settings.extra_args, "--speculative-draft-load-format")
    if target_format is None and draft_format is None:
        return
    name = "draft load format"
    rule = draft_inheritance.load_format_rule(index)
    used = draft_format or target_format
    if rule is None or used not in rule.patterns:
        result.add(name, Status.NOT_CHECKED, f"which weight files the {used} loader reads is not read from this "
                   "SGLang's source")  # fmt: skip
        return
    how = f"--speculative-draft-load-format {draft_format}" if draft_format else (
        f"--load-format {target_format}, which SGLang gives the draft too unless --speculative-draft-load-format "
        f"is set ({rule.override})"
    )  # fmt: skip

    def files(patterns: list[str]) -> list[str]:
        wanted = dict.fromkeys([*patterns, *rule.fallback])  # the default loader also takes these (fall_back_to_pt)
        return sorted({p.name for pattern in wanted for p in draft.glob(pattern)})

    patterns, where = rule.patterns[used]
    found = files(patterns)
    if found:
        result.add(name, Status.OK, f"the draft loads with {how}: {', '.join(found[:3])}", where)
        return
    fits = [f for f, (p, _) in rule.patterns.items() if files(p)]
    result.add(
        name, Status.FAIL,
        f"the draft loads with {how}; {draft} has no {' or '.join(dict.fromkeys([*patterns, *rule.fallback]))} "
        f"file, so it fails when it loads, after the target. Add --speculative-draft-load-format "
        f"{fits[0] if fits else 'auto'} to extra_args",
        where,
    )  # fmt: skip


def check_draft_model_override(
    result: Preflight, settings: ServerSettings, index: SourceIndex, draft: Path, target: str | None
) -> None:
    """--json-model-override-args reaches the draft's config too (get_config applies it to every model's): the
    draft checks run again on the draft's and the target's config.json as SGLang overrides them."""
    text = extra_arg(settings.extra_args, OVERRIDE_FLAG)
    if text is None:
        return
    name = "draft model override"
    rule = draft_inheritance.override_rule(index)
    if rule is None:
        result.add(name, Status.NOT_CHECKED, f"how this SGLang applies {OVERRIDE_FLAG} is not read from its source")
        return
    if rule.replaced and extra_arg(settings.extra_args, "--speculative-token-map") is not None:
        result.add(name, Status.NOT_CHECKED, f"with --speculative-token-map the EAGLE worker may give the draft an "
                   f"override of its own instead of {OVERRIDE_FLAG} ({rule.replaced})", rule.replaced)  # fmt: skip
        return
    try:
        override = rule.parsed(text)
    except json.JSONDecodeError as err:  # the value is not shown: extra_args may hold secrets
        result.add(
            name, Status.FAIL,
            f"extra_args gives {OVERRIDE_FLAG} a value that is not JSON ({err.msg} at column {err.colno}): SGLang "
            f"parses it with json.loads ({rule.parse}) and stops when it reads the target's config. Write it as a "
            f"JSON object of config fields, e.g. {OVERRIDE_FLAG} '{{\"max_position_embeddings\": 131072}}'",
            rule.parse,
        )  # fmt: skip
        return
    if not override:
        result.add(name, Status.OK, f"{OVERRIDE_FLAG} is empty: SGLang applies it only when it is not "
                   f"({rule.apply})", rule.apply)  # fmt: skip
        return
    if not isinstance(override, dict) or "text_config" in override:
        what = "replaces the whole text_config" if isinstance(override, dict) else (
            f"is a JSON {type(override).__name__}, not an object of config fields"
        )  # fmt: skip
        result.add(name, Status.NOT_CHECKED, f"{OVERRIDE_FLAG} {what}; what the transformers config's update "
                   f"({rule.apply}) makes of it is not checked here", rule.apply)  # fmt: skip
        return
    keys = ", ".join(sorted(override))
    try:
        problems = _overridden_draft_problems(result, settings, index, rule, override, draft, target)
    except OSError as err:  # no scratch directory or links here (read-only /tmp, no symlinks)
        result.add(name, Status.NOT_CHECKED, f"the draft with {OVERRIDE_FLAG} applied could not be copied to check "
                   f"it: {err.strerror or err}", rule.apply)  # fmt: skip
        return
    reaches = f"{OVERRIDE_FLAG} ({keys}), which SGLang applies to the draft's config too ({rule.inherit}, {rule.apply})"
    if not problems:
        result.add(
            name, Status.OK, f"extra_args sets {reaches}; the draft checks come out the same with it", rule.apply
        )
        return
    worst = findings.verdict(problems)
    said = "; ".join(f"{f.name}: {f.message}" for f in problems)
    outcome = {
        Status.FAIL: f"with it the draft fails: {said}. SGLang has no draft-only override: keep in {OVERRIDE_FLAG} "
        "only keys the draft can take, or remove it",
        Status.WARN: f"with it: {said}",
    }.get(worst, f"with it these draft checks cannot tell: {said}")
    result.add(name, worst, f"extra_args sets {reaches}; {outcome}", rule.apply)


OVERRIDE_FLAG = "--json-model-override-args"


def _overridden_draft_problems(
    result: Preflight, settings: ServerSettings, index: SourceIndex, rule, override: dict, draft: Path,
    target: str | None,
) -> list[Finding]:  # fmt: skip
    """The draft checks (those that read a config.json) on scratch copies of the draft and the target with the
    override applied; the findings worse than without it, named as the draft checks name them."""
    before = {f.name: f.status for f in result.findings}
    checked = Preflight()
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-override-") as tmp:
        copy = _overridden_copy(rule, override, draft, Path(tmp) / "draft")
        target_copy = str(_overridden_copy(rule, override, Path(target), Path(tmp) / "target")) if target else None
        shown = {str(copy): str(draft), str(target_copy): str(target)}  # the messages name the real directories
        try:
            report = draft_check.check(
                index.tree, str(copy), target_copy or settings.model_path, algorithm=settings.speculative_algorithm
            )
        except draft_check.DraftInputError as err:
            return [Finding("draft config", Status.FAIL, _shown(str(err), shown))]
        checked.findings += [f.prefixed("draft") for f in report.findings]
        if report.architecture:
            check_draft_attention(checked, settings, index, report.architecture)
        check_draft_quantization(checked, settings, index, copy)
        check_draft_context(checked, settings, index, copy, target_copy)
        rank = list(Status).index
        return [
            Finding(f.name, f.status, _shown(f.message, shown), f.where)
            for f in checked.findings
            if rank(f.status) > rank(before.get(f.name, Status.OK))
        ]


def _overridden_copy(rule, override: dict, model: Path, copy: Path) -> Path:
    """``copy``: the model's config.json with the override applied (get_config's own statement), and links to
    every other file of the model (the draft checks read the weights' headers)."""
    copy.mkdir()
    config = json.loads((model / "config.json").read_text())  # read and checked by the draft checks already
    (copy / "config.json").write_text(json.dumps(rule.applied(config, override)))
    for entry in model.iterdir():
        if entry.name != "config.json":
            (copy / entry.name).symlink_to(entry.resolve())
    return copy


def _shown(message: str, paths: dict[str, str]) -> str:
    for scratch, real in paths.items():
        message = message.replace(scratch, real)
    return message


def check_draft_chunked_prefix(
    result: Preflight, settings: ServerSettings, index: SourceIndex, draft_arch: str, target_arch: str
) -> None:
    """The other way round (sgl-project/sglang #22780): the draft's runner turns the chunked prefix cache off in
    the server args it shares with the target, after the target was built with it on. A backend that reads the
    flag again on each prefill then finds it off on the target's MLA chunked-prefix path, and asserts."""
    name, flag = "draft chunked prefix cache", "--disable-chunked-prefix-cache"
    rule, mla = draft_inheritance.chunked_prefix_rule(index), attention_backends.mla_architectures(index)
    backend = settings.attention_backend
    split = [f for f in ("--prefill-attention-backend", "--decode-attention-backend") if extra_arg(
        settings.extra_args, f) is not None]  # fmt: skip
    if rule is None or mla is None:
        result.add(name, Status.NOT_CHECKED, "whether the draft's runner changes the target's chunked prefix cache "
                   "is not read from this SGLang's source")  # fmt: skip
    elif flag in settings.extra_args:
        result.add(
            name, Status.OK, f"extra_args sets {flag}: the target is built with the chunked prefix cache off, so the "
            f"draft's runner turning it off ({rule.turn_off}) changes nothing", rule.turn_off,
        )  # fmt: skip
    elif target_arch not in mla[0] or draft_arch in mla[0] or backend not in rule.supported:
        why = (
            f"the target {target_arch} is not MLA" if target_arch not in mla[0]
            else f"attention_backend {backend} is not one of {', '.join(rule.supported)}"
            if backend not in rule.supported else f"the draft {draft_arch} is MLA, as the target is"
        )  # fmt: skip
        result.add(name, Status.OK, f"{why}: the draft's runner turns the chunked prefix cache off ({rule.turn_off}) "
                   "only where the target's own runner already has", rule.turn_off)  # fmt: skip
    elif split or backend not in rule.reads:
        what = f"with {split[0]} in extra_args, which backend runs" if split else f"which classes {backend} builds for"
        result.add(name, Status.NOT_CHECKED, f"{what} the target's prefill, and whether it reads the chunked prefix "
                   "cache flag on each prefill, is not read here", rule.turn_off)  # fmt: skip
    else:
        per_request = [where for where, each in rule.reads[backend] if each]
        how = (
            f"the draft {draft_arch} is not MLA, so its runner ({rule.every_runner}) turns "
            f"disable_chunked_prefix_cache on ({rule.turn_off}) in the server args it shares with the target, after "
            f"the target was built ({rule.draft_after_target}) and its MLA attention kept the flag off "
            f"({rule.model_keeps})"
        )  # fmt: skip
        if not per_request:
            built = ", ".join(where for where, _ in rule.reads[backend]) or "nowhere"
            result.add(name, Status.OK, f"{how}; {backend} reads the flag only when it is built ({built}), before "
                       "that: the target keeps its chunked prefix cache", rule.turn_off)  # fmt: skip
            return
        calm = [b for b in rule.supported if rule.reads.get(b) and not any(each for _, each in rule.reads[b])]
        result.add(
            name, Status.WARN,
            f"{how}; {backend} reads it again on each prefill ({per_request[0]}: asserts it is off), so the first "
            "prefill of a long prompt that attends to a cached or earlier chunk's prefix on the target's "
            "chunked-prefix path raises AssertionError and stops the server (sgl-project/sglang #22780). Add "
            f"{flag} to extra_args" + (f", or set attention_backend {calm[0]}" if calm else ""),
            per_request[0],
        )  # fmt: skip
