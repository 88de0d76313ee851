"""A launch plan judged: the plan, preflight's findings on it, the SGLang judged and the one the plan runs.

preflight.preflight makes it; this module reports it. `serve` prints it (render_plan for --dry-run, then
render_text) or writes it as --json (to_dict), and `serve` and `bench sweep` refuse on it (refusal). `bench ab` reads
the other stack's `serve --dry-run --json` back with from_dict: that side is another program (its stack's own
`sglang-eagle3` and SGLang), so it runs as one, and its document is read with the definition that wrote it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from .. import redaction
from ..errors import CheckFailed, shortened
from ..serving.launch_plan import LaunchPlan
from ..source.sglang_source import SGLangTree
from .findings import Finding, Judged, Report


@dataclass
class JudgedPlan(Judged):
    """Preflight on one launch plan; it passed unless a finding is FAIL (findings.Judged: the one scale, whose
    worst status is the verdict)."""

    plan: LaunchPlan
    checks: Report  # the findings (a preflight.Preflight; a Report when read back from a document)
    judged: Path | None = None  # the sglang package preflight read: --sglang's, else the importable one
    runs: Path | None = None  # the sglang package the plan's command imports
    note: str | None = None  # set when the two differ: what the command runs is not what was judged

    @property
    def findings(self) -> list[Finding]:
        return self.checks.findings

    def render_text(self) -> str:
        """The findings and the verdict line."""
        return self.checks.render_text()

    def render_plan(self, profile: str) -> str:
        """What `serve --dry-run` prints before the findings: each word shortened and its control characters escaped,
        a line to read (--json has the argv exactly); secrets in the environment masked."""
        lines = [f"profile: {profile}", f"command: {shlex.join(shortened(word) for word in self.plan.argv)}"]
        lines += [f"env:     {shortened(k)}={shortened(v)}" for k, v in redaction.masked_env(self.plan.env).items()]
        return "\n".join(lines + ([f"note:    {self.note}"] if self.note else []))

    def refusal(self) -> CheckFailed | None:
        """What `serve` and `bench sweep` raise when preflight did not pass (nothing may start); None when it did."""
        if self.passed:
            return None
        return CheckFailed("preflight failed; nothing was started. Fix the items marked FAIL above.")

    def to_dict(self) -> dict:
        """The --json document (`serve` puts the profile first), what looks secret in it hidden."""
        return redaction.hide_values({
            "argv": self.plan.argv, "sglang_argv": self.plan.sglang_argv, "env": redaction.masked_env(self.plan.env),
            "health_url": self.plan.health_url,
            "sglang": {"judged": _text(self.judged), "runs": _text(self.runs), "note": self.note},
            "preflight": self.checks.to_dict(),
        })  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> JudgedPlan:
        """A document to_dict wrote, read back (KeyError, TypeError, ValueError: it is none). Its plan is the one
        shown: the environment masked, no key files."""
        plan = LaunchPlan(list(data["argv"]), dict(data["env"]), sglang_argv=list(data["sglang_argv"]),
                          args=list(data["sglang_argv"][3:]), health_url=data["health_url"])  # fmt: skip
        checks = Report([Finding.from_dict(found) for found in data["preflight"]["findings"]])
        sglang = data["sglang"]
        return cls(plan, checks, _path(sglang["judged"]), _path(sglang["runs"]), sglang["note"])


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def _path(text: str | None) -> Path | None:
    return Path(text) if text is not None else None


def not_the_one_run(judged: SGLangTree | None, runs: Path | None, python: str) -> str | None:
    """What to say when the SGLang preflight read (``judged``) is not the package a command runs (``runs``, as
    ``python`` finds it); None when they are one."""
    if judged is None or (runs is not None and runs == judged.package.resolve()):
        return None
    what = (
        f"the pristine SGLang {judged.version} release ({judged.release}, read from the cache)"
        if judged.release
        else f"SGLang {judged.version or '(unknown version)'} at {judged.package}"
    )
    running = f"the sglang at {runs}" if runs else "no sglang: its Python finds none"
    return (
        f"preflight judged {what}, but the command runs {running} ({python} with the plan's environment). "
        "To judge what runs, drop --sglang or name that directory; to run what was judged, serve from its "
        "Python environment"
    )
