"""The nixpkgs stand-in (tests/nix/nixpkgs) checked against nixpkgs, so it cannot drift unseen.

tests/nix/nixpkgs-attributes.json holds, one row per attribute, what the flake, nix/ and modules/ use
of nixpkgs and what nixpkgs has there (outputs, where its programs are, the arguments its functions
take, the values the flake reads), each read in nixpkgs' own file (tests/support/standin_tables.py:
what this test shares with tests/test_nixos_options_standin.py). The uses are the attributes the
flake's code reads and the calls with the argument names it passes (tests/nix/nixpkgs/trace.nix
prints them), and `pkgs.<name>` in the files; the stand-in must have what each row says
(tests/nix/standin-attributes.nix reads it). A drifted stand-in (promtool back in prometheus' `out`,
a fetchurl without curl) fails, and the monitoring check, built here, finds promtool only in `cli`.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

import pytest
from support import standin_tables
from support.flake_eval import REPO, Workspace, needs_flake_eval

SYSTEM = "x86_64-linux"
TABLE = standin_tables.Table(
    "nixpkgs-attributes.json",
    "attributes",
    "standin-attributes.nix",
    how_to_add="read the attribute's file in nixpkgs (search tool: read_file on NixOS/nixpkgs), add a row to "
    "tests/nix/nixpkgs-attributes.json with that file and the commit read, and mirror it in tests/nix/nixpkgs "
    "(docs/nix.md, 'The nixpkgs stand-in')",
)
# Attributes of any derivation that say nothing about the package (lib.getDev reads `out`).
ALWAYS_THERE = {"out", "outputs"}

pytestmark = needs_flake_eval()


# -- the uses ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("traced"), trace_uses=True)


@pytest.fixture(scope="module")
def uses(traced) -> list[dict]:
    """Every use the flake makes of the stand-in, as tests/nix/nixpkgs/trace.nix prints them."""
    result, uses = standin_tables.trace(traced, "nixpkgs-use")
    assert result.returncode == 0 and uses, result.stderr[-6000:]
    return uses


def row_of(path: list[str], rows: dict) -> tuple[str | None, list[str]]:
    """The row a use falls under (the longest row key that is a prefix of it) and the rest."""
    for n in range(len(path), 0, -1):
        key = ".".join(path[:n])
        if key in rows:
            return key, path[n:]
    return None, path


def coverage(uses: list[dict], rows: dict) -> tuple[list[str], dict[str, set[str]]]:
    """(uses no row covers, each row's covered reads; "" stands for the row itself)."""
    missing: list[str] = []
    covered: dict[str, set[str]] = defaultdict(set)
    for use in uses:
        path = use["path"]
        key, rest = row_of(path, rows)
        dotted = ".".join(path)
        if rest and any(k.startswith(dotted + ".") for k in rows):
            continue  # an attribute set on the way to rows (testers, formats, cudaPackages_13_0.backendStdenv)
        if key is None:
            missing.append(TABLE.no_row(f"pkgs.{dotted}"))
            continue
        covered[key].add("")
        if not rest:
            continue
        row = rows[key]
        reads = set(row.get("reads", {}))
        name = ".".join(rest)
        if len(rest) == 1 and (rest[0] in ALWAYS_THERE or rest[0] in row.get("outputs", [])):
            continue
        match = next((r for r in reads if r == name or r.startswith(name + ".")), None)
        if match is None:
            missing.append(
                f"pkgs.{dotted}: row '{key}' has no read '{name}'; add it to its \"reads\" (with the value nixpkgs "
                f"has, from {row['file']}) and mirror it in tests/nix/nixpkgs"
            )
        else:
            covered[key].add(match)
    return missing, covered


def test_every_use_of_nixpkgs_has_its_row(uses):
    missing, _ = coverage(uses, TABLE.rows())
    assert not missing, "the flake uses nixpkgs where the table says nothing:\n" + "\n".join(sorted(set(missing)))


def test_every_row_and_read_of_the_table_is_used(uses):
    rows = TABLE.rows()
    TABLE.assert_all_used(rows, coverage(uses, rows)[1])


def test_the_arguments_the_flake_passes_are_the_tables_and_the_functions(uses):
    rows = TABLE.rows()
    passed: dict[str, set[str]] = defaultdict(set)
    for use in uses:
        key = ".".join(use["path"])
        if (
            "position" in use
            and use["position"] == 0
            and isinstance(use["args"], list)
            and "passed" in rows.get(key, {})
        ):
            passed[key] |= set(use["args"])
    problems = []
    for key, row in rows.items():
        if "passed" not in row:
            continue
        if passed[key] != set(row["passed"]):
            problems.append(f"{key}: the flake passes {sorted(passed[key])}, the row says {sorted(row['passed'])}")
        if "arguments" in row and not row.get("ellipsis") and not set(row["passed"]) <= set(row["arguments"]):
            problems.append(f"{key}: {sorted(set(row['passed']) - set(row['arguments']))} is not an argument of it")
    assert not problems, "\n".join(problems)


# What a scan of the files finds: pkgs.<name> and `inherit (pkgs) <names>`. It also sees uses the
# evaluation does not reach (an option nobody sets), and is what the traced uses must include.
PKGS_ATTR = re.compile(r"\bpkgs\.([A-Za-z_][\w'-]*)")
INHERIT_PKGS = re.compile(r"inherit\s*\(\s*pkgs\s*\)([^;]*);")
SCANNED = [REPO / "flake.nix", *sorted((REPO / "nix").rglob("*.nix")), *sorted((REPO / "modules").rglob("*.nix"))]


def pkgs_names(text: str) -> set[str]:
    names = set(PKGS_ATTR.findall(text)).union(*(block.split() for block in INHERIT_PKGS.findall(text)))
    return names - {"lib"}


def test_the_files_use_nothing_the_table_and_the_trace_lack(uses):
    rows = TABLE.rows()
    traced_roots = {use["path"][0] for use in uses}
    problems = []
    for name, found_in in sorted(standin_tables.scan(SCANNED, pkgs_names).items()):
        files = ", ".join(sorted(found_in))
        if not any(k == name or k.startswith(name + ".") for k in rows):
            problems.append(TABLE.no_row(f"pkgs.{name} ({files})"))
        elif name not in traced_roots:
            problems.append(
                f"pkgs.{name} ({files}): tests/nix/trace-uses.nix never reaches it; force the output or option that "
                "uses it there"
            )
    assert not problems, "\n".join(problems)


# -- the stand-in against the table ------------------------------------------------------------


def drift(rows: dict, facts: dict) -> list[str]:
    """Where the stand-in differs from the table: one line per difference, naming the row."""
    problems = []
    for key, row in rows.items():
        fact = facts[key]
        where = f"{key} (nixpkgs: {row['file']})"
        if not fact["found"]:
            problems.append(f"{where}: the stand-in has no such attribute")
            continue
        if "outputs" in row and fact["outputs"] != row["outputs"]:
            problems.append(f"{where}: outputs {fact['outputs']}, nixpkgs has {row['outputs']}")
        if "programs" in row:
            standin = {o: ps for o, ps in (fact["programs"] or {}).items() if ps}
            if standin != row["programs"]:
                problems.append(f"{where}: programs by output {standin}, nixpkgs installs {row['programs']}")
        if "arguments" in row and sorted(fact["formals"] or []) != sorted(row["arguments"]):
            ours, theirs = set(fact["formals"] or []), set(row["arguments"])
            problems.append(
                f"{where}: arguments differ: the stand-in lacks {sorted(theirs - ours)}, "
                f"has more {sorted(ours - theirs)}"
            )
        for name, value in {k: v for k, v in row.get("result", {}).items() if k != "arguments"}.items():
            got = fact["result"][name]
            if got != value:
                problems.append(
                    f"{where}: a call returns .{name} {json.dumps(got)}, nixpkgs' returns {json.dumps(value)}"
                )
        for name, value in {**row.get("reads", {}), **row.get("values", {})}.items():
            got = fact["reads"][name]
            if got == "<missing>" or (value is not None and got != value):
                problems.append(f"{where}: .{name} is {json.dumps(got)}, nixpkgs has {json.dumps(value)}")
    return problems


@pytest.fixture(scope="module")
def facts(traced) -> dict:
    return TABLE.facts(traced.nixpkgs)


def test_every_row_cites_the_nixpkgs_file_and_commit_read():
    rows = TABLE.rows()
    assert not TABLE.uncited(rows), "\n".join(TABLE.uncited(rows))
    rows["jq"]["file"], rows["stdenv"]["evidence"] = "", "read"  # stdenv: no commit, so its evidence must say why
    del rows["prometheus"]["commit"]
    assert sorted(TABLE.uncited(rows)) == [
        "jq: no nixpkgs file",
        "prometheus: commit None is no commit read (40 hex digits)",
        "stdenv: commit None is no commit read (40 hex digits)",
    ]


def test_the_standin_has_what_nixpkgs_has_at_every_row(facts):
    problems = drift(TABLE.rows(), facts)
    assert not problems, "the stand-in (tests/nix/nixpkgs) drifted from nixpkgs:\n" + "\n".join(problems)


def test_a_drifted_standin_fails_the_comparison(traced, tmp_path):
    """promtool put back in prometheus' `out` (what the stand-in had): the comparison names the row."""
    packages = "pkgs/all-packages.nix"
    block = re.search(r"  prometheus = hostToolWith \{.*?\n  \};\n", (traced.nixpkgs / packages).read_text(), re.DOTALL)
    as_it_was = '  prometheus = hostTool "prometheus" "3.9.1" [ "prometheus" "promtool" ];\n'
    drifted = standin_tables.drifted(traced, tmp_path, packages, block.group(0), as_it_was)
    problems = drift(TABLE.rows(), TABLE.facts(drifted))
    assert [p for p in problems if p.startswith("prometheus ")] == [
        "prometheus (nixpkgs: pkgs/by-name/pr/prometheus/package.nix): outputs ['out'], nixpkgs has "
        "['out', 'doc', 'cli']",
        "prometheus (nixpkgs: pkgs/by-name/pr/prometheus/package.nix): programs by output {'out': ['prometheus', "
        "'promtool']}, nixpkgs installs {'out': ['prometheus'], 'cli': ['promtool']}",
    ], problems
    assert len(problems) == 2, problems


def test_a_fetchurl_without_curl_fails_the_comparison(traced, tmp_path):
    """The stand-in's fetchurl as it was (only the caller's nativeBuildInputs, so its builder had no curl on a
    store that did not already hold the file): the comparison names the row and what nixpkgs puts first."""
    curl, without = "nativeBuildInputs = [ curl ] ++ nativeBuildInputs;", "nativeBuildInputs = nativeBuildInputs;"
    drifted = standin_tables.drifted(traced, tmp_path, "pkgs/fetchurl.nix", curl, without)
    problems = drift(TABLE.rows(), TABLE.facts(drifted))
    assert problems == [
        "fetchurl (nixpkgs: pkgs/build-support/fetchurl/default.nix): a call returns .nativeBuildInputs [], "
        'nixpkgs\' returns ["curl"]'
    ], problems


def test_a_use_the_table_lacks_fails_with_the_row_to_add(uses):
    rows = TABLE.rows()
    del rows["prometheus"]
    missing, _ = coverage(uses, rows)
    assert any(m.startswith("pkgs.prometheus: no row; read the attribute's file in nixpkgs") for m in missing), missing
    rows = TABLE.rows()
    rows["python312"]["reads"].pop("sitePackages")
    missing, _ = coverage(uses, rows)
    assert any("pkgs.python312.sitePackages: row 'python312' has no read 'sitePackages'" in m for m in missing), missing


# -- the monitoring check, built ---------------------------------------------------------------


@pytest.fixture(scope="module")
def with_promtool(tmp_path_factory) -> Workspace:
    """A workspace whose stand-in finds a `promtool` (a script recording its arguments) on this host:
    the stand-in's prometheus wraps it in the output nixpkgs installs it to."""
    root = tmp_path_factory.mktemp("promtool")
    bin_dir = root / "host-bin"
    bin_dir.mkdir()
    promtool = bin_dir / "promtool"
    promtool.write_text('#!/bin/sh\necho "promtool $*"\n')
    promtool.chmod(0o755)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{old}"
    try:
        return Workspace(root / "ws")
    finally:
        os.environ["PATH"] = old


def build_monitoring_check(ws: Workspace):
    return ws.nix(
        "build", "--no-link", "--print-out-paths", "--option", "sandbox", "false", "-L",
        f"{ws.ref}#checks.{SYSTEM}.module-monitoring", check=False,
    )  # fmt: skip


def test_the_monitoring_check_runs_promtool_from_prometheus_cli(with_promtool):
    built = build_monitoring_check(with_promtool)
    assert built.returncode == 0, built.stderr[-4000:]
    assert "promtool check config /nix/store/" in built.stderr, built.stderr[-4000:]
    # The check as it was (pkgs.prometheus, whose `out` has no promtool) fails where nixpkgs' would.
    checks = with_promtool.flake / "nix" / "module-checks.nix"
    checks.write_text(checks.read_text().replace("pkgs.prometheus.cli", "pkgs.prometheus"))
    broken = build_monitoring_check(with_promtool)
    assert broken.returncode != 0
    assert "promtool: command not found" in broken.stderr, broken.stderr[-4000:]
