"""Every place a stack's SGLang lets its server arguments out, with a disposition each: the hand-written
patches/sglang-<version>/secret-exits.json, checked against the pristine wheel.

The scan is sglang_eagle3's own (source/secret_exits.py: `patch check` runs it on any tree, and keeps the file
beside the series it ships); this audit checks the file as a whole against the stack's pinned SGLang: no
secret-looking field the file does not name, one disposition for every exit and no entry for an exit that is gone,
every rule used, each closing patch in the series, and the reads by a name the scan cannot resolve listed.
tests/test_secret_exits.py checks the same, and runs each closed exit with SGLang's own code.
"""

from __future__ import annotations

from sglang_eagle3 import stacks
from sglang_eagle3.source import secret_exits
from sglang_eagle3.trees import patchset

from .base import Audit
from .closure import REPO, Closure


def problems(report: secret_exits.TreeReport, audit: secret_exits.SecretAudit, series: list[str]) -> list[str]:
    """What the audit's file does not account for in the tree's report; empty when it accounts for everything."""
    found = [
        f"{name}: looks secret, and is neither a secret nor a look-alike of the file" for name in report.new_fields
    ]
    found += [f"{e.where} {e.key}: an exit with no disposition" for e in report.unknown]
    exits = {e.key: e for e in report.exits}
    found += [f"{key}: an entry for an exit the tree does not have" for key in audit.exits if key not in exits]
    for key, entry in audit.exits.items():
        kind = audit.disposition(entry)
        if not kind or not str(entry[kind]).strip():
            found.append(f"{key}: needs exactly one of {', '.join(secret_exits.DISPOSITIONS)}, with its text")
        if key in exits and audit.rule_for(exits[key].file) is not None:
            found.append(f"{key}: a rule covers its file already; remove the entry")
        elif key in exits and entry["where"] != exits[key].where:
            found.append(f"{key}: moved to {exits[key].where} (the entry says {entry['where']})")
    used = {audit.rule_for(e.file) for e in report.exits} - {None}
    found += [f"rule {rule}: no exit of the tree is in its files" for rule in audit.rules if rule not in used]
    for key, entry in {**audit.exits, **audit.patched_exits}.items():
        if "closed_by" in entry and not (entry["closed_by"] in series and entry.get("via") and entry.get("how")):
            found.append(f"{key}: closed_by names no patch of the series, or says no via and how")
    if report.unresolved != audit.unresolved:
        found.append("unresolved: the file's list is not the scan's (the reads of a field by a name not resolved)")
    return found


class SecretExits(Audit):
    name = "secret-exits"
    inputs = ("each stack's pinned SGLang wheel", "each stack's patch series")
    how = "edit it: each exit of the pristine tree has one disposition (tests/test_secret_exits.py says which)"

    def hand_written(self) -> list[str]:
        return [f"{s.series}/{secret_exits.DATA_FILE}" for s in stacks.stacks().values()]

    def scan(self, closure: Closure) -> dict:
        series = REPO / closure.stack.series
        audit = secret_exits.SecretAudit.load(series / secret_exits.DATA_FILE)
        return {"audit": audit, "report": secret_exits.audit_tree(closure.sglang_tree().root, audit),
                "series": patchset.read_series(series / "series")}  # fmt: skip

    def problems(self, data: dict, closure: Closure) -> list[str]:
        return problems(data["report"], data["audit"], data["series"])


AUDIT = SecretExits()
