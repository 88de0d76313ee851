"""A stack's three environments, as importlib.metadata sees each: the Nix closure, a pip install of the lock, and
SGLang's CUDA 13 image where its versions are known (metadata-policy.json "image"); which one SGLang was tested in
is the policy's "reference". The start-up gates are judged in the first and the reference; the metadata audit sets
all three side by side.

The Nix closure is the lock's closure less what wheel-closure.json drops, with its cu130 swaps (cudaWheels) and
the metadata nix/python-overrides.nix writes for the CUDA distributions it answers with cudaPackages_13_0 members
(cudaRedist): the build step itself (nix/scripts/cuda-dist-info.py) is run, with nix/cuda-members.json's versions,
and its metadata read back with importlib.metadata, as the closure's code reads it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import sys
import tempfile

from sglang_eagle3 import stacks
from sglang_eagle3.errors import BadInput

from .closure import REPO, Closure, read_json

MEMBERS = REPO / "nix" / "cuda-members.json"
DIST_INFO = REPO / "nix" / "scripts" / "cuda-dist-info.py"
POLICY = "metadata-policy.json"


def normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def answered(closure_policy: dict) -> dict[str, tuple[str, str]]:
    """Distribution -> (cudaPackages_13_0 member, the library's version): what the closure's metadata says, written
    by the build step nix/python-overrides.nix runs (cudaRedist's distributions, nix/cuda-members.json's versions)."""
    members = read_json(MEMBERS, "the versions of the cudaPackages_13_0 members (the flake writes it)")
    wanted = {}
    for member, spec in closure_policy["cudaRedist"].items():
        if member.startswith("_"):
            continue
        if member not in members:
            raise BadInput(f"nix/cuda-members.json has no version of cudaPackages_13_0.{member} (cudaRedist)")
        wanted[spec.partition("==")[0]] = {"version": members[member], "member": member}
    with tempfile.TemporaryDirectory(prefix="cuda-dist-info-") as site:
        ran = subprocess.run([sys.executable, str(DIST_INFO), site, json.dumps(wanted)], capture_output=True, text=True)
        if ran.returncode != 0:
            raise BadInput(f"nix/scripts/cuda-dist-info.py refused the cudaRedist distributions: {ran.stderr.strip()}")
        versions = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[site])}
    return {normalise(name): (entry["member"], versions[name]) for name, entry in wanted.items()}


class Environments:
    """One stack's environments: the lock's closure (pip), what the Nix closure installs (nix), the image (or None)."""

    def __init__(self, closure: Closure):
        self.closure = closure
        self.policy = read_json(closure.data / POLICY, "each stack's data directory says there where SGLang was tested")
        self.answered = answered(closure.policy)
        self.pip = {n: p["version"] for n, p in closure.packages.items()}
        self.nix, self.pinned, self.pinned_names = {}, {}, {}
        for name, version in self.pip.items():
            if closure.dropped(name):
                continue
            swap = closure.policy["cudaWheels"].get(name)
            if swap:
                pin = stacks.pins()[swap["pin"]]
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
                users = self.closure.dependents.get(name, set())
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
                    problems.append(f"{name} {row}: a difference without a reason in wheel-closure.json")
            rows[name] = row
        return rows, problems

    def _difference(self, name: str) -> tuple[str, str]:
        if name in self.answered:
            member, _ = self.answered[name]
            return "swapped", (f"cudaPackages_13_0.{member} is the library; the closure's metadata names its version "
                               "(nix/scripts/cuda-dist-info.py, nix/python-overrides.nix)")  # fmt: skip
        if name in self.pinned:
            return "pinned", self.pinned[name]
        why = self.closure.dropped(name)
        if why and name in self.pip and name not in self.nix:
            reason = self.closure.policy.get("metadata", {}).get("notAnswered", {}).get(name)
            return "dropped", why + (f"; not answered by metadata: {reason}" if reason else "")
        if self.image is not None and name in self.image_known and name not in self.image:
            return "absent from the image", f"only {self.policy['image']['replaces']} requires it in the lock"
        return "unexplained", ""

    def answer_problems(self) -> list[str]:
        """Every dropped nvidia-* distribution is answered by metadata or has a reason not to be; no reason names
        a distribution that is not dropped; no answer collides with a wheel the closure installs."""
        reasons = self.closure.policy.get("metadata", {}).get("notAnswered", {})
        dropped = {n for n in self.pip if n.startswith("nvidia-") and self.closure.dropped(n)}
        found = [f"{n} is dropped, neither answered by metadata nor given a reason in wheel-closure.json"
                 " metadata.notAnswered" for n in sorted(dropped - set(self.answered) - set(reasons))]  # fmt: skip
        found += [f"metadata.notAnswered names {n}, which the closure does not drop"
                  for n in sorted(set(reasons) - dropped) if not n.startswith("_")]  # fmt: skip
        kept = {n for n in self.nix if n not in self.answered}
        found += [f"{n} is answered by metadata and installed as a wheel too"
                  for n in sorted(set(self.answered) & kept)]  # fmt: skip
        return found


@functools.cache
def of(closure: Closure) -> Environments:
    """A closure's environments, made once."""
    return Environments(closure)
