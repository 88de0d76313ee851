#!/usr/bin/env python3
"""Record which shared libraries every wheel of the server closure needs: nix/stacks/sglang-0.5.9/wheel-libraries.json.

The Nix build (uv2nix) runs autoPatchelf on every wheel, which fails on any NEEDED
soname that nothing in the build provides. This generator reads the wheels themselves:

1. The server closure is resolved from the stack's uv.lock the way uv2nix resolves it for
   CPython 3.12 on x86_64-linux (PEP 508 markers, extras), minus what
   nix/stacks/sglang-0.5.9/wheel-closure.json drops; the CUDA wheels swapped for cu130 builds that PyPI lacks
   (torch, torchvision, sgl-kernel) are read from their closest PyPI build (named as a
   proxy in the data), a swapped wheel that is on PyPI (cuDNN's CUDA 13 build) from its pin.
2. Each wheel is downloaded from the URL in uv.lock (sha256 checked against uv.lock; a pin's
   against nix/pins.json),
   and every ELF shared object or executable in it is read with pyelftools: its SONAME
   and its NEEDED entries.
3. The CUDA 13 redistributables (cudaPackages_13_0) are read from NVIDIA's PyPI wheels of
   the same libraries, to learn which sonames each cudaPackages member ships; a proxy
   wheel's CUDA 12 sonames are translated to the CUDA 13 soname of the same library.

The result is data; tests/test_wheel_libraries.py proves every soname is resolved by
what the Nix build provides, and nix/python-overrides.nix derives the overrides from it.

    python nix/scripts/audit-wheel-libraries.py [--stack VERSION] [--cache DIR] [--check]

A stack (nix/pins.json "stacks") names its uv.lock and the directory of its policy and data:
0.5.9 (the default) python/uv.lock and nix/; 0.5.23 nix/stacks/sglang-0.5.23/.

Needs: pyelftools, packaging (both in the test environment); network access to PyPI.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import sys
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.markers import Marker

REPO = Path(__file__).resolve().parents[2]
PINS = REPO / "nix" / "pins.json"
sys.path.insert(0, str(REPO / "python" / "src"))

from sglang_eagle3 import files  # noqa: E402 - the repository's package, found above: atomic writes


def stack_files(version: str | None = None) -> dict[str, Path]:
    """The lock, policies and data of a stack of nix/pins.json (None: the default stack)."""
    pins = json.loads(PINS.read_text())
    stacks = {v: s for v, s in pins["stacks"].items() if not v.startswith("_")}
    version = version or pins["stack"]["default"]
    if version not in stacks:
        raise SystemExit(f"no stack {version!r} in nix/pins.json (stacks: {', '.join(stacks)})")
    stack, data = stacks[version], REPO / stacks[version]["data"]
    return {
        "lock": REPO / stack["workspace"] / "uv.lock",
        "policy": data / "wheel-closure.json",
        "output": data / "wheel-libraries.json",
        "lookupPolicy": data / "runtime-lookup-policy.json",
        "lookups": data / "runtime-lookups.json",
    }


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
            raise SystemExit(
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
        raise SystemExit(f"uv.lock has no x86_64-linux wheel of {package['name']} {package['version']}")
    return wheels[0]


def download(url: str, sha256: str | None, cache: Path) -> Path:
    """``url``'s file in ``cache``, downloaded if missing, sha256 checked (when given). The download appears under
    its name only whole and checked (a temporary file beside it, fsync, rename: a run stopped at any point leaves no
    part of it there); a cached file whose sha256 is not the expected one is damaged, said so and fetched again."""
    target = cache / url.rsplit("/", 1)[1]
    if target.is_file():
        actual = _sha256(target)
        if not sha256 or actual == sha256:
            return target
        print(f"  {target} is damaged (sha256 {actual}, expected {sha256}); downloading it again", file=sys.stderr)
        target.unlink()
    print(f"  downloading {target.name}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=600) as response, files.atomic_file(target) as f:
        digest = hashlib.sha256()
        while block := response.read(1 << 22):
            f.write(block)
            digest.update(block)
        if sha256 and digest.hexdigest() != sha256:  # raised inside the block: nothing is kept
            raise SystemExit(f"{url} serves sha256 {digest.hexdigest()}, expected {sha256}: the file was replaced")
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def elf_libraries(wheel: Path) -> tuple[list[str], list[str], int]:
    """(sonames provided, sonames needed, number of files) over the wheel's dynamic x86-64 ELF files."""
    provides: set[str] = set()
    needs: set[str] = set()
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            with archive.open(info) as member:
                if member.read(4) != b"\x7fELF":
                    continue
            data = archive.read(info)
            try:
                elf = ELFFile(io.BytesIO(data))
            except ELFError:
                continue
            if elf["e_machine"] != "EM_X86_64":
                continue  # GPU code (cubins) are ELF too, but not for the host's loader
            dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
            if dynamic is None:
                continue
            count += 1
            provides.add(Path(info.filename).name)
            for tag in dynamic.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needs.add(tag.needed)
                elif tag.entry.d_tag == "DT_SONAME":
                    provides.add(tag.soname)
    return sorted(provides), sorted(needs), count


def pypi_wheel(requirement: str, cache: Path) -> Path:
    """The manylinux x86_64 wheel of name==version from PyPI's simple index (PEP 691 JSON), sha256 as published."""
    name, version = requirement.split("==")
    index = f"https://pypi.org/simple/{name}/"
    request = urllib.request.Request(index, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    prefix = f"{name.replace('-', '_')}-{version}-"
    wheels = [f for f in files if f["filename"].startswith(prefix) and f["filename"].endswith("x86_64.whl")]
    if not wheels:
        raise SystemExit(f"PyPI has no x86_64 wheel of {requirement}")
    # Mirrors of PyPI may give file URLs relative to the index page.
    return download(urllib.parse.urljoin(index, wheels[0]["url"]), wheels[0]["hashes"]["sha256"], cache)


def stem(soname: str) -> str:
    """libcudart.so.12 -> libcudart."""
    return soname.split(".so", 1)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="A stack of nix/pins.json (default: the default stack).")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument("--check", action="store_true", help="Exit 1 if the stack's wheel-libraries.json differs.")
    args = parser.parse_args()
    files = stack_files(args.stack)
    output = files["output"]

    policy = json.loads(files["policy"].read_text())
    pins = json.loads(PINS.read_text())
    lock = tomllib.loads(files["lock"].read_text())
    environment = marker_environment(policy["python"])
    python_tag = "cp" + environment["python_version"].replace(".", "")

    print("CUDA 13 redistributables:", file=sys.stderr)
    cuda: dict[str, list[str]] = {}
    for member, requirement in sorted(policy["cudaRedist"].items()):
        if member.startswith("_"):
            continue
        provides, _, _ = elf_libraries(pypi_wheel(requirement, args.cache))
        cuda[member] = [s for s in provides if ".so" in s]
    cuda_by_stem = {stem(s): s for sonames in cuda.values() for s in sonames}

    closure, dependents = resolve_closure(lock, policy["root"]["package"], policy["root"]["extras"], environment)
    print(f"server closure: {len(closure)} packages", file=sys.stderr)
    packages: dict[str, dict] = {}
    dropped_names: dict[str, dict] = {}
    for name in sorted(closure):
        package = closure[name]
        why = dropped(name, policy)
        if why:
            dropped_names[name] = {"why": why, "requiredBy": sorted(dependents.get(name, ()))}
            continue
        if {"editable", "virtual", "directory"} & set(package.get("source", {})):
            continue  # this project itself (and a stack's project): no ELF files
        swap = policy["cudaWheels"].get(name)
        if swap and "proxy" not in swap:
            # The pinned CUDA 13 build is on PyPI: read it, not the lock's wheel it replaces.
            pin = pins[swap["pin"]]
            path = download(pin["url"], pin["sha256"], args.cache)
        else:
            wheel = best_wheel(package, python_tag)
            path = download(wheel["url"], wheel["hash"].removeprefix("sha256:"), args.cache)
        provides, needs, count = elf_libraries(path)
        if not count:
            continue
        record = {"version": package["version"], "wheel": path.name, "elfFiles": count,
                  "provides": provides, "needs": needs}  # fmt: skip
        if swap and "proxy" not in swap:
            record["version"] = pins[swap["pin"]]["version"]
        elif swap:
            pin = pins[swap["pin"]]
            record.update(version=pin["version"], wheel=pin["wheel"], proxy=f"{path.name}: {swap['proxy']}")
            translated = {}
            for soname in needs:
                cuda13 = cuda_by_stem.get(stem(soname))
                if cuda13 and cuda13 != soname:
                    translated[soname] = cuda13
            record["needs"] = sorted({translated.get(s, s) for s in needs})
            record["translated"] = translated
        packages[name] = record
        print(f"  {name} {record['version']}: {count} ELF files, needs {len(record['needs'])}", file=sys.stderr)

    data = {
        "_comment": " ".join(
            [
                "GENERATED by nix/scripts/audit-wheel-libraries.py from",
                f"{files['lock'].relative_to(REPO)}, nix/pins.json and {files['policy'].relative_to(REPO)};",
                "do not edit. packages: every wheel of the Nix server closure that holds",
                "x86-64 ELF files, with the sonames it provides and needs. cudaPackages_13_0: the sonames each",
                "member ships. dropped: what the closure leaves out and which packages depend on it (their",
                "dependency on it is removed).",
            ]
        ),
        "python": policy["python"],
        "cudaPackages_13_0": cuda,
        "dropped": dropped_names,
        "packages": packages,
    }
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        if output.read_text() != text:
            raise SystemExit(f"{output} is stale: run {Path(__file__).relative_to(REPO)}")
        print(f"{output.relative_to(REPO)} is up to date")
        return
    output.write_text(text)
    print(f"wrote {output.relative_to(REPO)}: {len(packages)} packages with ELF files", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-wheel-libraries: {err} (this generator needs network access to PyPI)") from None
