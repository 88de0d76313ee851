"""``patch check``: what each patch of the series is on another SGLang tree (Outcome, below).

Only the two FAIL outcomes need work on this version (a rewritten patch), so the command
exits CHECK_FAILED exactly when one of them is found. Every patch that does not apply
shows its failing hunks (file, hunk header, the rejected lines).
"""

from __future__ import annotations

import enum
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..source import secret_exits, upstream_fixes
from ..source.eagle3 import CAPTURE_METHOD, find_method
from ..source.index import SourceIndex, SourceLayoutError
from ..source.model_class import lookup
from ..source.tree import SGLangTree
from ..trees import patchset
from . import findings
from .capture_rule import run_capture_method
from .findings import Finding, Judged, Status
from .speculative_support import DEFAULT_ARCH


class Outcome(enum.StrEnum):
    APPLIES = "applies"  # ``patch --dry-run`` with the series' own flags (``--fuzz=0``) succeeds
    APPLIED = "already applied"  # it reverses cleanly, so the tree carries it
    # It does not apply, and the tree's own source does what it does (read, not inferred from the failure; the
    # message says what was read).
    UPSTREAM = "already upstream"
    NOT_NEEDED = "not needed"  # it does not apply, and the tree's source makes it moot (the message says why)
    STILL_NEEDED = "still needed"  # it does not apply, and the tree's source still has the problem it fixes
    CONFLICTS = "conflicts"  # it does not apply and nothing here recognises the code in its place


STATUS = {o: Status.FAIL if o in (Outcome.STILL_NEEDED, Outcome.CONFLICTS) else Status.OK for o in Outcome}


@dataclass(frozen=True)
class Hunk:
    file: str  # sglang/srt/... as the patch names it
    header: str  # "@@ -47,6 +47,8 @@", or "" when the file is not in the tree
    reason: str  # GNU patch's "FAILED at 47", or "not in this tree"
    lines: tuple[str, ...] = ()  # the hunk's rejected lines

    def to_dict(self) -> dict:
        return {"file": self.file, "header": self.header, "reason": self.reason, "lines": list(self.lines)}


@dataclass
class PatchCheck:
    patch: patchset.Patch
    outcome: Outcome
    how: str  # how it was recognised, or why it is needed / not needed
    where: str | None = None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def finding(self) -> Finding:
        return Finding(self.patch.name, STATUS[self.outcome], f"{self.outcome}: {self.how}", self.where)

    def to_dict(self) -> dict:
        return {
            "name": self.patch.name,
            "summary": self.patch.summary,
            "outcome": self.outcome.value,
            **self.finding.to_dict(),
            "hunks": [h.to_dict() for h in self.hunks],
        }


SHOWN = 8  # unknown exits listed in the text report; --json has them all


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


@dataclass
class SecretExitCheck:
    """The tree's secret fields and exits set against the series' audit (patches/sglang-<v>/secret-exits.json)."""

    data: Path
    report: secret_exits.TreeReport | None  # None: the tree could not be audited (see error)
    reopened: list[tuple[secret_exits.Exit, str, str]] = field(default_factory=list)  # exit, patch, its outcome
    error: str = ""

    @property
    def name(self) -> str:
        """The audit as messages name it: patches/sglang-0.5.9/secret-exits.json, wherever the checkout is."""
        return f"patches/{self.data.parent.name}/{self.data.name}"

    @property
    def findings(self) -> list[Finding]:
        if self.report is None:
            return [Finding("secret exits", Status.FAIL, f"cannot audit this tree against {self.name}: {self.error}")]
        r = self.report
        fields = (
            Finding("secret fields", Status.FAIL, "secret-looking fields the audit does not know: "
                    + "; ".join(f"{n} ({r.secret_looking[n]})" for n in r.new_fields)
                    + f": add each to secret_fields of {self.name} (and to the series' redaction) or to not_secret, "
                    "with why")
            if r.new_fields
            else Finding("secret fields", Status.OK, f"{len(r.secrets)} secrets among ServerArgs' fields "
                         f"({', '.join(r.secrets)}) and {_count(len(r.secret_looking) - len(r.secrets), 'look-alike')}"
                         f", each known to {self.name}")
        )  # fmt: skip
        problems = []
        if r.unknown:
            shown = "; ".join(f"{e.where} {e.kind} {e.code}" for e in r.unknown[:SHOWN])
            more = f"; {len(r.unknown) - SHOWN} more (--json lists them)" if len(r.unknown) > SHOWN else ""
            problems.append(f"{_count(len(r.unknown), 'exit')} with no disposition in {self.name}: {shown}{more}")
        if self.reopened:
            problems.append("exits closed by patches that do not close them here: " + "; ".join(
                f"{e.where} ({patch}: {outcome})" for e, patch, outcome in self.reopened))  # fmt: skip
        if problems:
            return [fields, Finding("secret exits", Status.FAIL, "; ".join(problems)
                                    + ": close each with a patch, or give it a disposition in the audit")]  # fmt: skip
        closed = len(r.closed)
        return [fields, Finding("secret exits", Status.OK, f"{len(r.exits)} places the server args can leave by, "
                                f"each with a disposition: {closed} closed by the series, {len(r.exits) - closed} "
                                "shown closed, not reachable or in code the server never runs")]  # fmt: skip

    def to_dict(self) -> dict:
        r = self.report
        return {
            "audit": str(self.data),
            "error": self.error or None,
            "secret_fields": r.secrets if r else [],
            "unknown_fields": r.new_fields if r else [],
            "exits": len(r.exits) if r else 0,
            "unknown_exits": [e.__dict__ for e in r.unknown] if r else [],
            "reopened": [{**e.__dict__, "patch": p, "outcome": o} for e, p, o in self.reopened],
        }


@dataclass
class CheckReport(Judged):
    tree: SGLangTree
    series: patchset.PatchSeries
    checks: list[PatchCheck]
    secrets: SecretExitCheck | None = None  # None: the series has no secret-exit audit

    @property
    def findings(self) -> list[Finding]:
        return [c.finding for c in self.checks] + (self.secrets.findings if self.secrets else [])

    def to_dict(self) -> dict:
        return {
            "target": str(self.tree.package),
            "sglang_version": self.tree.version,
            "series_version": self.series.sglang_version,
            "series": str(self.series.directory),
            "patches": [c.to_dict() for c in self.checks],
            "secret_exits": self.secrets.to_dict() if self.secrets else None,
            **findings.to_json(self.findings),
        }

    @property
    def command(self) -> str:
        """The command that checks this series on this version (--series when it is not the version's own)."""
        other = self.series.sglang_version != self.tree.version
        series = f" --series patches/sglang-{self.series.sglang_version}" if other else ""
        return f"sglang-eagle3 patch check --sglang {self.tree.version}{series}"

    def markdown(self) -> str:
        """A table of the series on this tree (docs/upgrade.md embeds one per SGLang version and series)."""
        rows = [
            f"SGLang {self.tree.version}: patch set for {self.series.sglang_version} checked with `{self.command}`",
            "",
            "| Patch | What it does | Outcome | How it was recognised, or why |",
            "|---|---|---|---|",
        ]
        for c in self.checks:
            how = (c.how + (f" ({c.where})" if c.where else "")).replace("|", "\\|")
            rows.append(f"| `{c.patch.name[:4]}` | {c.patch.summary} | **{c.outcome}** | {how} |")
        if self.secrets:
            rows += [
                "",
                *(f"{f.name.capitalize()}: **{f.status.word.lower()}**, {f.message}" for f in self.secrets.findings),
            ]
        return "\n".join(rows)

    def render_text(self, max_lines: int = 12) -> str:
        lines = [
            f"SGLang {self.tree.version or '(unknown version)'} at {self.tree.package}",
            f"Patch set for SGLang {self.series.sglang_version} ({len(self.checks)} patches, "
            f"{' '.join(patchset.PATCH_FLAGS[:2])}) from {self.series.directory}:",
            "",
        ]
        for check in self.checks:
            lines.append(check.finding.render())
            shown: set[str] = set()
            for hunk in check.hunks:
                if hunk.file in shown:  # the first failing hunk of each file; --json has them all
                    continue
                shown.add(hunk.file)
                more = sum(h.file == hunk.file for h in check.hunks) - 1
                also = f"; {more} more hunk{'s' * (more > 1)} of it failed too" if more else ""
                header = f" {hunk.header}" if hunk.header else ""
                lines.append(f"      {hunk.file}{header} ({hunk.reason}{also})")
                body = list(hunk.lines)
                lines += [f"        {line}" for line in body[:max_lines]]
                if len(body) > max_lines:
                    lines.append(f"        ... {len(body) - max_lines} more lines (--json shows them)")
        if self.secrets:
            lines += ["", f"Secret exits (audit {self.secrets.data}):"]
            lines += [f.render() for f in self.secrets.findings]
        lines += ["", findings.render_verdict(self.findings)]
        return "\n".join(lines)


# -- the hunks of a patch ------------------------------------------------------------------


def hunks(patch: patchset.Patch) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """File (as ``+++`` names it, -p1 stripped) -> its hunks in order: (header, lines)."""
    by_file: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    current: list | None = None
    body: list[str] = []
    for line in patch.text.splitlines():
        if line.startswith("+++ "):
            current = by_file.setdefault(line[4:].split()[0].split("/", 1)[1], [])
        elif line.startswith("@@") and current is not None:
            body = []
            current.append((line.split(" @@", 1)[0] + " @@", body))
        elif current is not None and current and line[:1] in (" ", "+", "-", "\\") and not line.startswith("--- "):
            body.append(line)
    return {f: [(h, tuple(b)) for h, b in hs] for f, hs in by_file.items()}


def failed_hunks(patch: patchset.Patch, root: Path, patch_output: str) -> list[Hunk]:
    """The hunks GNU patch rejected ("Hunk #N FAILED at L"), and files the tree lacks."""
    parsed = hunks(patch)
    result = [Hunk(f, "", "not in this tree") for f in parsed if not (root / f).is_file()]
    current = None
    for line in patch_output.splitlines():
        if match := re.match(r"(?:checking|patching) file (\S+)", line):
            current = match.group(1)
        elif (match := re.match(r"Hunk #(\d+) FAILED at (\d+)", line)) and current in parsed:
            header, body = parsed[current][int(match.group(1)) - 1]
            result.append(Hunk(current, header, f"FAILED at {match.group(2)}", body))
    return result


# -- what a patch's code looks like upstream -------------------------------------------------

Recognised = tuple[Outcome, str, str | None]  # outcome, how, where


def _eagle3_methods(index: SourceIndex, patch: patchset.Patch) -> Recognised | None:
    """0001: the probe's method lookup, for the methods the patch adds, on the Kimi-K2.5 class."""
    methods = re.findall(r"^\+\s+def (\w+)\(", patch.text, re.MULTILINE)
    found = index.find_model_class(DEFAULT_ARCH)
    if not methods or found is None:
        return None
    where = f"{index.rel(found[0])}:{found[1].lineno}"
    looked = [(m, *lookup(index, *found, m)) for m in methods]
    missing = [f"{m} ({how})" for m, ok, how in looked if not ok]
    if missing:
        return Outcome.STILL_NEEDED, f"the probe's method lookup does not find {'; '.join(missing)}", where
    shown = ", ".join(f"{m} ({_first_location(how)})" for m, _, how in looked)
    return (
        Outcome.UPSTREAM,
        f"the probe's method lookup finds the EAGLE-3 methods on {DEFAULT_ARCH}, forwarded to the inner "
        f"model that defines them (upstream PR #19689): {shown}",
        where,
    )


def _first_location(how: str) -> str:
    """``forwarded to self.x (srt/models/a.py:9), a B: ...`` -> ``srt/models/a.py:9``."""
    match = re.search(r"\(([^()]+:\d+)\)", how)
    return match.group(1) if match else how


def _fusion_gate(index: SourceIndex, patch: patchset.Patch) -> Recognised | None:
    """0003: does the fusion still refuse SM120 (12) where SGLang now gates it?"""
    gate = upstream_fixes.fusion_backend_gate(index)
    if gate is None:
        return None
    if gate.allows_sm120:
        return Outcome.UPSTREAM, f"the fusion's backend resolver lets SM120 through: {gate.test}", gate.where
    return (
        Outcome.STILL_NEEDED,
        f"the file it patches is gone; the fusion is now chosen by a backend resolver, which raises "
        f"ValueError unless {gate.test.removeprefix('not ')} (SM120 is refused): rewrite the opt-in against it",
        gate.where,
    )


OUTPUT_IDS, INPUT_IDS, NUM_LAYERS = [1, 29, 57], [2, 30, 58], 61  # Kimi-K2.5: 61 layers


def _capture_rule(index: SourceIndex, patch: patchset.Patch) -> Recognised | None:
    """0004: run the target's own set_eagle3_layers_to_capture for a draft of each convention."""
    for arch in (DEFAULT_ARCH, "DeepseekV3ForCausalLM"):
        found = index.find_model_class(arch)
        resolved = find_method(index, *found, CAPTURE_METHOD) if found else None
        if resolved is not None:
            break
    else:
        return None
    path, cls, func = resolved
    where = f"{index.rel(path)}:{func.lineno}"
    try:
        from_output = run_capture_method(func, OUTPUT_IDS, NUM_LAYERS)
        from_input = run_capture_method(func, INPUT_IDS, NUM_LAYERS)
    except Exception:  # noqa: BLE001 - code this tool cannot run on a stand-in: not recognised
        return None
    seen = f"ids {OUTPUT_IDS} capture layers {from_output}, ids {INPUT_IDS} capture {from_input}"
    if from_output == INPUT_IDS and from_input == INPUT_IDS:
        return (
            Outcome.UPSTREAM,
            f"the capture rule follows the draft's convention (upstream PR #25454): {cls.name}.{CAPTURE_METHOD} "
            f"run on a {NUM_LAYERS}-layer target: {seen}",
            where,
        )
    return Outcome.STILL_NEEDED, f"the capture rule ignores the draft's convention: {seen}", where


def _torch_symm_mem(index: SourceIndex, patch: patchset.Patch) -> Recognised | None:
    """0002: does an unknown capability (SM120: 12) crash the communicator, or disable it?"""
    read = upstream_fixes.torch_symm_mem_lookup(index)
    if read is None:
        return None
    if 12 in read.majors:
        return Outcome.UPSTREAM, f"{upstream_fixes.SIZES_TABLE} has an entry for capability 12", read.sizes_guarded
    if read.sizes_guarded and not read.subscripts:
        return (
            Outcome.NOT_NEEDED,
            f"on capability 12 the communicator disables itself instead of raising KeyError: "
            f"{upstream_fixes.SIZES_TABLE}.get() then 'is None: return' ({read.sizes_guarded})"
            + (
                f", {upstream_fixes.MULTIMEM_TABLE}.get(..., ()) ({read.multimem_guarded})"
                if read.multimem_guarded
                else ""
            )
            + f"; the table has keys {read.majors} only, so symmetric memory stays off on SM120 (upstream PR #24548)",
            read.sizes_guarded,
        )
    return (
        Outcome.STILL_NEEDED,
        f"KeyError: 12 at {', '.join(read.subscripts)}: the tables have keys {read.majors} only",
        read.subscripts[0] if read.subscripts else None,
    )


def _server_args_log(index: SourceIndex, patch: patchset.Patch) -> Recognised | None:
    """0005: what the start-up log prints as server_args, and whether the API keys are in it."""
    log = upstream_fixes.server_args_log(index)
    if log is None:
        return None
    if log.logged == "server_args":
        return Outcome.STILL_NEEDED, f"{log.where} logs repr(server_args), API keys included", log.where
    if log.redacted_by:
        return (
            Outcome.UPSTREAM,
            f"{log.where} logs server_args={log.logged}, whose redaction lists api_key and admin_api_key "
            f"among its secrets ({log.redacted_by})",
            log.where,
        )
    resolved = upstream_fixes.resolved_dict_drops_api_key(index)
    if log.via_resolved_dict and not log.names_api_key and resolved and not resolved[0]:
        return (
            Outcome.STILL_NEEDED,
            f"the 0.5.9 patch does not cover the new logging: {log.where} logs "
            f"server_args={log.logged}, built from server_args.resolved_dict() ({log.via_resolved_dict}), "
            f"which keeps api_key and admin_api_key ({resolved[1]}); hiding them from repr() no longer hides "
            "them (upstream issue #37457)",
            log.where,
        )
    return None


RECOGNISERS: dict[str, Callable[[SourceIndex, patchset.Patch], Recognised | None]] = {
    "0001": _eagle3_methods,
    "0002": _torch_symm_mem,
    "0003": _fusion_gate,
    "0004": _capture_rule,
    "0005": _server_args_log,
}


# -- the check -------------------------------------------------------------------------------


def _dry_run(patch: patchset.Patch, tree: SGLangTree) -> tuple[patchset.PatchStatus, str]:
    """The patch's state, by GNU patch --dry-run on a scratch copy of the files it touches."""
    with tempfile.TemporaryDirectory(prefix="sglang-eagle3-check-") as scratch:
        for rel in patch.files:
            source = tree.root / rel
            if source.is_file():
                (Path(scratch) / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, Path(scratch) / rel)
        state = patchset.status(patch, SGLangTree(Path(scratch), tree.version))
        output = "" if state.state is not patchset.PatchState.CONFLICT else state.detail
        return state, output


def check_one(patch: patchset.Patch, tree: SGLangTree, index: SourceIndex) -> PatchCheck:
    state, output = _dry_run(patch, tree)
    if state.state is patchset.PatchState.APPLIED:
        return PatchCheck(patch, Outcome.APPLIED, "it reverses cleanly: this tree carries it")
    if state.state is patchset.PatchState.NOT_APPLIED:
        return PatchCheck(
            patch, Outcome.APPLIES, f"cleanly, with {' '.join(patchset.PATCH_FLAGS[:2])} (GNU patch --dry-run)"
        )
    failed = failed_hunks(patch, tree.root, output)
    recogniser = RECOGNISERS.get(patch.name[:4])
    try:
        recognised = recogniser(index, patch) if recogniser else None
    except SourceLayoutError:
        recognised = None
    if recognised is not None:
        outcome, how, where = recognised
        return PatchCheck(patch, outcome, how, where, failed if STATUS[outcome] is Status.FAIL else [])
    missing = [h.file for h in failed if h.header == ""]
    rejected = sum(h.header != "" for h in failed)
    parts = [f"{', '.join(missing)} not in this tree"] if missing else []
    parts += [f"{rejected} hunk{'s' * (rejected != 1)} rejected"] if rejected else []
    how = "; ".join(parts) or "GNU patch refused it"
    return PatchCheck(
        patch, Outcome.CONFLICTS, f"{how}, and this tool does not recognise the code in its place", None, failed
    )


def check_secret_exits(
    series: patchset.PatchSeries, tree: SGLangTree, checks: list[PatchCheck]
) -> SecretExitCheck | None:
    """The tree against the series' secret-exit audit: fields and exits it does not know, and exits whose
    closing patch does not close them here (still needed, conflicting, or not in the series)."""
    audit = secret_exits.SecretAudit.for_series(series.directory)
    if audit is None:
        return None
    try:
        report = secret_exits.audit_tree(tree.root, audit)
    except secret_exits.SecretAuditError as err:
        return SecretExitCheck(audit.path, None, error=str(err))
    outcomes = {c.patch.name: c.outcome for c in checks}
    reopened = [
        (e, patch, outcomes.get(patch, "not in this series"))
        for e in report.exits
        if (patch := report.closed.get(e.key)) and (patch not in outcomes or STATUS[outcomes[patch]] is Status.FAIL)
    ]
    return SecretExitCheck(audit.path, report, reopened)


def check(series: patchset.PatchSeries, tree: SGLangTree) -> CheckReport:
    index = SourceIndex(tree)
    checks = [check_one(p, tree, index) for p in series.patches]
    return CheckReport(tree, series, checks, check_secret_exits(series, tree, checks))
