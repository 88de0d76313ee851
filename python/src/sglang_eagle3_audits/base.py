"""One shape for every audit, and one way to check or write them all.

An audit reads something real (a stack's wheels, its SGLang) and keeps what it finds as data:

- ``scan(closure)``: one stack's data (JSON, written byte-stable: indent 1, keys sorted), or what the audit checks
  when its data is written by hand (``hand_written``);
- ``problems(data, closure)``: what the policy beside the data (the hand-written reasons, ``policy``) does not
  account for; empty when everything is;
- ``across(results)``: what only every stack together can say (a cross-stack audit's own checks);
- ``markdown(results)``: the data as the docs show it (``docs``: a block of a page, or a whole page).

``run`` does the rest once for every audit: each stack's data compared byte for byte with, or written to, the
stack's data directory; the problems of each stack; the docs from every stack's data.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3 import files, stacks
from sglang_eagle3.errors import BadInput

from .closure import REPO, Closure, Scanner, read_json, relative

COMMAND = "python -m sglang_eagle3_audits"
MISSING_ELFTOOLS = (
    "pyelftools is not installed: the wheel audits read ELF files with it; install the test extra "
    "(pip install -e './python[test]', or tests/run's .venv)"
)


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class Docs:
    """Where an audit's markdown goes: a page's block between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``
    (``block``), or the whole page (``block`` None)."""

    page: str  # relative to the repository
    block: str | None = None

    def replaced(self, text: str, body: str) -> str:
        """``text`` (the page) with the block's body replaced; BadInput when the page lacks the block's markers."""
        if self.block is None:
            return body
        start, end = f"<!-- {self.block}:start -->\n", f"\n<!-- {self.block}:end -->"
        found = re.search(re.escape(start) + "(.*?)" + re.escape(end), text, re.DOTALL)
        if found is None:
            raise BadInput(f"{self.page} has no {start.strip()} ... {end.strip()} block to write {self.block} into")
        return text[: found.start(1)] + body + text[found.end(1) :]


class Audit:
    """One audit; a module of this package defines each as a subclass and registry.REGISTRY lists them."""

    name = ""  # the register's entry (generated.json, --only NAME)
    data: str | None = None  # the file it writes in each stack's data directory; None: it writes none
    policy: str | None = None  # the hand-written reasons beside the data
    policy_shape: dict[str, tuple] = {}  # key -> (the value's type, each entry's type or None)
    inputs: tuple[str, ...] = ()  # what the data is made from, for the register
    docs: Docs | None = None
    scanners: tuple[Scanner, ...] = ()  # the scans of the server closure's wheels it reads (prescanned together)
    slow = True  # reads real wheels (check-generated.py --quick leaves it out)
    how = ""  # for data written by hand: how to change it

    def scan(self, closure: Closure) -> dict:
        raise NotImplementedError

    def problems(self, data: dict, closure: Closure) -> list[str]:
        return []

    def across(self, results: dict[Closure, dict]) -> list[str]:
        return []

    def markdown(self, results: dict[Closure, dict]) -> str:
        raise NotImplementedError

    def hand_written(self) -> list[str]:
        """The files written by hand that this audit checks (instead of data it writes)."""
        return []

    @property
    def docs_only(self) -> bool:
        """It writes docs only, made from other audits' data (no data of its own, none written by hand)."""
        return self.data is None and self.docs is not None and not self.hand_written()

    def committed(self, closure: Closure) -> dict:
        """One stack's data as committed, for the docs (no wheel is read); BadInput saying how to write it."""
        return read_json(closure.data / self.data, f"run {COMMAND} --write --only {self.name}")

    def read_policy(self, path: Path) -> dict:
        """The policy at ``path``: an object with ``policy_shape``'s keys; BadInput naming the file otherwise."""
        policy = read_json(path, f"each stack's data directory keeps the reasons of the {self.name} audit there")
        wrong = [
            key
            for key, (kind, entry) in self.policy_shape.items()
            if not isinstance(policy, dict)
            or not isinstance(policy.get(key), kind)
            or (entry is not None and not all(isinstance(v, entry) for v in policy[key].values()))
        ]
        if wrong:
            wanted = ", ".join(f"'{k}' ({_shape(*self.policy_shape[k])})" for k in self.policy_shape)
            raise BadInput(f"{relative(path)} must be an object with {wanted}")
        return policy

    def policy_of(self, closure: Closure) -> dict:
        kept = closure.__dict__.setdefault("_policies", {})
        if self.policy not in kept:
            kept[self.policy] = self.read_policy(closure.data / self.policy)
        return kept[self.policy]


def _shape(kind, entry) -> str:
    names = {dict: "an object", list: "a list", str: "text"}
    described = names.get(kind, kind.__name__)
    if entry is None:
        return described
    entries = entry if isinstance(entry, tuple) else (entry,)
    return f"{described} of {' or '.join(names.get(e, e.__name__) for e in entries)}"


def closures(versions: list[str], cache: Path) -> dict[str, Closure]:
    """The stacks named (every stack of nix/pins.json when none is), each a Closure; BadInput for an unknown one."""
    known = stacks.stacks()
    unknown = [v for v in versions if v not in known]
    if unknown:
        raise BadInput(f"no stack {', '.join(unknown)} in nix/pins.json (stacks: {', '.join(known)})")
    return {v: Closure(known[v], cache) for v in versions or known}


def run(audits: list[Audit], chosen: dict[str, Closure], write: bool) -> int:
    """Scan every stack of ``chosen`` for each audit; write or compare its data and docs; report what is stale or
    not accounted for. 0 when nothing is, else 1."""
    stale, found = [], []
    every_stack = set(chosen) == set(stacks.versions())
    for closure in chosen.values():
        closure.prescan({s for a in audits for s in a.scanners}, closure.server_wheels.values() if any(
            a.scanners for a in audits) else ())  # fmt: skip
    for audit in audits:
        results: dict[Closure, dict] = {}
        for version, closure in chosen.items():
            print(f"{audit.name} {version}:", file=sys.stderr, flush=True)
            results[closure] = data = audit.scan(closure)
            if audit.data:
                text = dumps(data)
                stale += _kept(closure.data / audit.data, text, write, f"--stack {version} --only {audit.name}")
                # The docs and the checks across stacks read the data as the file holds it (keys sorted), so that
                # they come out the same from a scan and from the data as committed (--docs, --markdown).
                results[closure] = files.loads_json(text)
            found += [f"{audit.name} {version}: {p}" for p in audit.problems(data, closure)]
        if every_stack:
            found += [f"{audit.name}: {p}" for p in audit.across(results)]
            if audit.docs is not None:
                stale += _kept(REPO / audit.docs.page, _page(audit, results), write, f"--only {audit.name}")
    return report(stale, found)


def run_docs(audits: list[Audit], chosen: dict[str, Closure], write: bool) -> int:
    """The docs of each audit, from the data as committed (no wheel is read): written, or compared."""
    stale = []
    for audit in [a for a in audits if a.docs is not None]:
        results = {c: audit.committed(c) for c in chosen.values()}
        stale += _kept(REPO / audit.docs.page, _page(audit, results), write, f"--docs --only {audit.name}")
    return report(stale, [])


def _page(audit: Audit, results: dict[Closure, dict]) -> str:
    return audit.docs.replaced((REPO / audit.docs.page).read_text(), audit.markdown(results))


def _kept(path: Path, text: str, write: bool, how: str) -> list[str]:
    """``text`` written to ``path`` (atomically), or compared with it: [] when it is current, else what to run."""
    if write:
        if not path.is_file() or path.read_text() != text:
            files.write_atomic(path, text)
            print(f"  wrote {relative(path)}", file=sys.stderr)
        return []
    if path.is_file() and path.read_text() == text:
        print(f"  {relative(path)} is up to date", file=sys.stderr)
        return []
    return [f"{relative(path)} is stale: run {COMMAND} --write {how}"]


def report(stale: list[str], found: list[str]) -> int:
    if stale:
        print("stale:\n  " + "\n  ".join(stale), file=sys.stderr)
    if found:
        print("not accounted for:\n  " + "\n  ".join(found), file=sys.stderr)
    if not stale and not found:
        print("every audit's data is current and accounted for", file=sys.stderr)
    return 1 if stale or found else 0


def unique(existing: dict, key: str) -> str:
    """The same key twice (one comparison twice in one function) keeps both: the second is `key #2`."""
    if key not in existing:
        return key
    n = 2
    while f"{key} #{n}" in existing:
        n += 1
    return f"{key} #{n}"
