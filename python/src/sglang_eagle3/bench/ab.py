"""The A/B run on one host: serve side A, measure, stop; serve side B, measure, stop; gate B against A.

A side is a `sglang-eagle3` program (each Nix stack has its own, wrapping its own SGLang) with
a profile and settings. The same settings reach both sides, so the comparison is the stacks
(or the profiles), not the configuration: e.g. the SGLang 0.5.9 stack against 0.5.23, or the
baseline profile against EAGLE-3 on one stack (the GPU throughput check). Each side is started
through its own `serve`, so its own preflight and argument parser judge the settings; a side
that does not become ready stops the run with its log kept. Records are written as they come.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..exit_status import ExitStatus
from ..serving import launch_plan, launcher
from ..serving.settings import ServerSettings
from . import BenchError, report
from .runner import RunConfig, run

STOP_SLACK = 30.0  # seconds beyond stop_timeout for the side's serve to stop its SGLang and exit


@dataclass
class Side:
    label: str
    program: str  # a sglang-eagle3 command line, e.g. /nix/store/...-sglang-eagle3-0.1.0/bin/sglang-eagle3
    profile: str = "eagle3"
    assignments: list[str] = field(default_factory=list)  # --set field=value for this side only

    def argv(self, config: Path | None, assignments: list[str]) -> list[str]:
        argv = [*shlex.split(self.program), "serve", "--profile", self.profile]
        if config is not None:
            argv += ["--config", str(config)]
        for assignment in [*assignments, *self.assignments]:
            argv += ["--set", assignment]
        return argv


@dataclass
class Measured:
    side: Side
    records: list[dict]
    log: Path


def measure(side: Side, settings: ServerSettings, argv: list[str], template: RunConfig, out_dir: Path,
            log=print) -> Measured:  # fmt: skip
    """Serve one side with its own program until ready, run the benchmark against it, stop it."""
    server_log = out_dir / f"{side.label}-server.log"
    config = RunConfig(**{**template.__dict__, "url": launch_plan.base_url(settings), "label": side.label})
    log(f"{side.label}: starting {shlex.join(argv)} (log: {server_log})")
    with server_log.open("ab") as sink:
        # Its own session, as the launcher starts SGLang: one signal reaches the side's serve, which
        # stops its SGLang within stop_timeout; the grace leaves it that time before SIGKILL.
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            ready = launcher.wait_ready(launch_plan.health_url(settings), process, settings.ready_timeout, 1.0)
            if ready is launcher.Readiness.EXITED:
                raise launcher.NotReady(f"{side.label}: the server {launcher.describe_exit(process.returncode)} "
                                        f"before it was ready; see {server_log}", ExitStatus.SERVER_EXITED)  # fmt: skip
            if ready is launcher.Readiness.TIMED_OUT:
                raise launcher.NotReady(f"{side.label}: the server was not ready after {settings.ready_timeout:.0f}s "
                                        f"(ready_timeout); see {server_log}")  # fmt: skip
            log(f"{side.label}: ready; measuring")
            outcome = run(config)
        finally:
            launcher.stop(process, settings.stop_timeout + STOP_SLACK)
    if outcome.interrupted:
        raise BenchError(f"{side.label}: interrupted; the requests measured so far are kept in {config.output}")
    return Measured(side, [r for r in report.load(config.output) if r.get("label") == side.label], server_log)


def run_ab(a: Side, b: Side, settings: dict[str, ServerSettings], argv: dict[str, list[str]], template: RunConfig,
           out_dir: Path, threshold: float, floor: float | None = None, log=print) -> report.GateReport:  # fmt: skip
    """Both sides one after the other (they share the GPUs and the port), then the gate: B / A >= threshold."""
    if a.label == b.label:
        raise BenchError(f"the two sides need different labels, not both {a.label!r} (--a-label, --b-label)")
    out_dir.mkdir(parents=True, exist_ok=True)
    template = RunConfig(**{**template.__dict__, "output": out_dir / "ab.jsonl"})
    first = measure(a, settings[a.label], argv[a.label], template, out_dir, log)
    second = measure(b, settings[b.label], argv[b.label], template, out_dir, log)
    return report.compare(first.records, second.records, threshold=threshold, floor=floor, labels=(a.label, b.label))


def check_program(program: str) -> str | None:
    """Why a side's program cannot run (`PROGRAM --version` fails), or None."""
    argv = shlex.split(program)
    if not argv:
        return "empty command"
    try:
        done = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"`{program} --version` exited with {done.returncode}" + (f": {said[-1]}" if said else "")
    return None
