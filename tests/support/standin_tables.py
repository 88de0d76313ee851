"""What the nixpkgs stand-in's two table tests share: tests/test_nixpkgs_standin.py (the nixpkgs
attributes the flake uses) and tests/test_nixos_options_standin.py (the NixOS options its modules
read and set). Each table (tests/nix/*.json) has one row per use, citing the nixpkgs file and the
commit read; each test finds the uses (traced while the flake evaluates, and scanned in its
files), and decides how a use falls under a row (its `coverage`) and what a row compares (its `drift`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from support.flake_eval import REPO, Workspace
from support.nix_harness import nix_eval

COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Table:
    file: str  # tests/nix/<file>
    key: str  # where its rows are in it
    facts_script: str  # tests/nix/<facts_script>: what an assembled stand-in has at each row
    how_to_add: str  # what to do about a use without a row

    @property
    def path(self) -> Path:
        return REPO / "tests" / "nix" / self.file

    def rows(self) -> dict[str, dict]:
        """The rows, read afresh (a test may change its copy)."""
        return json.loads(self.path.read_text())[self.key]

    def no_row(self, use: str) -> str:
        return f"{use}: no row; {self.how_to_add}"

    def facts(self, nixpkgs: Path) -> dict:
        """What the assembled stand-in at `nixpkgs` has at each row."""
        return nix_eval(f"import {REPO}/tests/nix/{self.facts_script} {{ nixpkgs = {nixpkgs}; table = {self.path}; }}")

    def assert_all_used(self, rows: dict[str, dict], covered: dict[str, set[str]]) -> None:
        """Every row is used ("" in its covered reads), and so is every read of it."""
        unused = [f"row '{k}'" for k in rows if "" not in covered[k]]
        unused += [f"read '{r}' of row '{k}'" for k in rows for r in rows[k].get("reads", ()) if r not in covered[k]]
        assert not unused, (
            f"tests/nix/{self.file} lists what nothing in the flake uses (remove it, or it documents a use the "
            "evaluation no longer reaches: force it in tests/nix/trace-uses.nix):\n" + "\n".join(unused)
        )

    def uncited(self, rows: dict[str, dict]) -> list[str]:
        """Rows that do not name the nixpkgs file they mirror and the commit of the copy read (a row
        known without reading a file, such as `python3 = python313`, says how in `evidence`)."""
        problems = []
        for key, row in rows.items():
            if not (isinstance(row.get("file"), str) and row["file"].strip()):
                problems.append(f"{key}: no nixpkgs file")
            commit = row.get("commit")
            if not (isinstance(commit, str) and COMMIT.fullmatch(commit)):
                if commit is not None or not str(row.get("evidence", "")).startswith(("not read", "text search")):
                    problems.append(f"{key}: commit {commit!r} is no commit read (40 hex digits)")
            if "reads_file" in row and not COMMIT.fullmatch(str(row.get("reads_commit"))):
                problems.append(f"{key}: reads_file {row['reads_file']!r} without the commit read (reads_commit)")
        return problems


def trace(ws: Workspace, label: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Everything the flake can evaluate, evaluated (tests/nix/trace-uses.nix): the run, and the uses
    the tracing stand-in printed as `trace: <label> <JSON>`."""
    expr = f'import {ws.flake}/tests/nix/trace-uses.nix {{ flake = builtins.getFlake "{ws.ref}"; }}'
    result = ws.nix("eval", "--impure", "--json", "--expr", expr, check=False)
    return result, [json.loads(m) for m in re.findall(rf"^trace: {label} (.*)$", result.stderr, re.MULTILINE)]


def scan(files: Iterable[Path], find: Callable[[str], Iterable[str]]) -> dict[str, set[str]]:
    """What `find` finds in each file's text, comments left out: each finding -> the files it is in."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in files:
        text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
        for name in find(text):
            found[name].add(str(path.relative_to(REPO)))
    return found


def drifted(ws: Workspace, tmp_path: Path, file: str, old: str, new: str) -> Path:
    """A copy of the workspace's assembled stand-in in which `file` has `new` where it had `old`."""
    copy = tmp_path / "nixpkgs"
    shutil.copytree(ws.nixpkgs, copy)
    text = (copy / file).read_text()
    assert old in text, f"{file} no longer has {old!r}; update this test"
    (copy / file).write_text(text.replace(old, new))
    return copy
