"""Which shared libraries every wheel of a stack's closure needs and provides: wheel-libraries.json.

The Nix build (uv2nix) runs autoPatchelf on every wheel, which fails on any NEEDED soname that nothing in the build
provides. Every ELF shared object or executable of every wheel of the closure is read with pyelftools (its SONAME
and its NEEDED entries); a wheel swapped for a cu130 build PyPI lacks (torch, torchvision, sgl-kernel) is read
from its closest PyPI build, named as a proxy in the data, and its CUDA 12 sonames are translated to the CUDA 13
soname of the same library; a swapped wheel that is on PyPI (cuDNN's CUDA 13 build) is read from its pin. The
CUDA 13 redistributables (cudaPackages_13_0) are read from NVIDIA's PyPI wheels of the same libraries, to learn
which sonames each member ships. tests/test_wheel_libraries.py proves every soname is resolved by what the Nix
build provides, and nix/python-overrides.nix derives the overrides from the data.
"""

from __future__ import annotations

import io
from pathlib import Path

from sglang_eagle3 import stacks
from sglang_eagle3.errors import BadInput

from .base import MISSING_ELFTOOLS, Audit
from .closure import OWN, Closure, Contents, Scanner, progress, relative


def elf_libraries(contents: Contents) -> dict:
    """{"provides", "needs": sonames, "count": files} over the wheel's dynamic x86-64 ELF files."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
    except ImportError:
        raise BadInput(MISSING_ELFTOOLS) from None
    provides: set[str] = set()
    needs: set[str] = set()
    count = 0
    for name in contents.names:
        if name.endswith("/"):
            continue
        with contents.open(name) as member:
            if member.read(4) != b"\x7fELF":
                continue
        try:
            elf = ELFFile(io.BytesIO(contents.read(name, keep=False)))
        except ELFError:
            continue
        if elf["e_machine"] != "EM_X86_64":
            continue  # GPU code (cubins) are ELF too, but not for the host's loader
        dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
        if dynamic is None:
            continue
        count += 1
        provides.add(Path(name).name)
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_NEEDED":
                needs.add(tag.needed)
            elif tag.entry.d_tag == "DT_SONAME":
                provides.add(tag.soname)
    return {"provides": sorted(provides), "needs": sorted(needs), "count": count}


SCANNER = Scanner("elf-libraries", (__name__,), elf_libraries)


def stem(soname: str) -> str:
    """libcudart.so.12 -> libcudart."""
    return soname.split(".so", 1)[0]


class WheelLibraries(Audit):
    name = "wheel-libraries"
    data = "wheel-libraries.json"
    inputs = ("each stack's uv.lock", "nix/pins.json", "each stack's wheel-closure.json",
              "every wheel of each closure (downloaded, sha256 checked)")  # fmt: skip

    def scan(self, closure: Closure) -> dict:
        policy, pins = closure.policy, stacks.pins()
        cuda: dict[str, list[str]] = {}
        for member, requirement in sorted(policy["cudaRedist"].items()):
            if not member.startswith("_"):
                found = closure.scanned(SCANNER, closure.pypi(requirement))
                cuda[member] = [s for s in found["provides"] if ".so" in s]
        cuda_by_stem = {stem(s): s for sonames in cuda.values() for s in sonames}
        packages: dict[str, dict] = {}
        dropped_names: dict[str, dict] = {}
        everything, dependents = closure.resolved
        for name in sorted(everything):
            package = everything[name]
            why = closure.dropped(name)
            if why:
                dropped_names[name] = {"why": why, "requiredBy": sorted(dependents.get(name, ()))}
                continue
            if OWN & set(package.get("source", {})):
                continue  # this project itself (and a stack's project): no ELF files
            swap = policy["cudaWheels"].get(name)
            # The pinned CUDA 13 build is on PyPI (no proxy): read it, not the lock's wheel it replaces.
            path = closure.pinned(swap["pin"]) if swap and "proxy" not in swap else closure.wheel(package)
            found = closure.scanned(SCANNER, path)
            if not found["count"]:
                continue
            record = {"version": package["version"], "wheel": path.name, "elfFiles": found["count"],
                      "provides": found["provides"], "needs": found["needs"]}  # fmt: skip
            if swap and "proxy" not in swap:
                record["version"] = pins[swap["pin"]]["version"]
            elif swap:
                pin = pins[swap["pin"]]
                record.update(version=pin["version"], wheel=pin["wheel"], proxy=f"{path.name}: {swap['proxy']}")
                translated = {s: cuda_by_stem[stem(s)] for s in found["needs"]
                              if cuda_by_stem.get(stem(s), s) != s}  # fmt: skip
                record["needs"] = sorted({translated.get(s, s) for s in found["needs"]})
                record["translated"] = translated
            packages[name] = record
        progress(f"{len(packages)} wheels with ELF files")
        return {
            "_comment": " ".join(
                [
                    "GENERATED by nix/scripts/audit-wheel-libraries.py from",
                    f"{relative(closure.lock_file)}, nix/pins.json and {relative(closure.policy_file)};",
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


AUDIT = WheelLibraries()
