"""Everything the server's Python code looks up at run time is accounted for, by data.

nix/runtime-lookups.json lists, for the wheels nix/runtime-lookup-policy.json names, every
program, library, fixed path and toolchain variable their Python sources look up
(nix/scripts/audit-runtime-lookups.py reads them with ast). These tests prove:

- the data is what the real wheels of python/uv.lock hold (downloaded into the test cache,
  sha256 checked; torch through its PyPI build, named as a proxy in the policy);
- every lookup is provided by an entry of nix/runtime-env.json (the shared entries plus the
  stack's own, "stacks") or is not needed, with a reason, and every rule and reason of the
  policy is used; for both stacks;
- the check fails when an entry or a disposition is removed, and when a wheel adds a lookup.

Refresh the data after changing uv.lock: python nix/scripts/audit-runtime-lookups.py
"""

from __future__ import annotations

import copy
import importlib.util
import json
import tomllib

import pytest
from conftest import CACHE, REPO

DATA = json.loads((REPO / "nix" / "runtime-lookups.json").read_text())
POLICY = json.loads((REPO / "nix" / "runtime-lookup-policy.json").read_text())
SHARED_ENV = json.loads((REPO / "nix" / "runtime-env.json").read_text())


def generator():
    spec = importlib.util.spec_from_file_location("audit", REPO / "nix" / "scripts" / "audit-runtime-lookups.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


audit = generator()
ENV = audit.stack_env(SHARED_ENV)  # the default stack's view (0.5.9)


# -- the data is what the wheels hold -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POLICY["packages"]))
def test_data_matches_the_real_wheel(name):
    lock = tomllib.loads((REPO / "python" / "uv.lock").read_text())
    package = next(p for p in lock["package"] if p["name"] == name)
    wheel = audit.wheel_audit().best_wheel(package, "cp312")
    path = audit.wheel_audit().download(wheel["url"], wheel["hash"].removeprefix("sha256:"), CACHE)
    record = DATA["packages"][name]
    assert (record["version"], record["wheel"]) == (package["version"], path.name)
    assert record["lookups"] == audit.scan(audit.python_sources(path)), f"run {audit.__file__}"


def test_the_known_lookups_are_found():
    """The findings of issue 17 are in the data, so the scanner sees the lookups that matter."""
    lookups = {f"{p} {k}" for p, r in DATA["packages"].items() for k in r["lookups"]}
    assert {
        "sglang program nvidia-smi",
        "triton program /sbin/ldconfig",
        "triton env TRITON_LIBCUDA_PATH",
        "triton env CC",
        "flashinfer-python program ninja",
        "flashinfer-python path -L$cuda_home/lib64",
        "nvidia-ml-py library libnvidia-ml.so.1",
    } <= lookups


# -- every lookup is accounted for --------------------------------------------------------------


def test_every_lookup_is_provided_or_not_needed():
    assert audit.problems(DATA, POLICY, ENV) == []


def test_dispositions_name_the_real_environment():
    provided = set(POLICY["provided"].values())
    assert {"programs.nvidia-smi", "environment.TRITON_LIBCUDA_PATH", "paths.lib64"} <= provided
    for version in [None, *(v for v in SHARED_ENV["stacks"] if not v.startswith("_"))]:
        env = audit.stack_env(SHARED_ENV, version)
        for section in audit.SECTIONS:
            for name, entry in env[section].items():
                assert len(entry["why"]) > 40, f"nix/runtime-env.json {section}.{name} needs a why"


def test_removing_an_environment_entry_fails_the_check():
    env = copy.deepcopy(ENV)
    del env["programs"]["nvidia-smi"]
    assert "sglang program nvidia-smi: provided by programs.nvidia-smi, which nix/runtime-env.json lacks" in (
        audit.problems(DATA, POLICY, env)
    )


def test_removing_a_disposition_fails_the_check():
    policy = copy.deepcopy(POLICY)
    del policy["notNeeded"]["triton program gcc"]
    assert [p for p in audit.problems(DATA, policy, ENV) if p.startswith("triton program gcc ")] == [
        "triton program gcc (triton/runtime/build.py:28): no disposition"
    ]


def test_a_short_reason_an_unused_rule_and_a_stale_disposition_fail_the_check():
    policy = copy.deepcopy(POLICY)
    policy["notNeeded"]["triton program gcc"] = "not needed"
    policy["rules"]["nowhere/*"] = "tests"
    policy["provided"]["triton program make"] = "programs.cc"
    found = audit.problems(DATA, policy, ENV)
    assert "reason too short to show why: 'not needed'" in found
    assert "rule nowhere/* disposes of no lookup" in found
    assert "triton program make: disposition of a lookup the wheels no longer make" in found


# -- a new lookup is reported ---------------------------------------------------------------------

FAKE_MODULE = """
import ctypes
import os
import subprocess as sp
from shutil import which


def build():
    command = ["frobnicate", "--all"]
    sp.run(command)
    which("nvcc")
    ctypes.CDLL("libfoo.so.1")
    return os.environ.get("FOO_HOME"), os.environ.get("SGLANG_ENABLE_THING"), "/usr/local/foo"


def flags():
    return os.getenv("CUDA_HOME"), os.getenv("BAR_HOME")
"""


def test_the_scanner_finds_each_kind_of_lookup(tmp_path):
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "build.py").write_text(FAKE_MODULE)
    sources = [(str(p.relative_to(tmp_path)), p.read_text()) for p in tmp_path.rglob("*.py")]
    assert set(audit.scan(sources)) == {
        "program frobnicate",  # a list literal assigned to a name, through an import alias
        "program nvcc",
        "library libfoo.so.1",
        "env FOO_HOME",  # ends in HOME, read where a lookup is made
        "env CUDA_HOME",  # a toolchain name, read anywhere
        "path /usr/local/foo",
    }  # SGLANG_ENABLE_THING is a feature flag; BAR_HOME is read where nothing is looked up


def test_a_new_lookup_in_a_wheel_is_reported_undispositioned(tmp_path):
    data = copy.deepcopy(DATA)
    data["packages"]["triton"]["lookups"].update(audit.scan([("triton/new.py", FAKE_MODULE)]))
    found = audit.problems(data, POLICY, ENV)
    assert "triton program frobnicate (triton/new.py:10): no disposition" in found
    assert "triton library libfoo.so.1 (triton/new.py:12): no disposition" in found


# -- the SGLang 0.5.23 stack (nix/stacks/sglang-0.5.23) -----------------------------------------

NEWEST_DIR = REPO / "nix" / "stacks" / "sglang-0.5.23"
NEWEST = json.loads((NEWEST_DIR / "runtime-lookups.json").read_text())
NEWEST_POLICY = json.loads((NEWEST_DIR / "runtime-lookup-policy.json").read_text())


@pytest.mark.parametrize("name", sorted(NEWEST_POLICY["packages"]))
def test_0_5_23_data_matches_the_real_wheel(name):
    lock = tomllib.loads((NEWEST_DIR / "uv.lock").read_text())
    package = next(p for p in lock["package"] if p["name"] == name)
    wheel = audit.wheel_audit().best_wheel(package, "cp312")
    path = audit.wheel_audit().download(wheel["url"], wheel["hash"].removeprefix("sha256:"), CACHE)
    record = NEWEST["packages"][name]
    assert (record["version"], record["wheel"]) == (package["version"], path.name)
    assert record["lookups"] == audit.scan(audit.python_sources(path)), f"run {audit.__file__} --stack 0.5.23"


def test_0_5_23_lookups_new_since_0_5_9_are_found():
    lookups = {f"{p} {k}" for p, r in NEWEST["packages"].items() for k in r["lookups"]}
    assert {
        "sglang program nvcc",  # SGLang's own JIT kernels (sglang/kernels/jit)
        "sglang program ninja",
        "sglang program cargo",  # srt/rust_extensions/loader.py
        "triton program g++",  # triton/runtime/build.py, beside CC
        "sglang-kernel program nvcc",
    } <= lookups


NEWEST_ENV = audit.stack_env(SHARED_ENV, "0.5.23")


def test_0_5_23_every_lookup_is_provided_or_not_needed():
    found = audit.problems(NEWEST, NEWEST_POLICY, NEWEST_ENV)
    assert found == [], f"{len(found)} not accounted for:\n" + "\n".join(found)


def test_0_5_23_dispositions_of_the_lookups_that_matter():
    """SGLang 0.5.23's own JIT is provided like FlashInfer's; cargo is not run (the wheel bundles
    its Rust extensions); numactl is provided, by this stack's own entry."""

    def answer(package, key):
        return audit.disposition(package, key, NEWEST["packages"][package]["lookups"][key], NEWEST_POLICY)

    assert answer("sglang", "program ninja") == ("provided", "programs.ninja")
    assert answer("sglang", "env CXX") == ("provided", "environment.CXX")
    assert answer("sglang", "env CUDA_HOME") == ("provided", "environment.CUDA_HOME")
    assert answer("triton", "env CXX") == ("provided", "environment.CXX")
    assert answer("sglang", "program numactl") == ("provided", "programs.numactl")
    kind, reason = answer("sglang", "program cargo")
    assert kind == "notNeeded" and "srt/rust_extensions/loader.py:116-121" in reason


def test_a_stacks_own_entry_is_seen_by_that_stack_only():
    assert "numactl" in NEWEST_ENV["programs"] and "numactl" not in ENV["programs"]
    assert "numactl" not in SHARED_ENV["programs"], "defined once, under stacks.0.5.23"
    found = audit.problems(NEWEST, NEWEST_POLICY, ENV)  # 0.5.23's lookups against 0.5.9's environment
    assert "sglang program numactl: provided by programs.numactl, which nix/runtime-env.json lacks" in found
    pins = json.loads((REPO / "nix" / "pins.json").read_text())
    assert set(SHARED_ENV["stacks"]) - {"_comment"} <= set(pins["stacks"]), "stacks are nix/pins.json's"


def test_an_addition_that_redefines_a_shared_entry_is_refused():
    env = copy.deepcopy(SHARED_ENV)
    env["stacks"]["0.5.23"]["programs"]["ninja"] = {"from": "nixpkgs:ninja", "why": "a second definition"}
    with pytest.raises(SystemExit, match=r"stacks\.0\.5\.23\.programs\.ninja: already defined for every stack"):
        audit.stack_env(env, "0.5.23")


def test_removing_a_0_5_23_disposition_fails_the_check():
    policy = copy.deepcopy(NEWEST_POLICY)
    del policy["notNeeded"]["sglang program cargo"]
    assert [p for p in audit.problems(NEWEST, policy, NEWEST_ENV) if p.startswith("sglang program cargo ")] == [
        "sglang program cargo (sglang/srt/rust_extensions/loader.py:418): no disposition"
    ]
