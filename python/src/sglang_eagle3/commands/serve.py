"""`sglang-eagle3 serve`: preflight, then start SGLang and wait until it serves."""

from __future__ import annotations

import json
import signal
import sys

import click

from .. import options
from ..cli_common import load_settings
from ..errors import printable
from ..exit_status import ExitStatus
from ..judging import preflight
from ..judging.judged_plan import JudgedPlan
from ..serving import launcher


def _stopped_before_start(_signum, _frame):
    """SIGTERM to `serve` before the server started (preflight): exit 0, as a stopped server does (systemd stops the
    unit so, and counts any other status as a failure)."""
    click.echo("sglang-eagle3 serve: stopped by SIGTERM before the server started; nothing was started", err=True)
    sys.exit(ExitStatus.OK)


@click.command("serve")
@options.server_settings
@click.option("--dry-run", is_flag=True, help="Print the plan and the preflight verdicts; start nothing (--json too).")
@options.json_output
@options.sglang
def serve_command(config, assignments, profile, dry_run, as_json, sglang) -> None:
    """Preflight, then start SGLang and wait until it serves.

    Preflight takes seconds: the probe on the installed SGLang, GPUs (nvidia-smi),
    model directories, the port. Any failure stops here, before the model load.
    With --sglang, preflight reads that SGLang; the command still runs the one its
    Python imports, and the output says so when the two differ.
    """
    if not (dry_run or as_json):  # the launcher answers SIGTERM from the start on; before, this does, the same way
        signal.signal(signal.SIGTERM, _stopped_before_start)
    s = load_settings(config, assignments, profile)
    judged = preflight.preflight(s, sglang)
    if as_json:
        click.echo(json.dumps({"profile": profile, **judged.to_dict()}, indent=2))
    elif dry_run:
        click.echo(judged.render_plan(profile))
        click.echo(judged.render_text())
    if dry_run or as_json:
        sys.exit(ExitStatus.OK if judged.passed else ExitStatus.CHECK_FAILED)
    plan = judged_or_refused(judged).plan
    click.echo(f"starting: {printable(plan.shell())}")
    outcome = launcher.serve(
        plan, plan.health_url, s.ready_timeout, s.stop_timeout, log=lambda m: click.echo(m, err=True)
    )
    click.echo(f"sglang-eagle3 serve: {outcome.message}", err=True)
    sys.exit(outcome.status)


def judged_or_refused(judged: JudgedPlan) -> JudgedPlan:
    """Preflight's findings printed (and on stderr a note when the command runs another SGLang than was judged);
    then, unless it passed, CheckFailed before anything starts: `serve` and `bench sweep` refuse alike."""
    click.echo(judged.render_text())
    if judged.note:
        click.echo(f"note: {judged.note}", err=True)
    if refusal := judged.refusal():
        raise refusal
    return judged
