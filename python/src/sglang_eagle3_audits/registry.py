"""The one list of the audits, in the order they run (each audit module defines one, as AUDIT)."""

from __future__ import annotations

from sglang_eagle3 import stacks

from . import (
    driver_loaders,
    flashinfer_calls,
    metadata,
    runtime_lookups,
    secret_exits,
    sglang_rules,
    startup_gates,
    unresolved,
    wheel_libraries,
)
from .base import COMMAND, Audit

REGISTRY: tuple[Audit, ...] = tuple(
    module.AUDIT
    for module in (
        wheel_libraries,
        driver_loaders,
        runtime_lookups,
        startup_gates,
        metadata,
        sglang_rules,
        secret_exits,
        flashinfer_calls,
        unresolved,
    )  # fmt: skip
)


def named(names: list[str] | None) -> list[Audit]:
    """The audits ``names`` names (every audit when None), in the registry's order; KeyError for an unknown one."""
    known = {a.name: a for a in REGISTRY}
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [a for a in REGISTRY if names is None or a.name in names]


def entries() -> dict[str, dict]:
    """The register's entries of the audits (generated.json's shape; nix/scripts/check-generated.py adds them): one
    per audit, its data in every stack's data directory, and one per audit's docs, checked from the data as
    committed (no wheel read: not slow)."""
    command = ["python", "-m", "sglang_eagle3_audits"]
    versions = stacks.stacks().values()
    found = {}
    for audit in REGISTRY:
        only = ["--only", audit.name]
        if audit.docs_only:  # one entry: its page, checked from the other audits' data as committed (not slow)
            found[audit.name] = {"files": [audit.docs.page], "generator": f"{COMMAND} --markdown {audit.name}",
                                 "inputs": list(audit.inputs), "write": [[*command, "--write", "--docs", *only]],
                                 "check": [[*command, "--check", "--docs", *only]]}  # fmt: skip
            continue
        entry = {"generator": f"{COMMAND} --only {audit.name}", "inputs": list(audit.inputs), "slow": audit.slow,
                 "write": [[*command, "--write", *only]], "check": [[*command, "--check", *only]]}  # fmt: skip
        if audit.data:
            entry["files"] = [f"{s.data}/{audit.data}" for s in versions]
        else:  # data written by hand, checked against the source
            entry.update(files=audit.hand_written(), generator=None, handWritten=True, write=None, how=audit.how)
        found[audit.name] = dict(sorted(entry.items()))
        if audit.docs is not None:
            found[f"{audit.name}-docs"] = {
                "files": [audit.docs.page],
                "generator": f"{COMMAND} --markdown {audit.name}",
                "inputs": [f"each stack's {audit.data}" + (f" and {audit.policy}" if audit.policy else "")],
                "write": [[*command, "--write", "--docs", *only]],
                "check": [[*command, "--check", "--docs", *only]],
            }
    return found
