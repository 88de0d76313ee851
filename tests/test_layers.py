"""The package's layers, as its folders show them, and no import cycle.

    source/   reads SGLang's source without importing it (the bottom layer)
    host/     facts about the host: its GPUs and their links (nvidia-smi), a free port (a bottom layer too)
    serving/  settings, launch plan, launcher, credentials, entry points
    judging/  probe, draft checks, preflight: judge a setup from what source/ read
    bench/, models/, cli.py: the commands on top

A module may import from its own layer and the layers below it; the imports are read with ast.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PKG = REPO / "python" / "src" / "sglang_eagle3"
TOP = "top"  # __init__, exit_status, errors, options, cli, cli_common
BELOW = {
    "source": {TOP},
    "host": {TOP},
    "serving": {TOP},
    "judging": {TOP, "source", "host", "serving"},
    "bench": {TOP, "source", "host", "serving", "judging"},
    "models": {TOP},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The sglang_eagle3 modules (or packages) a file imports, resolved to absolute names."""
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
    return {m for m in found if m.startswith("sglang_eagle3") and m != name}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PKG / parts[1]).is_dir()) else TOP


GRAPH = {module_name(p): imports(p) for p in PKG.rglob("*.py")}


def test_each_layer_imports_only_its_own_and_the_ones_below():
    wrong = [
        f"{m} imports {d}"
        for m, deps in GRAPH.items()
        if layer(m) in BELOW
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


def test_the_checks_see_a_cycle_and_a_layer_breach():
    """The two rules above fail on a graph that breaks them."""
    global GRAPH
    saved = GRAPH
    try:
        GRAPH = {**saved, "sglang_eagle3.source.patchset": {"sglang_eagle3.judging.probe"}}
        GRAPH["sglang_eagle3.judging.probe"] = saved["sglang_eagle3.judging.probe"] | {"sglang_eagle3.source.patchset"}
        for check in (test_each_layer_imports_only_its_own_and_the_ones_below, test_no_import_cycle):
            try:
                check()
            except AssertionError:
                continue
            raise AssertionError(f"{check.__name__} passed on a broken graph")
    finally:
        GRAPH = saved
