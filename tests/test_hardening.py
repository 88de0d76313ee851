"""modules/hardening.nix: the one systemd sandbox of every unit, and what each unit does to it.

Each unit (the server, the benchmark, the models unit, the router) is rendered through the
module harness (tests/nix/module-harness.nix) and its sandbox keys are compared with the
layers of modules/hardening.nix, evaluated here: the expectations come from that file, so
this test does not restate them. Each unit's `systemd-analyze security --offline` exposure
is printed and compared.
"""

from __future__ import annotations

import re
import shutil

import pytest
from conftest import REPO
from support.nix_harness import evaluate_module, needs_lib, nix_eval, verify_unit

HARDENING = REPO / "modules" / "hardening.nix"
LOCKS = REPO / "nix" / "tests"
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")

# The hosts the units are rendered in: the examples, and one with its weights pinned by locks.
GPU_HOST = str(REPO / "modules" / "examples" / "8-gpu-host.nix")
PINNED_HOST = f"""{{
  services.sglang-eagle3.enable = true;
  services.sglang-eagle3.models = {{
    target.lockFile = {LOCKS / "example-target.lock.json"};
    draft.lockFile = {LOCKS / "example-draft.lock.json"};
    tokenFile = "/run/secrets/hf-token";
  }};
}}"""
ROUTER_HOST = f"(import {REPO / 'modules' / 'examples' / 'cluster.nix'} {{ }}).router"

# unit -> (host, the layers of hardening.nix it is built from, in order; base first).
UNITS = {
    "sglang-eagle3": (GPU_HOST, ["base", "cuda", "gpu"]),
    "sglang-eagle3-bench": (GPU_HOST, ["base", "cuda"]),
    "sglang-eagle3-models": (PINNED_HOST, ["base", "cuda"]),
    "sglang-router": (ROUTER_HOST, ["base", "router"]),
}
# The router's exposure before the sandbox was shared (commit 3e9b96b): it must not grow.
ROUTER_EXPOSURE_BEFORE = 1.1


def syscall_groups(system_call_filter: list[str]) -> tuple[set[str], set[str]]:
    """SystemCallFilter= lines as (allowed groups, denied groups)."""
    allowed = {g for line in system_call_filter if not line.startswith("~") for g in line.split()}
    denied = {g for line in system_call_filter if line.startswith("~") for g in line[1:].split()}
    return allowed, denied


@pytest.fixture(scope="module")
def layers() -> dict:
    return nix_eval(f"import {HARDENING}")


@pytest.fixture(scope="module")
def rendered() -> dict:
    hosts = {host: evaluate_module(host) for host, _ in UNITS.values()}
    for out in hosts.values():
        assert out["failedAssertions"] == []
    return {name: hosts[host] for name, (host, _) in UNITS.items()}


@needs_lib
@pytest.mark.parametrize("unit", UNITS)
def test_each_unit_is_the_shared_base_with_its_layers(unit, layers, rendered):
    expected = {}
    for layer in UNITS[unit][1]:
        expected |= layers[layer]
    sc = rendered[unit]["services"][unit]["serviceConfig"]
    # Every key any layer sets: the unit has exactly the value its layers give, or none.
    for key in set().union(*layers.values()):
        assert sc.get(key) == expected.get(key), (
            f"{unit}: {key} = {sc.get(key)!r}, hardening.nix gives {expected.get(key)!r}"
        )


@needs_lib
def test_the_layers_relax_or_tighten_only_what_they_say(layers):
    base = layers["base"]
    # Where base restricts address families, the CUDA units add to them (netlink) and drop none.
    assert set(base["RestrictAddressFamilies"]) < set(layers["cuda"]["RestrictAddressFamilies"])
    # The router keeps base's devices, address families and /proc view, and adds a W^X rule
    # and a refused system call group.
    assert not set(layers["router"]) & {"PrivateDevices", "DeviceAllow", "RestrictAddressFamilies", "ProcSubset"}
    assert layers["router"]["MemoryDenyWriteExecute"] is True and "MemoryDenyWriteExecute" not in base
    allowed, denied = syscall_groups(layers["router"]["SystemCallFilter"])
    base_allowed, base_denied = syscall_groups(base["SystemCallFilter"])
    assert allowed == base_allowed and denied > base_denied
    # The CUDA units allow more system calls than base and deny none that base allows.
    cuda_allowed, cuda_denied = syscall_groups(layers["cuda"]["SystemCallFilter"])
    assert cuda_allowed > base_allowed and cuda_denied == base_denied
    # The server alone sees devices: base's closed device policy, with NVIDIA's devices allowed.
    assert (
        layers["gpu"]["PrivateDevices"] is False and base["DevicePolicy"] == "closed" and layers["gpu"]["DeviceAllow"]
    )


def test_every_relaxation_and_tightening_says_why():
    """Each key of a layer other than base is preceded by a comment line (its reason)."""
    text = HARDENING.read_text()
    layer_bodies = re.findall(r"^  (\w+) = \{\n(.*?)^  \};", text, re.MULTILINE | re.DOTALL)
    assert {name for name, _ in layer_bodies} == {"base", "cuda", "gpu", "router"}
    for name, body in layer_bodies:
        if name == "base":
            continue
        lines = body.splitlines()
        for i, line in enumerate(lines):
            key = re.match(r"^    (\w+) =", line)
            if key:
                assert i > 0 and lines[i - 1].strip().startswith("#"), f"{name}.{key.group(1)} has no reason above it"


@needs_lib
@needs_systemd
def test_exposures_follow_the_layers(rendered, tmp_path):
    exe = tmp_path / "exe"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    exposure = {
        unit: verify_unit(rendered[unit]["units"][f"{unit}.service"], f"{unit}.service", tmp_path, exe)
        for unit in UNITS
    }
    print(f"\nexposure: {exposure}")
    # Tighter layers, no more exposure: router <= bench = models (base // cuda) <= server (+ gpu).
    assert exposure["sglang-router"] <= exposure["sglang-eagle3-bench"] <= exposure["sglang-eagle3"]
    assert exposure["sglang-eagle3-models"] == exposure["sglang-eagle3-bench"]
    assert exposure["sglang-router"] <= ROUTER_EXPOSURE_BEFORE
