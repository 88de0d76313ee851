"""The A/B run on one host: serve side A, measure, stop; serve side B, measure, stop; gate B against A.

A side is a `sglang-eagle3` program (each Nix stack has its own, wrapping its own SGLang) with a profile and
settings. The same settings reach both sides, so the comparison is the stacks (or the profiles), not the
configuration. Each side is started through its own `serve`, so its own preflight and argument parser judge the
settings: both sides' preflights run before either side starts. Records are written as they come.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput, CheckFailed, Eagle3Error, shown
from ..exit_status import ExitStatus
from ..judging.findings import Status
from ..judging.judged_plan import JudgedPlan
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


def preflight(side: Side, serve_argv: list[str]) -> None:
    """The side's own `serve --dry-run --json`: its SGLang and its preflight judge the settings before anything
    starts. CheckFailed with the findings marked FAIL, BadInput when its serve refuses the settings."""
    argv = [*serve_argv, "--dry-run", "--json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CheckFailed(f"{side.label}: cannot run its preflight ({shlex.join(argv)}): {err}") from None
    if done.returncode == ExitStatus.OK:
        return
    if done.returncode == ExitStatus.BAD_INPUT:
        raise BadInput(f"{side.label}: {_last_line(done.stderr or done.stdout)}")
    try:
        found = JudgedPlan.from_dict(json.loads(done.stdout)).findings
    except (ValueError, KeyError, TypeError):
        raise CheckFailed(f"{side.label}: its preflight ({shlex.join(argv)}) {launcher.describe_exit(done.returncode)}"
                          f": {_last_line(done.stderr or done.stdout)}") from None  # fmt: skip
    failed = [f"  [FAIL] {f.name}: {f.message}" for f in found if f.status is Status.FAIL]
    raise CheckFailed(f"{side.label}: preflight failed; nothing was started:\n" + "\n".join(failed))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1].removeprefix("Error: ") if lines else "(no output)"


def measure(side: Side, settings: ServerSettings, argv: list[str], template: RunConfig, out_dir: Path,
            log=print) -> Measured:  # fmt: skip
    """Serve one side with its own program until ready, run the benchmark against it, stop it."""
    server_log = out_dir / f"{side.label}-server.log"
    config = RunConfig(**{**template.__dict__, "url": launch_plan.base_url(settings), "label": side.label})
    log(f"{side.label}: starting {shlex.join(argv)} (log: {server_log})")
    # The side's serve, started as the launcher starts SGLang (its own session): one signal reaches it, and it
    # stops its SGLang within stop_timeout; the slack leaves it that time before SIGKILL.
    serve = launch_plan.LaunchPlan(argv, {})
    with server_log.open("ab") as sink:
        logged_from = sink.tell()
        try:
            with launcher.running(serve, launch_plan.health_url(settings), settings.ready_timeout,
                                  settings.stop_timeout + STOP_SLACK, interval=1.0, output=sink):  # fmt: skip
                log(f"{side.label}: ready; measuring")
                outcome = run(config)
        except launcher.NotReady as failure:
            raise _side_not_ready(side, failure, server_log, logged_from, settings) from None
    if outcome.interrupted:
        raise BenchError(f"{side.label}: interrupted; the requests measured so far are kept in {config.output}")
    return Measured(side, report.runs(report.load(config.output))[outcome.run_id], server_log)


def _side_not_ready(side: Side, failure: launcher.NotReady, server_log: Path, logged_from: int,
                    settings: ServerSettings) -> Eagle3Error:  # fmt: skip
    """Why a side's serve ended before its server was ready, in its own exit status's words."""
    with server_log.open("rb") as f:
        f.seek(logged_from)
        said = f.read().decode(errors="replace")
    if failure.returncode == ExitStatus.CHECK_FAILED:  # serve exits 1 before it starts anything: preflight
        failed = [line for line in said.splitlines() if line.startswith("[FAIL]")]
        return CheckFailed(f"{side.label}: preflight failed; nothing was started:\n"
                           + "\n".join(f"  {line}" for line in failed) + f"\n(its output: {server_log})")  # fmt: skip
    if failure.returncode == ExitStatus.BAD_INPUT:
        return BadInput(f"{side.label}: its serve refused the settings: {_last_line(said)} (see {server_log})")
    if failure.returncode is None:
        return launcher.NotReady(f"{side.label}: the server was not ready after {settings.ready_timeout:.0f}s "
                                 f"(ready_timeout); see {server_log}")  # fmt: skip
    return launcher.NotReady(f"{side.label}: the {failure}; see {server_log}", ExitStatus.SERVER_EXITED)


def run_ab(a: Side, b: Side, settings: dict[str, ServerSettings], argv: dict[str, list[str]], template: RunConfig,
           out_dir: Path, threshold: float, floor: float | None = None, log=print) -> report.GateReport:  # fmt: skip
    """Both sides one after the other (they share the GPUs and the port), then the gate: B / A >= threshold."""
    if a.label == b.label:
        raise BenchError(f"the two sides need different labels, not both {shown(a.label)} (--a-label, --b-label)")
    for side in (a, b):  # both, before either starts: B's preflight is not left to the end of A's run
        log(f"{side.label}: preflight ({shlex.join([*argv[side.label], '--dry-run'])})")
        preflight(side, argv[side.label])
    out_dir.mkdir(parents=True, exist_ok=True)
    template = RunConfig(**{**template.__dict__, "output": out_dir / "ab.jsonl"})
    first = measure(a, settings[a.label], argv[a.label], template, out_dir, log)
    second = measure(b, settings[b.label], argv[b.label], template, out_dir, log)
    return report.compare(first.records, second.records, threshold=threshold, floor=floor, labels=(a.label, b.label))


def check_program(program: str) -> str | None:
    """Why a side's program cannot run (`PROGRAM --version` fails), or None."""
    try:
        argv = shlex.split(program)
    except ValueError as err:  # an unterminated quote
        return f"it is not a command line a shell could split ({err}); check its quotes"
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
