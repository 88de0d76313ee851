#!/usr/bin/env python3
"""What importlib.metadata answers in each stack's Nix closure, against where SGLang was tested: metadata.json.

The Nix build drops pip's CUDA wheels and a few others (wheel-closure.json "dropped"), swaps some for the cu130
builds of nix/pins.json ("cudaWheels"), and writes the metadata of the CUDA distributions it replaces with
cudaPackages_13_0 members ("cudaRedist": nix/scripts/cuda-dist-info.py, versions in nix/cuda-members.json). This
generator records, per stack:

- distributions: every distribution importlib.metadata can find in the Nix closure, in a pip install of the
  stack's uv.lock (the server extra, as the audits resolve it), and in SGLang's CUDA 13 image where its versions
  are known (metadata-policy.json "image"), each with the kind of every difference: dropped (with the reason the
  policy gives), swapped (a cudaPackages member's library, answered by metadata), pinned (a cu130 build);
- reads: every place in the closure's code that asks for a distribution's metadata or whether a module can be
  found (python/src/sglang_eagle3/source/metadata_reads.py says what counts), the names it asks about, and the
  answer in each environment (a version, "not installed"; a module: "found", "not found"), marked where they
  differ between the Nix closure and the reference environment (metadata-policy.json "reference");
- unresolved: each read whose name the reader cannot resolve (site and what it reads), never left out.

tests/test_metadata.py checks the data against the wheels and the evaluated flake. A module of a dropped wheel is
known from that wheel's file list, read from PyPI (its zip directory, by HTTP range requests: the CUDA wheels are
hundreds of MB) and kept in the cache.

    python nix/scripts/audit-metadata.py [--stack VERSION] [--cache DIR] [--check] [--markdown]

Needs: the sglang_eagle3 package and packaging (the test environment); network access to PyPI for a wheel or a
file list not in the cache.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import sys
import tomllib
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "src"))

from sglang_eagle3.source import metadata_reads  # noqa: E402 - the repository's package, found above
from sglang_eagle3.source.constants import name_resolution_code  # noqa: E402 - the repository's package, found above

PINS = REPO / "nix" / "pins.json"
MEMBERS = REPO / "nix" / "cuda-members.json"
DATA, POLICY = "metadata.json", "metadata-policy.json"
SCANNER = Path(metadata_reads.__file__)
NOT_INSTALLED, FOUND, NOT_FOUND, UNKNOWN = "not installed", "found", "not found", "not known"


def script(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), REPO / "nix" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stack_versions() -> list[str]:
    return [v for v in json.loads(PINS.read_text())["stacks"] if not v.startswith("_")]


def data_dir(stack: str) -> Path:
    return REPO / json.loads(PINS.read_text())["stacks"][stack]["data"]


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def answered(closure_policy: dict) -> dict[str, tuple[str, str]]:
    """Distribution -> (cudaPackages_13_0 member, the library's version): what the closure's metadata says, as
    nix/python-overrides.nix writes it (cudaRedist's distributions, nix/cuda-members.json's versions)."""
    members = json.loads(MEMBERS.read_text())
    dist_info = script("cuda-dist-info")
    found = {}
    for member, spec in closure_policy["cudaRedist"].items():
        if member.startswith("_"):
            continue
        if member not in members:
            raise SystemExit(f"nix/cuda-members.json has no version of cudaPackages_13_0.{member} (cudaRedist)")
        found[normalise(spec.partition("==")[0])] = (member, dist_info.library_version(member, members[member]))
    return found


class Stack:
    """One stack's environments: the lock's closure (pip), what the Nix closure installs, the image where known."""

    def __init__(self, stack: str):
        self.stack = stack
        self.wheels = script("audit-wheel-libraries")
        files = self.wheels.stack_files(stack)
        self.closure_policy = json.loads(files["policy"].read_text())
        self.policy = json.loads((data_dir(stack) / POLICY).read_text())
        lock = tomllib.loads(files["lock"].read_text())
        environment = self.wheels.marker_environment(self.closure_policy["python"])
        root = self.closure_policy["root"]
        closure, self.dependents = self.wheels.resolve_closure(lock, root["package"], root["extras"], environment)
        own = {"editable", "virtual", "directory"}
        self.packages = {n: p for n, p in closure.items() if not own & set(p.get("source", {}))}
        self.answered = answered(self.closure_policy)
        pins = json.loads(PINS.read_text())
        self.pip = {n: p["version"] for n, p in self.packages.items()}
        self.nix, self.pinned, self.pinned_names = {}, {}, {}
        for name, version in self.pip.items():
            if self.wheels.dropped(name, self.closure_policy):
                continue
            swap = self.closure_policy["cudaWheels"].get(name)
            if swap:
                pin = pins[swap["pin"]]
                installed = normalise(pin.get("name", swap["pin"]))
                self.nix[installed] = pin["version"]
                self.pinned[installed] = self.pinned[name] = swap.get("why") or swap.get("proxy")
                self.pinned_names[name] = installed
            else:
                self.nix[name] = version
        for name, (_, version) in self.answered.items():
            self.nix[name] = version
        self.image, self.image_known = self._image()

    def _image(self) -> tuple[dict | None, set[str]]:
        """SGLang's CUDA 13 image: the lock, where the CUDA distributions (nvidia-*) only the replaced package requires
        are absent and the known distributions are as the policy says; (None, {}) where nothing is known."""
        image = self.policy.get("image")
        if not image:
            return None, set()
        replaced = image["replaces"]
        absent: set[str] = set()
        changed = True
        while changed:  # required only by the replaced package, or by what is absent for that reason
            changed = False
            for name in self.pip:
                users = self.dependents.get(name, set())
                cuda = name.startswith("nvidia-") and name not in image["distributions"]
                if cuda and name not in absent and users and users <= {replaced} | absent:
                    absent.add(name)
                    changed = True
        view = {n: v for n, v in self.pip.items() if n not in absent}
        view.update(image["distributions"])
        return view, absent | set(image["distributions"])

    def reference(self) -> dict[str, str]:
        """The environment SGLang was tested in, as far as known (the policy's "reference"), for judging gates."""
        return self.image if self.policy["reference"] == "image" else self.pip

    # -- the distributions ---------------------------------------------------------------------------

    def distributions(self) -> tuple[dict, list[str]]:
        rows, problems = {}, []
        names = sorted(set(self.nix) | set(self.pip) | (set(self.image) if self.image else set()))
        for name in names:
            row = {"nix": self.nix.get(name), "pip": self.pip.get(name)}
            if self.image is not None and name in self.image_known:
                row["image"] = self.image.get(name)
            if len(set(row.values())) > 1:
                row["kind"], row["why"] = self._difference(name)
                if row["kind"] == "unexplained":
                    problems.append(f"{self.stack}: {name} {row}: a difference without a reason in wheel-closure.json")
            rows[name] = row
        return rows, problems

    def _difference(self, name: str) -> tuple[str, str]:
        if name in self.answered:
            member, _ = self.answered[name]
            return "swapped", (f"cudaPackages_13_0.{member} is the library; the closure's metadata names its version "
                               "(nix/scripts/cuda-dist-info.py, nix/python-overrides.nix)")  # fmt: skip
        if name in self.pinned:
            return "pinned", self.pinned[name]
        why = self.wheels.dropped(name, self.closure_policy)
        if why and name in self.pip and name not in self.nix:
            reason = self.closure_policy.get("metadata", {}).get("notAnswered", {}).get(name)
            return "dropped", why + (f"; not answered by metadata: {reason}" if reason else "")
        if self.image is not None and name in self.image_known and name not in self.image:
            return "absent from the image", f"only {self.policy['image']['replaces']} requires it in the lock"
        return "unexplained", ""

    def answer_problems(self) -> list[str]:
        """Every dropped nvidia-* distribution is answered by metadata or has a reason not to be; no reason names
        a distribution that is not dropped; no answer collides with a wheel the closure installs."""
        reasons = self.closure_policy.get("metadata", {}).get("notAnswered", {})
        dropped = {n for n in self.pip if n.startswith("nvidia-") and self.wheels.dropped(n, self.closure_policy)}
        found = [f"{self.stack}: {n} is dropped, neither answered by metadata nor given a reason in wheel-closure.json"
                 " metadata.notAnswered" for n in sorted(dropped - set(self.answered) - set(reasons))]  # fmt: skip
        found += [f"{self.stack}: metadata.notAnswered names {n}, which the closure does not drop"
                  for n in sorted(set(reasons) - dropped) if not n.startswith("_")]  # fmt: skip
        kept = {n for n in self.nix if n not in self.answered}
        found += [f"{self.stack}: {n} is answered by metadata and installed as a wheel too"
                  for n in sorted(set(self.answered) & kept)]  # fmt: skip
        return found


# -- the reads -----------------------------------------------------------------------------------------


def scanned(wheel: Path, cache: Path) -> tuple[list[dict], list[str]]:
    """(the reads of a wheel as records, the modules it provides), kept in the cache under the scanner's hash."""
    digest = hashlib.sha256(SCANNER.read_bytes() + name_resolution_code() + Path(__file__).read_bytes())
    kept = cache / "metadata-reads" / digest.hexdigest()[:16] / f"{wheel.name}.json"
    if kept.is_file():
        record = json.loads(kept.read_text())
        return record["reads"], record["modules"]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = [(n, archive.read(n).decode("utf-8", errors="replace")) for n in names if n.endswith(".py")]
    reads = [
        {"file": r.file, "line": r.line, "function": r.function, "kind": r.kind, "argument": r.argument,
         "values": r.values, "via": r.via}
        for r in metadata_reads.wheel_reads(sources)
    ]  # fmt: skip
    record = {"reads": reads, "modules": provided_modules(names)}
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(record))
    return record["reads"], record["modules"]


def provided_modules(names: list[str]) -> list[str]:
    """The importable modules and packages a wheel's files make (a/b/c.py, a/b/__init__.py, a/b/c.*.so: a, a.b,
    a.b.c), its metadata directories left out."""
    found = set()
    for name in names:
        parts = name.split("/")
        if parts[0].endswith((".dist-info", ".data")) or len(parts) == 0:
            continue
        last = parts[-1]
        if last.endswith(".py"):
            parts[-1] = last.removesuffix(".py")
        elif last.endswith(".so") and "." in last.removesuffix(".so"):
            parts[-1] = last.split(".")[0]
        else:
            parts = parts[:-1]  # a data file: its directories are (namespace) packages
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        for i in range(1, len(parts) + 1):
            if all(p.isidentifier() for p in parts[:i]):
                found.add(".".join(parts[:i]))
    return sorted(found)


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


def remote_modules(package: dict, wheels, cache: Path) -> list[str]:
    """The modules of a wheel the closure drops, from its file list (kept in the cache by the wheel's sha256)."""
    wheel = wheels.best_wheel(package, "cp312")
    sha = wheel["hash"].removeprefix("sha256:")
    kept = cache / "metadata-reads" / "file-lists" / f"{sha}.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    local = cache / wheel["url"].rsplit("/", 1)[1]
    if local.is_file():
        with zipfile.ZipFile(local) as archive:
            names = archive.namelist()
    else:
        print(f"  reading the file list of {wheel['url'].rsplit('/', 1)[1]}", file=sys.stderr)
        with zipfile.ZipFile(io.BufferedReader(_Ranges(wheel["url"]), buffer_size=1 << 16)) as archive:
            names = archive.namelist()
    modules = provided_modules(names)
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps(modules))
    return modules


def inventory(stack: str, cache: Path) -> tuple[dict, list[str]]:
    env = Stack(stack)
    lookups = script("audit-runtime-lookups")
    closure = lookups.server_closure(stack)
    reads, providers = {}, {}  # providers: module -> distributions (the lock's names) that ship it
    for name, wheel_of in closure.items():
        package = wheel_of["package"]
        wheel = env.wheels.best_wheel(package, "cp312")
        path = env.wheels.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)
        found, modules = scanned(path, cache)
        for module in modules:
            providers.setdefault(module, set()).add(name)
        if found:
            reads[name] = found
    for name, package in env.packages.items():
        if name not in closure:  # dropped: its modules, for what find_spec answers in a pip install
            for module in remote_modules(package, env.wheels, cache):
                providers.setdefault(module, set()).add(name)
    distributions, problems = env.distributions()
    problems += env.answer_problems()
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
            answers = {value: answers_for(record["kind"], value, env, providers, closure) for value in record["values"]}
            site["answers"] = answers
            site["differs"] = any(a[reference] not in (a["nix"], UNKNOWN) for a in answers.values())
            sites[key] = site
    files = env.wheels.stack_files(stack)
    data = {
        "_comment": " ".join(
            [
                "GENERATED by nix/scripts/audit-metadata.py from every wheel of the server closure of",
                f"{files['lock'].relative_to(REPO)}, {files['policy'].relative_to(REPO)}, nix/cuda-members.json and",
                f"{(data_dir(stack) / POLICY).relative_to(REPO)}; do not edit. distributions: what",
                "importlib.metadata finds in the Nix closure (nix), a pip install of the lock (pip) and SGLang's CUDA",
                "13 image where known (image; null: absent), with the kind and reason of each difference. reads:",
                "each place the closure's code asks for a distribution or a module, its answer in each environment",
                f"(a module: found or not; '{UNKNOWN}': the image's file lists are not known), and whether the Nix",
                "closure's differs from the",
                f"reference environment ({reference}). unresolved: the reads whose name is not resolved.",
            ]
        ),  # fmt: skip
        "reference": reference,
        "distributions": distributions,
        "reads": sites,
        "unresolved": unresolved,
    }
    return data, problems


def answers_for(kind: str, value: str, env: Stack, providers: dict[str, set[str]], closure: dict) -> dict[str, str]:
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


def unique(existing: dict, key: str) -> str:
    if key not in existing:
        return key
    n = 2
    while f"{key} #{n}" in existing:
        n += 1
    return f"{key} #{n}"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", help="A stack of nix/pins.json (default: every stack).")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    parser.add_argument(
        "--check", action="store_true", help="Exit 1 if the data differs or a difference has no reason."
    )
    parser.add_argument("--markdown", action="store_true", help="Print docs/nix.md's summary of each stack's data.")
    args = parser.parse_args()
    if args.stack is not None and args.stack not in stack_versions():
        parser.error(f"no stack {args.stack!r} in nix/pins.json (stacks: {', '.join(stack_versions())})")
    stacks = [args.stack] if args.stack else stack_versions()
    if args.markdown:
        for stack in stacks:
            print(table(stack, json.loads((data_dir(stack) / DATA).read_text())) + "\n")
        return
    failed = []
    for stack in stacks:
        output = data_dir(stack) / DATA
        print(f"stack {stack}:", file=sys.stderr)
        data, problems = inventory(stack, args.cache)
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        if args.check and (not output.is_file() or output.read_text() != text):
            failed.append(
                f"{output.relative_to(REPO)} is stale: run {Path(__file__).relative_to(REPO)} --stack {stack}"
            )
        elif not args.check:
            output.write_text(text)
            print(f"wrote {output.relative_to(REPO)}", file=sys.stderr)
        failed += problems
    if failed:
        raise SystemExit("not accounted for:\n  " + "\n  ".join(failed))
    print("every difference has a reason; every read is answered or listed as unresolved")


if __name__ == "__main__":
    try:
        main()
    except (OSError, urllib.error.URLError) as err:
        raise SystemExit(f"audit-metadata: {err} (this generator needs network access to PyPI)") from None
