"""Findings: what every check concludes, on one scale, in one shape: a finding reads the same in every command
(``[FAIL] port: 0.0.0.0:30000 is in use; ...``) and in every ``--json`` output; a list's verdict is its worst status.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace


class Status(enum.StrEnum):
    """How a check came out, from best to worst (the order is the severity)."""

    OK = "ok"  # checked, and as it must be
    NOT_CHECKED = "not_checked"  # not checked (e.g. a combination nothing here knows about): no verdict either way
    WARN = "warn"  # starts and works, but something is off, will not be as asked, or cannot be checked fully
    FAIL = "fail"  # would not start, fails after the model has loaded, or silently does the wrong thing

    @property
    def word(self) -> str:
        """OK, NOT CHECKED, WARN, FAIL: the verdict as a line of text says it."""
        return self.value.replace("_", " ").upper()

    @property
    def label(self) -> str:
        """The four characters between the brackets of a finding's line."""
        return LABELS[self]


LABELS = {Status.OK: " OK ", Status.NOT_CHECKED: " ?? ", Status.WARN: "WARN", Status.FAIL: "FAIL"}
_SEVERITY = {status: rank for rank, status in enumerate(Status)}


@dataclass(frozen=True)
class Finding:
    name: str  # what was checked: "port", "draft hidden size", "get_embed_and_head", "speed-up"
    status: Status
    message: str  # what was found, and for WARN and FAIL what to do about it
    where: str | None = None  # the file (file:line in SGLang's source) it rests on, where one does

    def render(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return f"[{self.status.label}] {self.name}: {self.message}{at}"

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status.value, "message": self.message, "where": self.where}

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        """What to_dict wrote, read back (KeyError, ValueError: it is no finding)."""
        return cls(data["name"], Status(data["status"]), data["message"], data.get("where"))

    def prefixed(self, prefix: str) -> Finding:
        """The same finding named as part of a larger check: ``draft layers`` for the draft checks' ``layers``."""
        return replace(self, name=f"{prefix} {self.name}")


def verdict(findings: Iterable[Finding]) -> Status:
    """The worst status among the findings; OK for none."""
    return max((f.status for f in findings), key=_SEVERITY.__getitem__, default=Status.OK)


def passed(findings: Iterable[Finding]) -> bool:
    """No finding is FAIL: the command exits 0."""
    return verdict(findings) is not Status.FAIL


def render_verdict(findings: list[Finding]) -> str:
    """``Verdict: FAIL (2 fail, 1 warn, 5 ok)``."""
    counts = [(s, sum(f.status is s for f in findings)) for s in reversed(Status)]
    tally = ", ".join(f"{n} {s.word.lower()}" for s, n in counts if n)
    return f"Verdict: {verdict(findings).word}" + (f" ({tally})" if tally else "")


def to_json(findings: list[Finding]) -> dict:
    """``{"verdict": "fail", "findings": [...]}``: the part of every --json output that judges."""
    return {"verdict": verdict(findings).value, "findings": [f.to_dict() for f in findings]}


class Judged:
    """A report that holds ``findings`` (a field or a property): its verdict and whether it passed,
    derived one way for the probe, the draft checks, preflight, patch check and the bench gate."""

    findings: list[Finding]

    @property
    def verdict(self) -> Status:
        return verdict(self.findings)

    @property
    def passed(self) -> bool:
        return passed(self.findings)


@dataclass
class Report(Judged):
    """Findings as checks add them, one after the other (preflight's checks write into one)."""

    findings: list[Finding] = field(default_factory=list)

    def add(self, name: str, status: Status, message: str, where: str | None = None) -> None:
        self.findings.append(Finding(name, status, message, where))

    def render_text(self) -> str:
        return "\n".join([*(f.render() for f in self.findings), render_verdict(self.findings)])

    def to_dict(self) -> dict:
        return to_json(self.findings)
