"""`sglang-eagle3 serve`: preflight, then start SGLang and wait until it serves."""

from __future__ import annotations

import json
import shlex
import signal
import sys

import click

from .. import options, redaction
from ..cli_common import check_key_files, load_settings
from ..errors import printable, shortened
from ..exit_status import ExitStatus
from ..serving import launch_plan, launcher
from . import preflight_step


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
    check_key_files(s)
    if not (dry_run or as_json):
        plan = preflight_step.preflight_or_refuse(s, sglang).plan
        click.echo(f"starting: {printable(plan.shell())}")
        outcome = launcher.serve(
            plan, launch_plan.health_url(s), s.ready_timeout, s.stop_timeout, log=lambda m: click.echo(m, err=True)
        )
        click.echo(f"sglang-eagle3 serve: {outcome.message}", err=True)
        sys.exit(outcome.status)
    judged = preflight_step.judge(s, sglang)
    plan, checks, note = judged.plan, judged.checks, judged.note
    if as_json:
        click.echo(json.dumps(redaction.hide_values({
            "profile": profile, "argv": plan.argv, "sglang_argv": plan.sglang_argv,
            "env": redaction.masked_env(plan.env), "health_url": launch_plan.health_url(s),
            "sglang": {"judged": str(judged.tree.package) if judged.tree else None,
                       "runs": str(judged.runs) if judged.runs else None, "note": note},
            "preflight": checks.to_dict(),
        }), indent=2))  # fmt: skip
    else:
        click.echo(f"profile: {profile}")
        # Each word shortened and its control characters escaped: a line to read; --json has the argv exactly.
        click.echo(f"command: {shlex.join(shortened(word) for word in plan.argv)}")
        for key, value in redaction.masked_env(plan.env).items():
            click.echo(f"env:     {shortened(key)}={shortened(value)}")
        if note:
            click.echo(f"note:    {note}")
        click.echo(checks.render_text())
    sys.exit(ExitStatus.OK if checks.passed else ExitStatus.CHECK_FAILED)
