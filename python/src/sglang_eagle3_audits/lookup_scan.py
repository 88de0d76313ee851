"""The run-time lookup scan of a wheel: every .py (lookups.py), every Cython source (lookups_cython.py) and every
compiled Cython module without its source (lookups.py), the lookups of each merged by kind and name, with where."""

from __future__ import annotations

from .closure import Contents, Scanner
from .lookups import CYTHON_SOURCES, lookups_in_extension, lookups_in_module, wheel_sources
from .lookups_cython import lookups_in_cython


def scan(sources) -> dict[str, dict]:
    """{"kind name": {"kind", "name", "locations"}} over (path, text or bytes) pairs."""
    return scan_all(sources)[0]


def scan_all(sources) -> tuple[dict[str, dict], dict[str, dict]]:
    """(the lookups, as scan() gives them; the environment variables read by a name the scanner cannot resolve to
    constants, {"env EXPRESSION": {"kind": "env", "expression", "locations"}}: listed, never left out)."""
    lookups: dict[str, dict] = {}
    unresolved: dict[str, dict] = {}
    for path, source in sources:
        if isinstance(source, bytes):
            found, where = set(lookups_in_extension(source, path)), "strings"
        elif path.endswith(CYTHON_SOURCES):
            found, where = list(lookups_in_cython(source, path)), None
        else:
            try:
                found, where = list(lookups_in_module(source, path)), None
            except SyntaxError:
                continue  # templates shipped as .py (e.g. Jinja) are not Python the server runs
        for kind, name, line in sorted(found):
            if kind == "unresolved":
                what, _, expression = name.partition(" ")
                entry = unresolved.setdefault(name, {"kind": what, "expression": expression, "locations": []})
            else:
                entry = lookups.setdefault(f"{kind} {name}", {"kind": kind, "name": name, "locations": []})
            location = f"{path}:{where or line}"
            if location not in entry["locations"]:
                entry["locations"].append(location)
    return dict(sorted(lookups.items())), dict(sorted(unresolved.items()))


def _scan_wheel(contents: Contents) -> dict:
    lookups, unresolved = scan_all(wheel_sources(contents))
    return {"lookups": lookups, "unresolved": unresolved}


SCANNER = Scanner("runtime-lookups", ("sglang_eagle3_audits.lookups", "sglang_eagle3_audits.lookups_cython", __name__),
                  _scan_wheel)  # fmt: skip
