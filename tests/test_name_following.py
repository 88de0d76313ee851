"""Every audit follows a name to the constants it can hold, and lists what it cannot resolve: nothing is dropped.

A name read where an audit needs a constant (a distribution's name, a library's, an environment variable's, a
ServerArgs field's) is followed through a loop over constants, a module-level constant, a default argument and a
simple assignment (python/src/sglang_eagle3/source/constants.py, Constants). Each form is planted here in a
synthetic module, with one the audits cannot resolve (an object's attribute, a parameter), for each audit: the
start-up gates (sglang_eagle3_audits/gate_scan.py), the run-time lookups (sglang_eagle3_audits/lookups.py),
SGLang's argument rules (validation_sites.py), the secret exits (secret_exits.py) and the metadata reads
(sglang_eagle3_audits/metadata_reads.py). Each resolves every form or lists it as unresolved with its site; before
this, a loop's name was dropped by each of them (SGLang's is_nvidia_cublas_version_ge_12_9, the issue's example, is
the first case below).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from conftest import REPO
from sglang_eagle3.source import secret_exits, validation_sites
from sglang_eagle3.source.constants import Constants
from sglang_eagle3.source.tree import locate
from sglang_eagle3_audits import gate_scan, gates, lookup_scan, metadata_reads, unresolved
from sglang_eagle3_audits.base import closures


def line_of(source: str, needle: str) -> int:
    """The line of the first line holding ``needle`` (the synthetic modules start with a newline)."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


def values(source: str, name: str, function: str | None = None) -> list | None:
    tree = ast.parse(textwrap.dedent(source))
    scope = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function), None)
    return Constants(tree).values(ast.Name(id=name), scope)


def test_constants_follows_each_form_and_says_none_for_the_rest():
    source = """
        from .consts import IMPORTED
        PKGS = ("a", "b")
        ONE = "one"
        def f(p="dflt", q=None, *rest, r):
            for pkg in ("nvidia-cublas", "nvidia-cublas-cu12"): pass
            for k in PKGS: pass
            for n, v in (("n1", "v1"), ("n2", "v2")): pass
            s = ONE
            t = s + "-x"
            u = f"{t}/{p}"
            w = list(PKGS)
            for m in w: pass
            c = "x" if q else "y"
            z = call()
            a = 1
            a += 1
            with open(p) as handle: pass
    """
    expected = {
        "pkg": ["nvidia-cublas", "nvidia-cublas-cu12"], "k": ["a", "b"], "n": ["n1", "n2"], "v": ["v1", "v2"],
        "s": ["one"], "t": ["one-x"], "u": ["one-x/dflt"], "m": ["a", "b"], "p": ["dflt"], "q": [None],
        "c": ["x", "y"], "ONE": ["one"],
        "z": None, "a": None, "handle": None, "r": None, "rest": None, "IMPORTED": None, "nowhere": None,
    }  # fmt: skip
    assert {name: values(source, name, "f") for name in expected} == expected
    assert values(source, "PKGS") == [("a", "b")]


# -- start-up gates ------------------------------------------------------------------------------------------------

GATES = """
from importlib.metadata import version
PKG = "pkg-module"


def check_at_least(pkg, least):
    return version(pkg) >= least


def loop():
    for pkg in ("pkg-loop-a", "pkg-loop-b"):
        if check_at_least(pkg, "12.9"):
            return True


def module_constant():
    if version(PKG) < "2":
        raise RuntimeError(PKG)


def default(name="pkg-default"):
    if version(name) < "2":
        raise RuntimeError(name)


default()


def assignment():
    name = "pkg-assigned"
    if version(name) < "2":
        raise RuntimeError(name)


class Holder:
    def unresolved(self, spec):
        if version(spec.name) < "2":
            raise RuntimeError(spec)
"""


def test_the_start_up_gate_reader_resolves_each_form_or_lists_it():
    found, unresolved = gate_scan.wheel_scan([("pkg/__init__.py", ""), ("pkg/gates.py", GATES)])
    read = {(g.function, g.line): g.kinds for g in found if not g.helper and g.function != "loop"}
    loop = sorted((g.comparison, g.kinds) for g in found if g.function == "loop")
    assert loop == [("check_at_least(pkg, '12.9') [pkg='pkg-loop-a']", ["package:pkg-loop-a"]),
                    ("check_at_least(pkg, '12.9') [pkg='pkg-loop-b']", ["package:pkg-loop-b"])]  # fmt: skip
    assert read[("module_constant", line_of(GATES, "version(PKG)"))] == ["package:pkg-module"]
    assert read[("<module>", line_of(GATES, "default()"))] == ["package:pkg-default"]  # called without the argument
    assert read[("assignment", line_of(GATES, 'name = "pkg-assigned"') + 1)] == ["package:pkg-assigned"]
    assert unresolved == [{"file": "pkg/gates.py", "line": line_of(GATES, "version(spec.name)"),
                           "function": "Holder.unresolved", "comparison": "version(spec.name) < '2'",
                           "names": ["spec.name"]}]  # fmt: skip
    values = gates.Values("3.12.12", {"pkg-loop-a": "13.0", "pkg-module": "3"}, {}, "13.0")
    verdicts = {g.comparison: g.verdict(values)[1] for g in found if g.function in ("loop", "module_constant")}
    assert verdicts == {"check_at_least(pkg, '12.9') [pkg='pkg-loop-a']": "true",
                        "check_at_least(pkg, '12.9') [pkg='pkg-loop-b']": "not installed",
                        "version(PKG) < '2' [PKG='pkg-module']": "pass"}  # fmt: skip


# -- run-time lookups ----------------------------------------------------------------------------------------------

LOOKUPS = """
import ctypes, os
LIB = "libmodule.so.1"
ENV = "CUDA_HOME"


def loop():
    for lib in ("libloop-a.so.1", "libloop-b.so.1"):
        ctypes.CDLL(lib)
    for name in ("CC", "CXX"):
        os.environ.get(name)


def module_constant():
    ctypes.CDLL(LIB)
    return os.getenv(ENV)


def default(lib="libdefault.so.1", variable="NVCC"):
    ctypes.CDLL(lib)
    return os.environ[variable]


def assignment():
    lib = "libassigned.so.1"
    ctypes.CDLL(lib)


def unresolved(path, key):
    ctypes.CDLL(path)
    return os.environ.get(key)
"""


def test_the_run_time_lookup_scan_resolves_each_form_or_lists_it():
    found, unresolved = lookup_scan.scan_all([("pkg/load.py", LOOKUPS)])
    assert set(found) == {
        "library libloop-a.so.1", "library libloop-b.so.1", "library libmodule.so.1", "library libdefault.so.1",
        "library libassigned.so.1", "env CC", "env CXX", "env CUDA_HOME", "env NVCC",
        "library <dynamic> path",  # a library it cannot name: a lookup of its own, with a disposition in the policy
    }  # fmt: skip
    assert found["library libloop-b.so.1"]["locations"] == [f"pkg/load.py:{line_of(LOOKUPS, 'ctypes.CDLL(lib)')}"]
    where = f"pkg/load.py:{line_of(LOOKUPS, 'os.environ.get(key)')}"
    assert unresolved == {"env key": {"kind": "env", "expression": "key", "locations": [where]}}


# -- SGLang's argument rules ---------------------------------------------------------------------------------------

RULES = """
from dataclasses import dataclass
FIELD = "page_size"


@dataclass
class ServerArgs:
    page_size: int = 1
    tp_size: int = 1
    dp_size: int = 1
    chunked_prefill_size: int = 1
    max_running_requests: int = 1

    def __post_init__(self):
        for name in ("tp_size", "dp_size"):
            setattr(self, name, 1)
        setattr(self, FIELD, 2)
        self._default()
        self._assigned()
        self._unresolved(object())

    def _default(self, field="chunked_prefill_size"):
        setattr(self, field, 3)

    def _assigned(self):
        name = "max_running_requests"
        setattr(self, name, 4)

    def _unresolved(self, other):
        setattr(self, other.field, 5)
"""


def fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "sglang" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = '0.0.0'\n")
    return tmp_path


def test_the_rule_audit_resolves_each_form_or_lists_it(tmp_path):
    tree = locate(fake_tree(tmp_path, {"srt/server_args.py": RULES}))
    sets = {(s.function, s.key.rsplit("::", 1)[1]) for s in validation_sites.sites(tree) if s.kind == "set"}
    assert sets == {
        ("ServerArgs.__post_init__", "set tp_size"), ("ServerArgs.__post_init__", "set dp_size"),  # a loop
        ("ServerArgs.__post_init__", "set page_size"),  # a module constant
        ("ServerArgs._default", "set chunked_prefill_size"), ("ServerArgs._assigned", "set max_running_requests"),
    }  # fmt: skip
    where = f"srt/server_args.py:{line_of(RULES, 'other.field')}"
    expected = {"where": where, "function": "ServerArgs._unresolved", "sets": "the field setattr sets",
                "expression": "other.field"}  # fmt: skip
    assert validation_sites.unresolved(tree) == [expected]


# -- secret exits --------------------------------------------------------------------------------------------------

SECRET_ARGS = """
import dataclasses
from typing import Optional


@dataclasses.dataclass
class ServerArgs:
    model_path: str = ""
    api_key: Optional[str] = None

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--api-key", help="The API key.")
"""
SECRET_READS = """
SECRET = "api_key"


def loop(server_args):
    for name in ("model_path", "api_key"):
        print(getattr(server_args, name))


def module_constant(server_args):
    return getattr(server_args, SECRET)


def default(server_args, name="api_key"):
    return getattr(server_args, name)


def assignment(server_args):
    name = "api_key"
    return getattr(server_args, name)


def unresolved(server_args, spec):
    return getattr(server_args, spec.name)
"""


def test_the_secret_exit_scan_resolves_each_form_or_lists_it(tmp_path):
    root = fake_tree(tmp_path, {"srt/server_args.py": SECRET_ARGS, "srt/reads.py": SECRET_READS})
    exits, unresolved = secret_exits.scan_report(root, ["api_key"])
    fields = {e.function for e in exits if e.kind == "field" and e.file == "srt/reads.py"}
    assert fields == {"loop", "module_constant", "default", "assignment"}
    where = f"srt/reads.py:{line_of(SECRET_READS, 'spec.name')}"
    assert unresolved == [{"where": where, "function": "unresolved", "expression": "spec.name"}]


# -- metadata reads ------------------------------------------------------------------------------------------------

READS = """
import importlib.metadata
import importlib.util
PKG = "pkg-module"


def loop():
    for pkg in ("pkg-loop-a", "pkg-loop-b"):
        importlib.metadata.version(pkg)


def module_constant():
    return importlib.util.find_spec(PKG.replace("-", "_")) or importlib.metadata.version(PKG)


def default(name="pkg-default"):
    return importlib.metadata.version(name)


def assignment():
    name = "pkg-assigned"
    return importlib.metadata.distribution(name)


def helper(pkg):
    return importlib.metadata.version(pkg)


def callers():
    helper("pkg-called")
    for name in ("pkg-called-a",):
        helper(name)


class Holder:
    def unresolved(self, spec):
        return importlib.metadata.version(spec.name)
"""


def test_the_metadata_reader_resolves_each_form_or_lists_it():
    reads = {(r.function, r.kind): r for r in metadata_reads.wheel_reads([("pkg/reads.py", READS)])}
    assert reads[("loop", "version")].values == ["pkg-loop-a", "pkg-loop-b"]
    assert reads[("module_constant", "version")].values == ["pkg-module"]
    assert reads[("module_constant", "find_spec")].values is None  # a method's result: not a constant, listed
    assert reads[("default", "version")].values == ["pkg-default"]
    assert reads[("assignment", "distribution")].values == ["pkg-assigned"]
    assert reads[("helper", "version")].values == ["pkg-called", "pkg-called-a"]  # through its callers
    assert "the calls of helper" in reads[("helper", "version")].via
    unresolved = reads[("Holder.unresolved", "version")]
    assert (unresolved.values, unresolved.line, unresolved.argument) == (None, line_of(READS, "spec.name"), "spec.name")


@pytest.mark.parametrize("form", ["loop", "module", "default", "assignment"])
def test_a_form_the_audits_resolve_is_no_longer_resolved_when_it_reads_a_call(form):
    """The same forms with the constant replaced by a call's result: Constants says None, so each audit lists it."""
    source = {
        "loop": "def f():\n    for pkg in names():\n        return pkg\n",
        "module": "PKG = names()\ndef f():\n    return PKG\n",
        "default": "def f(pkg=names()):\n    return pkg\n",
        "assignment": "def f():\n    pkg = names()\n    return pkg\n",
    }[form]
    name = "PKG" if form == "module" else "pkg"
    assert values(source, name, "f") is None


# -- the counts docs/nix.md states ----------------------------------------------------------------------------------


def unresolved_counts(stack: str) -> dict[str, int]:
    """What each audit's data lists as not resolved, for one stack."""
    import json

    data = REPO / json.loads((REPO / "nix" / "pins.json").read_text())["stacks"][stack]["data"]
    gates = json.loads((data / "startup-gates.json").read_text())
    lookups = json.loads((data / "runtime-lookups.json").read_text())
    return {
        "gates": sum(len(e.get("unresolved", [])) for e in gates["packages"].values()),
        "dynamic": sum(1 for r in lookups["packages"].values() for k in r["lookups"] if "<dynamic>" in k),
        "env": sum(len(r.get("unresolved", {})) for r in lookups["packages"].values()),
        "rules": len(json.loads((data / "sglang-rules.json").read_text())["unresolved"]),
        "secrets": len(
            json.loads((REPO / "patches" / f"sglang-{stack}" / "secret-exits.json").read_text())["unresolved"]
        ),
        "metadata": len(json.loads((data / "metadata.json").read_text())["unresolved"]),
    }


def unresolved_table() -> str:
    counts = {stack: unresolved_counts(stack) for stack in ("0.5.9", "0.5.23")}
    rows = [
        ("gates", "start-up gates (`startup-gates.json`, each package's `unresolved`)",
                  "gates that read a name not resolved"),
        ("dynamic", "run-time lookups (`runtime-lookups.json`)", "programs and libraries named by an expression: "
                    "`<dynamic>` lookups, each with its disposition"),
        ("env", "run-time lookups (each package's `unresolved`)", "environment variables read by a name not resolved"),
        ("rules", "SGLang's rules (`sglang-rules.json` `unresolved`)", "a setting's name not resolved (setattr, "
                  "a returned dict's key, `**kwargs`)"),
        ("secrets", "secret exits (`patches/sglang-<version>/secret-exits.json` `unresolved`)",
                    "a server argument read or set by a name not resolved"),
        ("metadata", "metadata reads (`metadata.json` `unresolved`)",
                     "a distribution or module named by an expression"),
    ]  # fmt: skip
    lines = ["| audit | listed | 0.5.9 | 0.5.23 |", "|---|---|---|---|"]
    lines += [f"| {audit} | {what} | {counts['0.5.9'][key]} | {counts['0.5.23'][key]} |" for key, audit, what in rows]
    return "\n".join(lines)


def test_docs_state_each_audits_unresolved_counts(tmp_path):
    """The unresolved-counts audit writes the table these counts make (read its own way); the page has it."""
    table = unresolved_table()
    written = unresolved.AUDIT.markdown(
        {c: unresolved.counts(c) for c in closures(["0.5.9", "0.5.23"], tmp_path).values()}
    )
    assert written == table
    assert table in (REPO / "docs" / "nix.md").read_text(), (
        "docs/nix.md, 'What the audits cannot resolve, listed' is stale: "
        "run python -m sglang_eagle3_audits --write --docs --only unresolved-counts")  # fmt: skip
