"""The package's layers, every module in one, and no import cycle; the audits beside it, which it never imports.

    base          the package's constants, the exit statuses, the error every command raises, hiding secrets,
                  files read safely and written atomically, the pinned stacks: sglang_eagle3 (__init__),
                  exit_status, errors, redaction, files, stacks
    source/       reads SGLang's source without importing it
    host/         facts about the host: its GPUs and their links (nvidia-smi), its CUDA driver, a free port
    serving/      settings, launch plan, launcher, credentials, entry points
    models/       a model's files: pinned weights (lock, fetch, verify, the hub), a config.json and safetensors headers
    judging/      probe, draft checks, preflight: judge a setup from what source/ and models/ read
    bench/        the benchmark, the A/B gate, the sweep
    cli support   what the command modules share: cli_common, options (the settings define their defaults)
    commands      the click commands: commands/ (one module per command group), cli (the top-level group that
                  holds them), __main__ (the program)
    audits        the sibling package sglang_eagle3_audits (the audits of the stacks' real wheels, a maintainers'
                  tool): it reads with the package's layers up to judging; no module of sglang_eagle3 imports it

A module may import from its own layer and the layers below it (BELOW); the imports are read
with ast, those inside functions too. A module no layer claims fails the test: give it one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

PKG = REPO / "python" / "src" / "sglang_eagle3"
AUDITS = REPO / "python" / "src" / "sglang_eagle3_audits"
PACKAGES = (PKG.name, AUDITS.name)
# The modules that are not in a folder of their own, by layer.
TOP_LEVEL = {
    "sglang_eagle3": "base",
    "sglang_eagle3.exit_status": "base",
    "sglang_eagle3.errors": "base",
    "sglang_eagle3.redaction": "base",  # what a secret looks like, and hiding it
    "sglang_eagle3.files": "base",  # files read safely and written atomically
    "sglang_eagle3.stacks": "base",  # the pinned stacks (nix/pins.json), the one list of SGLang releases
    "sglang_eagle3.cli_common": "cli support",
    "sglang_eagle3.options": "cli support",
    "sglang_eagle3.cli": "commands",
    "sglang_eagle3.__main__": "commands",  # the program: signals answered, then the commands loaded
}
FOLDERS = ("source", "host", "serving", "models", "judging", "bench", "commands")
BELOW = {
    "base": set(),
    "source": {"base"},
    "host": {"base"},
    "serving": {"base"},
    "models": {"base", "serving"},  # serving.credentials: the systemd credential of the hub token
    "judging": {"base", "source", "host", "serving", "models"},  # models.draft_inputs: the model's config.json
    "bench": {"base", "source", "host", "serving", "models", "judging"},
    "cli support": {"base", "serving"},
    "commands": {"base", "source", "host", "serving", "models", "judging", "bench", "cli support"},
    # No layer of sglang_eagle3 has "audits" below it: the tool never imports them.
    "audits": {"base", "source", "host", "serving", "models", "judging"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The sglang_eagle3 and sglang_eagle3_audits modules (or packages) a file imports, resolved to absolute names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base) if node.level else node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                as_path = PKG.parent / candidate.replace(".", "/")
                found.add(candidate if as_path.with_suffix(".py").exists() or as_path.is_dir() else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES and m != name}


def layer(module: str) -> str:
    """The layer of a module: its folder's, TOP_LEVEL's for the others."""
    parts = module.split(".")
    if parts[0] == AUDITS.name:
        return "audits"
    if len(parts) > 1 and parts[1] in FOLDERS:
        return parts[1]
    if module not in TOP_LEVEL:
        raise AssertionError(f"{module} is in no layer: add it to TOP_LEVEL (tests/test_layers.py)")
    return TOP_LEVEL[module]


GRAPH = {module_name(p): imports(p) for package in (PKG, AUDITS) for p in package.rglob("*.py")}


def test_every_module_is_in_a_layer_and_every_layer_is_checked():
    assert {layer(m) for m in GRAPH} == set(BELOW)
    assert set(TOP_LEVEL) <= set(GRAPH), "TOP_LEVEL names a module that is gone"


def test_each_layer_imports_only_its_own_and_the_ones_below():
    wrong = [
        f"{m} ({layer(m)}) imports {d} ({layer(d)})"
        for m, deps in GRAPH.items()
        for d in deps
        if layer(d) not in BELOW[layer(m)] | {layer(m)}
    ]
    assert wrong == []


def test_no_import_cycle():
    def cycle_from(start, path, seen):
        for dep in sorted(GRAPH.get(start, ())):
            if dep in path:
                return [*path[path.index(dep) :], dep]
            if dep not in seen:
                seen.add(dep)
                if found := cycle_from(dep, [*path, dep], seen):
                    return found
        return None

    cycles = [c for m in sorted(GRAPH) if (c := cycle_from(m, [m], {m}))]
    assert cycles == [], " -> ".join(cycles[0])


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("sglang_eagle3.source.patchset", "sglang_eagle3.judging.probe"),  # a layer above
        ("sglang_eagle3.options", "sglang_eagle3.models.hub"),  # cli support into a feature
        ("sglang_eagle3.errors", "sglang_eagle3.serving.settings"),  # base into anything
        ("sglang_eagle3.exit_status", "sglang_eagle3.cli_common"),
        ("sglang_eagle3.models.fetch", "sglang_eagle3.judging.preflight"),
        ("sglang_eagle3.serving.launcher", "sglang_eagle3.bench.ab"),
        ("sglang_eagle3.bench.ab", "sglang_eagle3.options"),  # a feature into the commands' plumbing
        ("sglang_eagle3.cli_common", "sglang_eagle3.cli"),
        ("sglang_eagle3.bench.sweep", "sglang_eagle3.commands.bench"),  # a feature into a command
        ("sglang_eagle3.judging.patch_check", "sglang_eagle3_audits.secret_exits"),  # the tool into the audits
        ("sglang_eagle3.commands.patch", "sglang_eagle3_audits"),
        ("sglang_eagle3.stacks", "sglang_eagle3_audits.closure"),
        ("sglang_eagle3_audits.closure", "sglang_eagle3.cli_common"),  # the audits into the commands' plumbing
        ("sglang_eagle3_audits.registry", "sglang_eagle3.commands.patch"),
    ],
)
def test_the_layer_check_sees_a_breach(monkeypatch, module, imported):
    monkeypatch.setitem(GRAPH, module, GRAPH[module] | {imported})
    with pytest.raises(AssertionError):
        test_each_layer_imports_only_its_own_and_the_ones_below()


def test_the_tool_never_imports_the_audits():
    """The audits are a sibling package (their lines counted apart, their dependencies pyelftools and the network
    the tool never needs): no module of sglang_eagle3 imports one of sglang_eagle3_audits, at any depth."""
    assert {m for m in GRAPH if layer(m) == "audits"}, "the audits' modules are read"
    wrong = [f"{m} imports {d}" for m, deps in GRAPH.items() if layer(m) != "audits" for d in deps
             if layer(d) == "audits"]  # fmt: skip
    assert wrong == []


def test_the_audit_rule_sees_a_breach(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.source.secret_exits", {"sglang_eagle3_audits.closure"})
    with pytest.raises(AssertionError, match="sglang_eagle3.source.secret_exits imports sglang_eagle3_audits"):
        test_the_tool_never_imports_the_audits()


def test_a_module_in_no_layer_fails(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.helpers", set())
    with pytest.raises(AssertionError, match="in no layer"):
        test_every_module_is_in_a_layer_and_every_layer_is_checked()


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "sglang_eagle3.source.patchset", {"sglang_eagle3.source.eagle3_source"})
    with pytest.raises(AssertionError):
        test_no_import_cycle()
