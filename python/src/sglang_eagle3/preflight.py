"""Preflight: everything that can be checked in seconds before SGLang spends minutes loading.

Each check gives a verdict: ok, warn (starts, but something requested will not be
active) or fail (would not start, or would crash after the load). Failures say what
is wrong and how to fix it.
"""

from __future__ import annotations

import ast
import csv
import difflib
import errno
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from . import draft_check, probe, sglang_source
from .settings import ServerSettings, field_flag

NVIDIA_SMI_ENV = "SGLANG_EAGLE3_NVIDIA_SMI"  # tests point this at recorded outputs
QUERY = ["--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader"]


@dataclass
class Check:
    name: str
    verdict: str  # ok | warn | fail
    message: str


@dataclass
class Gpu:
    index: int
    name: str
    compute_capability: str
    memory: str


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)
    gpus: list[Gpu] = field(default_factory=list)

    def add(self, name: str, verdict: str, message: str) -> None:
        self.checks.append(Check(name, verdict, message))

    @property
    def ok(self) -> bool:
        return not any(c.verdict == "fail" for c in self.checks)


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


def device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """/dev/nvidia0, /dev/nvidia1, ... (not nvidiactl or nvidia-uvm)."""
    return sorted(p for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name))


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or Path(path).expanduser().exists()


COMMIT_SHA = re.compile(r"[0-9a-f]{40}")


def check_model_dir(
    report: Preflight, what: str, path: str | None, revision: str | None = None, revision_field: str = "revision"
) -> None:
    if path is None:
        return
    if not _looks_local(path):
        # A hub id without a commit resolves when SGLang starts: a re-upload changes what is served.
        pin = f"pin it: `sglang-eagle3 models lock {path}` prints the commit for {revision_field}"
        if revision is None:
            report.add(what, "warn", f"{path} (Hugging Face id) has no pinned revision and loads whatever its main "
                       f"branch holds at start-up; {pin}, or serve a fetched directory")  # fmt: skip
        elif not COMMIT_SHA.fullmatch(revision):
            report.add(what, "warn", f"{path}@{revision}: {revision_field} {revision!r} is a branch or tag and can "
                       f"move; only a 40-hex commit sha pins it ({pin})")  # fmt: skip
        else:
            report.add(what, "ok", f"{path}@{revision} (Hugging Face id pinned to a commit, fetched by SGLang)")
        return
    directory = Path(path).expanduser()
    if not directory.is_dir():
        report.add(what, "fail", f"{directory} does not exist; download the model there or give its hub id")
    elif not (directory / "config.json").is_file():
        report.add(what, "fail", f"{directory} has no config.json; point at the model's top directory")
    elif revision is not None:
        report.add(what, "warn", f"{directory}: {revision_field} {revision!r} is ignored for a local directory; "
                   "check its content with `sglang-eagle3 models verify`")  # fmt: skip
    else:
        report.add(what, "ok", f"{directory}")


def check_port(report: Preflight, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                report.add("port", "fail", f"{host}:{port} is in use; stop what listens there or set port")
            else:
                report.add("port", "fail", f"cannot listen on {host}:{port}: {err.strerror}; check host")
            return
    report.add("port", "ok", f"{host}:{port} is free")


def sglang_flags(tree: sglang_source.SGLangTree) -> dict[str, tuple[frozenset[str], bool]]:
    """Every flag ServerArgs.add_cli_args defines: flag -> (all its spellings, takes a value)."""
    flags = {}
    for node in ast.walk(ast.parse((tree.srt / "server_args.py").read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = frozenset(
                a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")
            )
            action = next((k.value for k in node.keywords if k.arg == "action"), None)
            takes_value = not (isinstance(action, ast.Constant) and str(action.value).startswith("store_"))
            for name in names:
                flags[name] = (names, takes_value)
    return flags


def check_extra_args(report: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """extra_args must be flags this SGLang knows, and not ones a setting already owns."""
    if not settings.extra_args:
        return
    known = sglang_flags(tree)
    owned = {field_flag(name) for name in ServerSettings.model_fields} - {None}
    owned_spellings = {spelling: flag for flag in owned if flag in known for spelling in known[flag][0]}
    args = list(settings.extra_args)
    while args:
        token = args.pop(0)
        name, has_inline_value = token.split("=", 1)[0], "=" in token
        if not name.startswith("--"):
            report.add("extra_args", "fail", f"{token!r} is not a flag; extra_args are SGLang flags and their values")
            return
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            report.add("extra_args", "fail", f"SGLang {tree.version} has no flag {name}{hint}")
            return
        if name in owned_spellings:
            setting = next(n for n in ServerSettings.model_fields if field_flag(n) == owned_spellings[name])
            report.add("extra_args", "fail", f"{name} is the setting {setting!r}; set it there, not in extra_args")
            return
        if known[name][1] and not has_inline_value:
            if not args or args[0].startswith("--"):
                report.add("extra_args", "fail", f"{name} needs a value")
                return
            args.pop(0)
    report.add("extra_args", "ok", " ".join(settings.extra_args))


def run(settings: ServerSettings, sglang_target: str | None = None, nvidia_smi: str | None = None) -> Preflight:
    report = Preflight()

    # GPUs first: on a machine without them nothing else matters much, but we still
    # report every check so one run shows every problem.
    try:
        report.gpus = query_gpus(nvidia_smi)
    except FileNotFoundError:
        devices = device_nodes()
        if devices and len(devices) >= settings.gpus_per_node:
            # Containers and build sandboxes may get the devices without nvidia-smi.
            report.add(
                "gpus", "warn", f"nvidia-smi not found; {len(devices)} GPU device nodes in /dev, capability unknown"
            )
        else:
            report.add(
                "gpus", "fail", "no NVIDIA driver: nvidia-smi not found; run on the GPU host (or install the driver)"
            )
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as err:
        report.add("gpus", "fail", f"nvidia-smi failed: {err}")
    else:
        need = settings.gpus_per_node
        if len(report.gpus) < need:
            report.add(
                "gpus", "fail",
                f"{len(report.gpus)} GPU(s) visible, tp_size {settings.tp_size} over {settings.nnodes} node(s) needs "
                f"{need} here; lower tp_size or check CUDA_VISIBLE_DEVICES",
            )  # fmt: skip
        else:
            caps = sorted({g.compute_capability for g in report.gpus})
            names = sorted({g.name for g in report.gpus})
            report.add("gpus", "ok", f"{len(report.gpus)} x {', '.join(names)} (compute capability {', '.join(caps)})")

    compute_capability = report.gpus[0].compute_capability if report.gpus else "12.0"
    tree = None
    try:
        tree = sglang_source.locate(sglang_target)
        verdict = probe.probe(
            tree,
            arch=_architecture(settings),
            algorithm=settings.speculative_algorithm or "EAGLE3",
            compute_capability=compute_capability,
            tp_size=settings.tp_size,
            torch_symm_mem=settings.enable_torch_symm_mem,
            allreduce_fusion=settings.enable_flashinfer_allreduce_fusion,
        )
    except sglang_source.SGLangNotFound as err:
        report.add("sglang", "fail", str(err))
    else:
        if tree.version != "0.5.9":
            report.add("sglang", "warn", f"SGLang {tree.version} at {tree.root}; this launcher is written for 0.5.9")
        problems = verdict.problems if settings.speculative_algorithm else verdict.allreduce.problems
        if problems:
            report.add("probe", "fail", "; ".join(problems) + " (fix: sglang-eagle3 patch apply)")
        else:
            report.add("probe", "ok", f"SGLang {tree.version} can serve {verdict.arch} ({verdict.algorithm})")
        for warning in verdict.allreduce.warnings:
            report.add("optimisations", "warn", warning)
        check_extra_args(report, settings, tree)

    check_model_dir(report, "model", settings.model_path, settings.revision)
    if settings.speculative_algorithm:
        check_model_dir(
            report, "draft model", settings.speculative_draft_model_path,
            settings.speculative_draft_model_revision, "speculative_draft_model_revision",
        )  # fmt: skip
        if tree is not None and not any(c.verdict == "fail" for c in report.checks if c.name.endswith("model")):
            check_draft(report, settings, tree)
    check_port(report, settings.host, settings.port)
    if settings.api_key_file is not None and not Path(settings.api_key_file).is_file():
        report.add("api key", "fail", f"api_key_file {settings.api_key_file} does not exist")
    return report


DRAFT_VERDICTS = {draft_check.READY: "ok", draft_check.WARN: "warn", draft_check.NOT_READY: "fail"}


def check_draft(report: Preflight, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """The draft checks of `probe --draft` for the configured draft and target (see draft_check)."""
    if settings.speculative_draft_model_path is None:
        return
    try:
        draft = draft_check.check(
            tree, settings.speculative_draft_model_path, settings.model_path, algorithm=settings.speculative_algorithm
        )
    except draft_check.DraftInputError as err:
        report.add("draft", "fail", str(err))
        return
    for result in draft.results:
        report.add(f"draft {result.check}", DRAFT_VERDICTS[result.verdict], result.evidence)


def _architecture(settings: ServerSettings) -> str:
    """The target's architecture from a local config.json; Kimi-K2.5 for hub ids."""
    config = Path(settings.model_path).expanduser() / "config.json"
    if config.is_file():
        import json

        try:
            return json.loads(config.read_text())["architectures"][0]
        except (ValueError, KeyError, IndexError):
            pass
    return probe.DEFAULT_ARCH
