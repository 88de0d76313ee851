"""The stand-in's dockerAutoLayer: store paths to image layers, for closures nixpkgs' auto-layer.py gives
every path a layer of its own (at most `limit` paths): one layer per path, in the order auto-layer.py
sorts its layers, by closure size (a layer after the layers it depends on). A larger closure is refused:
how auto-layer.py groups paths then is not mirrored here.

usage: auto-layer.py LIMIT GRAPH...   (GRAPH: exportReferencesGraph's files; $excludePaths: one path a line);
prints the layers as JSON. Sizes are the files' apparent sizes (nixpkgs uses the NAR sizes).
"""

import json
import os
import sys

limit = int(sys.argv[1])
exclude = set(os.environ.get("excludePaths", "").split())
references: dict[str, list[str]] = {}
for graph in sys.argv[2:]:
    lines = iter(open(graph).read().splitlines())
    for path in lines:  # path, deriver, count, then that many references
        next(lines)
        references[path] = [next(lines) for _ in range(int(next(lines)))]


def size_of(path: str) -> int:
    total = os.lstat(path).st_size
    if os.path.isdir(path) and not os.path.islink(path):
        total += sum(size_of(os.path.join(path, name)) for name in os.listdir(path))
    return total


nodes = {path: {"references": refs, "narSize": size_of(path)} for path, refs in references.items()}


def closure(path, seen=None):
    seen = set() if seen is None else seen
    if path not in seen:
        seen.add(path)
        for ref in nodes[path]["references"]:
            closure(ref, seen)
    return seen


paths = [p for p in nodes if p not in exclude]
if len(paths) > limit:
    sys.exit(
        f"dockerAutoLayer stand-in: {len(paths)} store paths for {limit} layers; only closures that fit are mirrored"
    )
size = {p: sum(nodes[q]["narSize"] for q in closure(p)) for p in paths}
print(json.dumps([[p] for p in sorted(paths, key=lambda p: (size[p], p.split("-", 1)[1], p))]))
