"""One reader of a stack's closure: its uv.lock resolved once, each wheel fetched once, every scan of a wheel kept.

A stack's server closure is resolved from its uv.lock the way uv2nix resolves it for nixpkgs' CPython on
x86_64-linux (PEP 508 markers, extras), as the stack's wheel-closure.json says: the root and its extras, the
packages the closure drops, the CUDA wheels swapped for pinned builds (read through the closest PyPI build, a
proxy, where PyPI lacks the pin). A wheel is downloaded from its URL in uv.lock (nix/pins.json for a pin, PyPI's
index for a CUDA redistributable) into the cache, sha256 checked, whole or not at all (files.atomic_file), one
download at a time (release.download_lock). A scan of a wheel (its ELF libraries, its run-time lookups, its
gates, its metadata reads) is kept in the cache under the scanner's code and the wheel's sha256: a wheel is read
again only when its scanner changes, and then once for all the scanners that changed (``prescan``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib
import inspect
import json
import sys
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from packaging.markers import Marker
from sglang_eagle3 import files, stacks
from sglang_eagle3.errors import BadInput, CheckFailed
from sglang_eagle3.source import constants
from sglang_eagle3.source.tree import SGLangTree
from sglang_eagle3.trees import release

REPO = Path(__file__).resolve().parents[3]
# One root for the stacks' wheels and their scans, shared with the test suite (tests/conftest.py's CACHE): a
# machine downloads and scans each wheel once, whether the tests or the command read it first. A scan is kept
# under its scanner's code and the wheel's sha256, so what the cache holds never changes an answer, only how
# soon it comes.
DEFAULT_CACHE = Path.home() / ".cache" / "sglang-eagle3-tests"
OWN = {"editable", "virtual", "directory"}  # a uv.lock source of this project itself (no wheel)


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def relative(path: Path) -> str:
    """A path as messages and the data name it: from the repository's root when it is in the repository."""
    path = Path(path)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def read_json(path: Path, what: str) -> dict:
    """A JSON file the audits read; BadInput naming it when it is missing or not JSON."""
    try:
        return files.loads_json(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"{relative(path)} is missing: {what}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise BadInput(f"{relative(path)} is not JSON: {err}") from None


# -- uv.lock, as uv2nix resolves it -------------------------------------------------------------------------------


def marker_environment(python: str) -> dict[str, str]:
    """PEP 508 environment of nixpkgs' CPython on x86_64-linux (as pyproject.nix's mkEnviron)."""
    return {
        "implementation_name": "cpython",
        "implementation_version": python,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": python,
        "python_version": ".".join(python.split(".")[:2]),
        "sys_platform": "linux",
        "extra": "",
    }


def applies(dependency: dict, environment: dict[str, str]) -> bool:
    marker = dependency.get("marker")
    return marker is None or Marker(marker).evaluate(environment)


def resolve_closure(
    lock: dict, root: str, extras: list[str], environment: dict[str, str]
) -> tuple[dict[str, dict], dict[str, set[str]]]:
    """(name -> the uv.lock package entry chosen for this environment, name -> the packages that depend on it)."""
    by_name: dict[str, list[dict]] = {}
    for package in lock["package"]:
        by_name.setdefault(package["name"], []).append(package)

    def entry(dependency: dict) -> dict:
        candidates = by_name[dependency["name"]]
        if "version" in dependency:
            candidates = [p for p in candidates if p["version"] == dependency["version"]]
        chosen = [p for p in candidates if not p.get("resolution-markers") or any(
            Marker(m).evaluate(environment) for m in p["resolution-markers"])]  # fmt: skip
        if len(chosen) != 1:
            raise BadInput(
                f"uv.lock: cannot choose one {dependency['name']} for Python {environment['python_full_version']}"
            )
        return chosen[0]

    closure: dict[str, dict] = {}
    dependents: dict[str, set[str]] = {}
    queue: list[tuple[dict, list[str]]] = [(by_name[root][0], extras)]
    while queue:
        package, wanted = queue.pop()
        first_visit = package["name"] not in closure
        closure[package["name"]] = package
        deps = list(package.get("dependencies", [])) if first_visit else []
        for extra in wanted:
            deps += package.get("optional-dependencies", {}).get(extra, [])
        for dependency in deps:
            if applies(dependency, environment):
                queue.append((entry(dependency), dependency.get("extra", [])))
                dependents.setdefault(dependency["name"], set()).add(package["name"])
    return closure, dependents


def dropped(name: str, policy: dict) -> str | None:
    """Why the closure leaves ``name`` out (wheel-closure.json "dropped", unless "keep" names it), or None."""
    if name in policy["keep"]:
        return None
    return next((why for pattern, why in policy["dropped"].items() if fnmatch.fnmatch(name, pattern)), None)


def best_wheel(package: dict, python_tag: str) -> dict:
    """The wheel uv2nix picks on x86_64-linux glibc for this CPython."""

    def score(wheel):
        name = wheel["url"].rsplit("/", 1)[1]
        _, _, tags = name[:-4].partition("-" + package["version"] + "-")
        py, abi, plat = tags.split("-")[-3:]
        ok_py = python_tag in py.split(".") or any(t.startswith("py3") for t in py.split(".")) or abi == "abi3"
        ok_plat = plat == "any" or ("x86_64" in plat and ("manylinux" in plat or plat.startswith("linux")))
        return (ok_py and ok_plat, python_tag in py.split("."), "manylinux" in plat)

    wheels = sorted(package.get("wheels", []), key=score, reverse=True)
    if not wheels or not score(wheels[0])[0]:
        raise BadInput(f"uv.lock has no x86_64-linux wheel of {package['name']} {package['version']}")
    return wheels[0]


# -- the wheels, fetched once -------------------------------------------------------------------------------------

_checked: dict[Path, str] = {}  # a wheel whose sha256 this process has read already (a cached one is read once)


def download(url: str, sha256: str, cache: Path) -> Path:
    """``url``'s file in ``cache``, downloaded if missing, sha256 checked. It appears under its name only whole and
    checked (files.atomic_file); a cached file whose sha256 is not the expected one is damaged, said so and fetched
    again; runs that share the cache wait for one another (release.download_lock)."""
    target = Path(cache) / url.rsplit("/", 1)[1]
    if _checked.get(target) == sha256 or (target.is_file() and _sha256(target) == sha256):
        return target
    with release.download_lock(target.parent):
        if target.is_file():
            actual = _sha256(target)
            if actual == sha256:
                return target
            progress(f"{target} is damaged (sha256 {actual}, expected {sha256}); downloading it again")
            target.unlink()
        progress(f"downloading {target.name}")
        with urllib.request.urlopen(url, timeout=600) as response, files.atomic_file(target) as out:
            digest = hashlib.sha256()
            while block := response.read(1 << 22):
                out.write(block)
                digest.update(block)
            if digest.hexdigest() != sha256:  # raised inside the block: nothing is kept
                raise CheckFailed(f"{url} serves sha256 {digest.hexdigest()}, expected {sha256}: the file was replaced")
    _checked[target] = sha256
    return target


def _sha256(path: Path) -> str:
    _checked[path] = release.sha256_of(path)
    return _checked[path]


class Contents:
    """An open wheel: its member names (in the archive's order) and each member read at most once while it is open,
    so the scanners of one ``prescan`` share one decompression."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._archive = zipfile.ZipFile(path)
        self.names = self._archive.namelist()
        self._kept: dict[str, bytes] = {}

    def read(self, name: str, keep: bool = True) -> bytes:
        """A member's bytes; ``keep=False`` for the large ones (shared libraries), read once and let go."""
        if name in self._kept:
            return self._kept[name]
        data = self._archive.read(name)
        if keep:
            self._kept[name] = data
        return data

    def text(self, name: str) -> str:
        return self.read(name).decode("utf-8", errors="replace")

    def open(self, name: str):
        return self._archive.open(name)

    def close(self) -> None:
        self._archive.close()
        self._kept.clear()


@dataclass(frozen=True)
class Scanner:
    """One scan of a wheel (``scan(contents)``, JSON-able); its cache is keyed by the source of ``modules`` (and the
    name resolution of source/constants.py, which every scanner follows names with) and the wheel's sha256."""

    name: str
    modules: tuple[str, ...]
    scan: Callable[[Contents], object]

    @cached_property
    def code(self) -> str:
        digest = hashlib.sha256(constants.name_resolution_code())
        for module in self.modules:
            digest.update(inspect.getsource(importlib.import_module(module)).encode())
        return digest.hexdigest()[:16]


class Closure:
    """One stack's closure (stacks.Stack), read from its uv.lock and wheel-closure.json, with the cache it fetches
    wheels into and keeps scans in."""

    def __init__(self, stack: stacks.Stack, cache: Path = DEFAULT_CACHE):
        self.stack, self.version, self.cache = stack, stack.version, Path(cache)
        self.data = REPO / stack.data
        self.lock_file = REPO / stack.workspace / "uv.lock"
        self.policy_file = self.data / "wheel-closure.json"

    def __repr__(self) -> str:
        return f"Closure({self.version})"

    @cached_property
    def policy(self) -> dict:
        return read_json(self.policy_file, "each stack's data directory says there how its closure is resolved")

    @cached_property
    def lock(self) -> dict:
        try:
            return files.loads_toml(self.lock_file.read_text())
        except (OSError, ValueError) as err:
            raise BadInput(f"cannot read the stack's lock {self.lock_file}: {err}") from None

    @cached_property
    def environment(self) -> dict[str, str]:
        return marker_environment(self.policy["python"])

    @property
    def python_tag(self) -> str:
        return "cp" + self.environment["python_version"].replace(".", "")

    @cached_property
    def resolved(self) -> tuple[dict[str, dict], dict[str, set[str]]]:
        """(name -> package, name -> its dependents) of the whole closure of the root, dropped packages included."""
        root = self.policy["root"]
        return resolve_closure(self.lock, root["package"], root["extras"], self.environment)

    @property
    def dependents(self) -> dict[str, set[str]]:
        return self.resolved[1]

    @cached_property
    def packages(self) -> dict[str, dict]:
        """What a pip install of the lock installs: the closure without this project itself."""
        return {n: p for n, p in self.resolved[0].items() if not OWN & set(p.get("source", {}))}

    def dropped(self, name: str) -> str | None:
        return dropped(name, self.policy)

    @cached_property
    def server(self) -> dict[str, dict]:
        """name -> {"package": its uv.lock entry, "proxy": why another build is read, or None}: every wheel the Nix
        closure installs, in name order; a wheel swapped for a pin PyPI has (cuDNN's CUDA 13 build) is read from the
        lock's build, which holds the same kind of files."""
        wheels = {}
        for name, package in sorted(self.packages.items()):
            if self.dropped(name):
                continue
            swap = self.policy["cudaWheels"].get(name, {})
            proxy = swap.get("proxy")
            if swap and not proxy:
                proxy = (f"the lock's build is scanned; the closure has nix/pins.json's {swap['pin']} instead, the same"
                         " library's CUDA 13 build: shared libraries and headers, no Python")  # fmt: skip
            wheels[name] = {"package": package, "proxy": proxy}
        return wheels

    def locked(self, name: str) -> dict:
        """The uv.lock entry of ``name`` (any version the lock holds: the lock has one of each name)."""
        found = [p for p in self.lock["package"] if p["name"] == name]
        if not found:
            raise BadInput(f"{relative(self.lock_file)} has no {name}")
        return found[-1]

    def wheel(self, package: dict, python_tag: str | None = None) -> Path:
        """``package``'s wheel for the stack's CPython (or ``python_tag``'s), downloaded once, sha256 checked."""
        chosen = best_wheel(package, python_tag or self.python_tag)
        return download(chosen["url"], chosen["hash"].removeprefix("sha256:"), self.cache)

    def pinned(self, pin_name: str) -> Path:
        """A wheel nix/pins.json pins (the stack's SGLang, a swapped CUDA build), downloaded once."""
        pin = stacks.pins()[pin_name]
        return download(pin["url"], pin["sha256"], self.cache)

    def pypi(self, requirement: str) -> Path:
        """The manylinux x86_64 wheel of name==version from PyPI's simple index (PEP 691 JSON), sha256 as published."""
        name, version = requirement.split("==")
        index = f"https://pypi.org/simple/{name}/"
        request = urllib.request.Request(index, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            listed = json.load(response)["files"]
        prefix = f"{name.replace('-', '_')}-{version}-"
        wheels = [f for f in listed if f["filename"].startswith(prefix) and f["filename"].endswith("x86_64.whl")]
        if not wheels:
            raise CheckFailed(f"PyPI has no x86_64 wheel of {requirement}")
        # Mirrors of PyPI may give file URLs relative to the index page.
        return download(urllib.parse.urljoin(index, wheels[0]["url"]), wheels[0]["hashes"]["sha256"], self.cache)

    def sglang_tree(self) -> SGLangTree:
        """The stack's pinned SGLang wheel, unpacked once into the cache (release.unpack)."""
        entry = stacks.pins()["stacks"][self.version]["sglang"]
        return release.unpack(self.pinned(entry), self.cache)

    # -- scans, kept ------------------------------------------------------------------------------------------------

    def _kept(self, scanner: Scanner, wheel: Path) -> Path:
        return self.cache / "scans" / scanner.name / scanner.code / f"{_checked.get(wheel) or _sha256(wheel)}.json"

    def scanned(self, scanner: Scanner, wheel: Path, contents: Contents | None = None):
        """``scanner``'s scan of ``wheel``: kept in the cache, or made now and kept (whole, or not at all)."""
        kept = self._kept(scanner, wheel)
        try:
            return files.loads_json(kept.read_text())
        except (OSError, ValueError):  # none yet, or damaged: scanned again and replaced
            pass
        opened = contents or Contents(wheel)
        try:
            result = scanner.scan(opened)
        finally:
            if contents is None:
                opened.close()
        files.write_atomic(kept, json.dumps(result))
        return result

    def prescan(self, scanners: Iterable[Scanner], wheels: Iterable[Path]) -> None:
        """Every scan of ``scanners`` not kept yet, each wheel opened (and each member decompressed) once for all."""
        scanners = list(scanners)
        for wheel in wheels:
            missing = [s for s in scanners if not self._kept(s, wheel).is_file()]
            if not missing:
                continue
            progress(f"scanning {wheel.name} ({', '.join(s.name for s in missing)})")
            contents = Contents(wheel)
            try:
                for scanner in missing:
                    self.scanned(scanner, wheel, contents)
            finally:
                contents.close()

    @cached_property
    def server_wheels(self) -> dict[str, Path]:
        """name -> the wheel read for each package of the server closure (``server``), downloaded once."""
        return {name: self.wheel(wheel["package"]) for name, wheel in self.server.items()}
