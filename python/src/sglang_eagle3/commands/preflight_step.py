"""The step before `serve` and `bench sweep` start anything: preflight on the launch plan, then refuse unless it
passed. One function for both, so they judge and refuse alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from ..errors import CheckFailed
from ..judging import preflight
from ..serving import launch_plan
from ..serving.launch_plan import LaunchPlan
from ..serving.settings import ServerSettings
from ..source.tree import SGLangTree
from ..trees import release


@dataclass
class Judged:
    """A launch plan and preflight's verdict on it."""

    plan: LaunchPlan
    checks: preflight.Preflight
    tree: SGLangTree | None  # the SGLang preflight read: --sglang's, else the importable one
    runs: Path | None  # the sglang package the plan's command imports
    note: str | None  # set when the two differ: what the command runs is not what was judged


def judge(settings: ServerSettings, sglang: str | None, drafts: bool = True) -> Judged:
    """Build the launch plan once and run preflight on it (``drafts=False``: not the draft, see preflight.run),
    reading the SGLang ``sglang`` names (else the importable one)."""
    named = release.resolve(sglang) if sglang is not None else None
    launch = preflight.prepare(settings, named, drafts=drafts, plan=launch_plan.build(settings))
    checks, runs = preflight.judge(launch), launch_plan.imported_sglang(launch.plan)
    note = release.not_the_one_run(launch.tree, runs, launch.plan.argv[0])
    return Judged(launch.plan, checks, launch.tree, runs, note)


def preflight_or_refuse(settings: ServerSettings, sglang: str | None, drafts: bool = True) -> Judged:
    """Preflight, printed (its findings, and a note when the command runs another SGLang than was judged); then
    CheckFailed, before anything starts, unless it passed."""
    judged = judge(settings, sglang, drafts)
    click.echo(judged.checks.render_text())
    if judged.note:
        click.echo(f"note: {judged.note}", err=True)
    if not judged.checks.passed:
        raise CheckFailed("preflight failed; nothing was started. Fix the items marked FAIL above.")
    return judged
