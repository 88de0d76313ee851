"""What importlib.metadata answers in each stack's Nix closure, against where SGLang was tested: metadata.json.

The Nix build drops pip's CUDA wheels and a few others (wheel-closure.json "dropped"), swaps some for the cu130
builds of nix/pins.json ("cudaWheels"), and writes the metadata of the CUDA distributions it replaces with
cudaPackages_13_0 members ("cudaRedist"). This records, per stack:

- distributions: every distribution importlib.metadata can find in the Nix closure, in a pip install of the
  stack's uv.lock and in SGLang's CUDA 13 image where its versions are known (environments.py), each with the kind
  of every difference: dropped (with the reason the policy gives), swapped (a cudaPackages member's library,
  answered by metadata), pinned (a cu130 build);
- reads: every place in the closure's code that asks for a distribution's metadata or whether a module can be
  found (metadata_reads.py says what counts), the names it asks about, and the answer in each environment (a
  version, "not installed"; a module: "found", "not found"), marked where they differ between the Nix closure and
  the reference environment (metadata-policy.json "reference");
- unresolved: each read whose name the reader cannot resolve (site and what it reads), never left out.

A module of a dropped wheel is known from that wheel's file list, read from PyPI (its zip directory, by HTTP range
requests: the CUDA wheels are hundreds of MB) and kept in the cache. tests/test_metadata.py checks the same.
"""

from __future__ import annotations

import io
import json
import urllib.request
import zipfile

from sglang_eagle3 import files

from . import environments
from .base import Audit, Docs, unique
from .closure import Closure, best_wheel, progress, relative
from .environments import Environments, normalise
from .metadata_reads import SCANNER, provided_modules

NOT_INSTALLED, FOUND, NOT_FOUND, UNKNOWN = "not installed", "found", "not found", "not known"


class _Ranges(io.RawIOBase):
    """A remote file read by HTTP range requests: zipfile needs only its end (the directory of its files)."""

    def __init__(self, url: str):
        self.url, self.position = url, 0
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=120) as response:
            self.size = int(response.headers["Content-Length"])

    def seekable(self):
        return True

    def readable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + offset
        return self.position

    def tell(self):
        return self.position

    def readinto(self, buffer):
        if self.position >= self.size or not len(buffer):
            return 0
        end = min(self.position + len(buffer), self.size) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.position}-{end}"})
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def remote_modules(package: dict, closure: Closure) -> list[str]:
    """The modules of a wheel the closure drops, from its file list (kept in the cache by the wheel's sha256)."""
    wheel = best_wheel(package, closure.python_tag)
    kept = closure.cache / "scans" / "file-lists" / f"{wheel['hash'].removeprefix('sha256:')}.json"
    try:
        return provided_modules(files.loads_json(kept.read_text()))
    except (OSError, ValueError):  # none yet, or damaged: read again
        pass
    local = closure.cache / wheel["url"].rsplit("/", 1)[1]
    if local.is_file():
        with zipfile.ZipFile(local) as archive:
            names = archive.namelist()
    else:
        progress(f"reading the file list of {wheel['url'].rsplit('/', 1)[1]}")
        with zipfile.ZipFile(io.BufferedReader(_Ranges(wheel["url"]), buffer_size=1 << 16)) as archive:
            names = archive.namelist()
    files.write_atomic(kept, json.dumps(names))
    return provided_modules(names)


def answers_for(kind: str, value: str, env: Environments, providers: dict[str, set[str]], closure: dict) -> dict:
    """What a read gets in each environment: a distribution's version or "not installed"; whether a module is
    found (a wheel there ships it). The image's own CUDA wheels are not read: a module under nvidia. that no
    wheel of the lock the image keeps ships is not known there."""
    views = {"nix": env.nix, "pip": env.pip, **({"image": env.image} if env.image is not None else {})}
    if kind == "distributions":  # every distribution: how many it finds (the image's are not all known)
        found = {view: f"{len(installed)} distributions" for view, installed in views.items()}
        return {**found, "image": UNKNOWN} if "image" in found else found
    if kind != "find_spec":
        found = {view: installed.get(normalise(value), NOT_INSTALLED) for view, installed in views.items()}
        if "image" in found and normalise(value) not in env.image_known:
            found["image"] = UNKNOWN
        return found
    shipped_by = providers.get(value, set())
    found = {"nix": FOUND if shipped_by & set(closure) else NOT_FOUND, "pip": FOUND if shipped_by else NOT_FOUND}
    if env.image is not None:
        kept = {d for d in shipped_by if d in env.image}
        found["image"] = FOUND if kept else UNKNOWN if value.partition(".")[0] == "nvidia" else NOT_FOUND
    return found


def table(stack: str, data: dict) -> str:
    """docs/nix.md's summary of a stack's data: the differences, the reads that differ, the unresolved count."""
    rows = [(n, r) for n, r in data["distributions"].items() if "kind" in r]
    kinds: dict[str, int] = {}
    for _, row in rows:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    differing = [(k, s) for k, s in data["reads"].items() if s.get("differs")]
    lines = [
        f"SGLang {stack}: {len(data['distributions'])} distributions, {len(rows)} differ ("
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f"); {len(data['reads'])} reads, "
        f"{len(differing)} answered otherwise than in the reference environment ({data['reference']}), "
        f"{len(data['unresolved'])} unresolved.",
        "",
        "| read | asks | Nix closure | " + data["reference"] + " |",
        "|---|---|---|---|",
    ]
    for _, site in sorted(differing, key=lambda i: i[1]["location"]):
        for value, answer in site["answers"].items():
            if answer[data["reference"]] not in (answer["nix"], UNKNOWN):
                lines.append(f"| `{site['location']}` | {site['kind']} `{value}` | {answer['nix']} | "
                             f"{answer[data['reference']]} |")  # fmt: skip
    return "\n".join(lines)


class Metadata(Audit):
    name = "metadata"
    data = "metadata.json"
    policy = environments.POLICY
    policy_shape = {"reference": (str, None)}
    inputs = ("each stack's uv.lock, wheel-closure.json and metadata-policy.json", "nix/pins.json",
              "nix/cuda-members.json", "nix/scripts/cuda-dist-info.py", "every wheel of each server closure",
              "the file lists of the wheels each closure drops (read from PyPI)")  # fmt: skip
    docs = Docs("docs/nix.md", "metadata")
    scanners = (SCANNER,)

    def scan(self, closure: Closure) -> dict:
        self.policy_of(closure)  # its shape, named if wrong
        env = environments.of(closure)
        reads, providers = {}, {}  # providers: module -> distributions (the lock's names) that ship it
        for name, path in closure.server_wheels.items():
            found = closure.scanned(SCANNER, path)
            for module in found["modules"]:
                providers.setdefault(module, set()).add(name)
            if found["reads"]:
                reads[name] = found["reads"]
        for name, package in closure.packages.items():
            if name not in closure.server:  # dropped: its modules, for what find_spec answers in a pip install
                for module in remote_modules(package, closure):
                    providers.setdefault(module, set()).add(name)
        sites, unresolved = {}, []
        reference = env.policy["reference"]
        for package, records in sorted(reads.items()):
            for record in records:
                key = unique(
                    sites, f"{package} {record['file']}:{record['function']} {record['kind']}({record['argument']})"
                )
                site = {"location": f"{record['file']}:{record['line']}", "kind": record["kind"]}
                if record["values"] is None:
                    why = record["via"] or "not a constant"
                    unresolved.append({"package": package, "location": site["location"], "kind": record["kind"],
                                       "argument": record["argument"], "why": why})  # fmt: skip
                    site["unresolved"] = why
                    sites[key] = site
                    continue
                if record["via"] != "constants":
                    site["via"] = record["via"]
                site["answers"] = {v: answers_for(record["kind"], v, env, providers, closure.server)
                                   for v in record["values"]}  # fmt: skip
                site["differs"] = any(a[reference] not in (a["nix"], UNKNOWN) for a in site["answers"].values())
                sites[key] = site
        progress(f"{len(sites)} reads, {len(unresolved)} unresolved")
        return {
            "_comment": " ".join(
                [
                    "GENERATED by python -m sglang_eagle3_audits --only metadata",
                    "from every wheel of the server closure of",
                    f"{relative(closure.lock_file)}, {relative(closure.policy_file)}, nix/cuda-members.json and",
                    f"{relative(closure.data / self.policy)}; do not edit. distributions: what",
                    "importlib.metadata finds in the Nix closure (nix), a pip install of the lock (pip) and",
                    "SGLang's CUDA",
                    "13 image where known (image; null: absent), with the kind and reason of each difference. reads:",
                    "each place the closure's code asks for a distribution or a module, its answer in each environment",
                    f"(a module: found or not; '{UNKNOWN}': the image's file lists are not known), and whether the Nix",
                    "closure's differs from the",
                    f"reference environment ({reference}). unresolved: the reads whose name is not resolved.",
                ]
            ),  # fmt: skip
            "reference": reference,
            "distributions": env.distributions()[0],
            "reads": sites,
            "unresolved": unresolved,
        }

    def problems(self, data: dict, closure: Closure) -> list[str]:
        env = environments.of(closure)
        return env.distributions()[1] + env.answer_problems()

    def markdown(self, results: dict[Closure, dict]) -> str:
        return "\n\n".join(table(closure.version, data) for closure, data in results.items())


AUDIT = Metadata()
