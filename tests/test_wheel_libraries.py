"""Every shared library every wheel of the closure needs is accounted for, by data.

nix/stacks/sglang-0.5.9/wheel-libraries.json records, for each wheel of the Nix closure (the server and the
router host), the sonames
its ELF files provide and need (sglang_eagle3_audits/wheel_libraries.py read them from the
wheels; the three cu130 wheels through their closest PyPI build, named as a proxy).
nix/stacks/sglang-0.5.9/wheel-closure.json says where each kind of library comes from. These tests prove:

- the data describes the closure uv.lock pins (same packages, versions and wheels), and
  the closure uv2nix actually builds (evaluated through the flake);
- every needed soname is provided by the wheel itself, a cudaPackages_13_0 member, the
  manylinux set, torch's libraries, a named nixpkgs package, or the host driver at run time,
  or is ignored with a written reason, and every rule of the policy is used;
- the Nix overlay does what the data says, for every wheel (buildInputs, autoPatchelf's
  search path, ignored sonames, the driver's runpath).

Refresh the data after changing uv.lock or the pins: python -m sglang_eagle3_audits --write --only wheel-libraries
(it downloads every wheel of the closure, about 3 GB, from PyPI).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from conftest import REPO
from sglang_eagle3_audits import closure as audit
from support.flake_eval import Workspace, unavailable
from support.pins import stack_dir

DATA = json.loads((stack_dir("0.5.9") / "wheel-libraries.json").read_text())
POLICY = json.loads((stack_dir("0.5.9") / "wheel-closure.json").read_text())
PINS = json.loads((REPO / "nix" / "pins.json").read_text())
CUDA = {soname: member for member, sonames in DATA["cudaPackages_13_0"].items() for soname in sonames}
RULES = {pattern: kind for pattern, kind in POLICY["providers"].items() if not pattern.startswith("_")}
IGNORED = {name: sonames for name, sonames in POLICY["ignoreMissing"].items() if not name.startswith("_")}


def resolve(name: str, soname: str) -> tuple[str, str | None]:
    """(kind, attribute) the way nix/python-overrides.nix resolves a soname."""
    if soname in CUDA:
        return "cuda", CUDA[soname]
    for pattern, kind in RULES.items():
        if re.fullmatch(pattern, soname):
            return tuple(kind.split(":", 1)) if ":" in kind else (kind, None)  # nixpkgs:<attr>, package:<name>
    if soname in IGNORED.get(name, {}):
        return "ignore", None
    return "unresolved", None


def external_needs(record: dict) -> list[str]:
    return sorted(set(record["needs"]) - set(record["provides"]))


# -- the data matches the lock ---------------------------------------------------------------


def test_data_covers_the_closure_uv_lock_pins():
    lock = tomllib.loads((REPO / "python" / "uv.lock").read_text())
    environment = audit.marker_environment(POLICY["python"])
    closure, _ = audit.resolve_closure(lock, POLICY["root"]["package"], POLICY["root"]["extras"], environment)
    dropped = {name for name in closure if audit.dropped(name, POLICY)}
    assert dropped == set(DATA["dropped"])
    assert set(DATA["packages"]) <= set(closure) - dropped
    for name, record in DATA["packages"].items():
        package = closure[name]
        if name in POLICY["cudaWheels"]:
            pin = PINS[POLICY["cudaWheels"][name]["pin"]]
            assert (record["version"], record["wheel"]) == (pin["version"], pin["wheel"]), name
            if "proxy" in POLICY["cudaWheels"][name]:
                assert record["proxy"].startswith(audit.best_wheel(package, "cp312")["url"].rsplit("/", 1)[1])
            else:  # the pinned build itself was read (it is on PyPI): nothing stands in for it
                assert "proxy" not in record and "translated" not in record, name
        else:
            assert record["version"] == package["version"], name
            assert record["wheel"] == audit.best_wheel(package, "cp312")["url"].rsplit("/", 1)[1], name


def test_cuda_redistributables_are_read_from_the_pinned_cuda_13_wheels():
    members = {m for m in POLICY["cudaRedist"] if not m.startswith("_")}
    assert set(DATA["cudaPackages_13_0"]) == members
    assert all(re.fullmatch(r"(lib|nvshmem_)[\w.-]+\.so(\.[\d.]+)?", s) for s in CUDA), CUDA
    assert CUDA["libcudart.so.13"] == "cuda_cudart" and CUDA["libnvshmem_host.so.3"] == "libnvshmem"
    # A proxy's CUDA 12 sonames were translated: each CUDA library it needs is CUDA 13's soname.
    stems = {c.split(".so")[0] for c in CUDA}
    for name in [n for n, swap in POLICY["cudaWheels"].items() if "proxy" in swap]:
        record = DATA["packages"][name]
        cuda_needs = [s for s in record["needs"] if s.split(".so")[0] in stems]
        assert cuda_needs and all(s in CUDA for s in cuda_needs), (name, cuda_needs)


# -- every soname is accounted for ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DATA["packages"]))
def test_every_needed_soname_is_provided_or_ignored_with_a_reason(name):
    record = DATA["packages"][name]
    unresolved = [s for s in external_needs(record) if resolve(name, s)[0] == "unresolved"]
    assert unresolved == [], f"{name} needs {unresolved}: add providers to nix/stacks/sglang-0.5.9/wheel-closure.json"
    if any(resolve(name, s)[0] == "manylinux" for s in external_needs(record)):
        # uv2nix adds pythonManylinuxPackages (glibc, the C++ runtime) to manylinux wheels only.
        assert "manylinux" in record["wheel"] or "manylinux" in record.get("proxy", ""), record["wheel"]


def test_every_rule_of_the_policy_is_used():
    used = {
        (kind, attr) if kind != "ignore" else (name, soname)
        for name, record in DATA["packages"].items()
        for soname in external_needs(record)
        for kind, attr in [resolve(name, soname)]
    }
    for pattern, kind in RULES.items():
        key = tuple(kind.split(":", 1)) if ":" in kind else (kind, None)
        assert key in used or any(
            re.fullmatch(pattern, s) for r in DATA["packages"].values() for s in external_needs(r)
        ), f"provider rule {pattern} matches nothing"
    for name, sonames in IGNORED.items():
        for soname in sonames:
            assert soname != "_comment" and (name, soname) in used, f"ignoreMissing {name}/{soname} is not needed"
            assert len(sonames[soname]) > 40, f"ignoreMissing {name}/{soname} needs a reason"


# -- the Nix overlay carries the data out -----------------------------------------------------------

reason = unavailable()


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> dict:
    """For each audited package: what the evaluated uv2nix package set gives autoPatchelf."""
    if reason:
        pytest.skip(reason)
    ws = Workspace(tmp_path_factory.mktemp("flake"))
    names = " ".join(f'"{n}"' for n in DATA["packages"])
    expr = f"""
      let set = flake.packages.x86_64-linux.default.passthru.pythonSet;
          envs = flake.packages.x86_64-linux.default.passthru;
          deps = builtins.split ":" (envs.serverEnv.NIX_PYPROJECT_DEPS + ":" + envs.routerEnv.NIX_PYPROJECT_DEPS);
      in {{
        closure = builtins.filter builtins.isString deps;
        packages = builtins.listToAttrs (map (n: {{ name = n; value = let p = set.${{n}}; in {{
          out = p.outPath;
          buildInputs = map (d: d.name) p.buildInputs;
          nativeBuildInputs = map (d: d.name or "") p.nativeBuildInputs;
          ignore = p.autoPatchelfIgnoreMissingDeps or [ ];
          preFixup = p.preFixup or "";
          src = p.src.name or "";
        }}; }}) [ {names} ]);
        torchLib = "${{set.torch}}/${{set.python.sitePackages}}/torch/lib";
        site = set.python.sitePackages;
      }}
    """
    return ws.eval_expr(expr)


def test_uv2nix_builds_the_closure_the_data_describes(overlay):
    built = {re.sub(r"^/nix/store/[a-z0-9]{32}-", "", p) for p in overlay["closure"]}
    for name, record in DATA["packages"].items():
        assert f"{name}-{record['version']}" in built, f"{name} {record['version']} is not in the Nix closure"
    for name in DATA["dropped"]:
        assert not [b for b in built if b.startswith(f"{name}-") and re.match(rf"{re.escape(name)}-\d", b)], name


@pytest.mark.parametrize("name", sorted(DATA["packages"]))
def test_the_overlay_gives_autopatchelf_what_the_data_says(overlay, name):
    record, nix = DATA["packages"][name], overlay["packages"][name]
    needs = {s: resolve(name, s) for s in external_needs(record)}
    for soname, (kind, attr) in needs.items():
        if kind == "cuda":
            # buildInputs hold the lib-carrying output nixpkgs' getDev picks: cuda13.0-<member>-<version>[-dev]
            assert any(re.fullmatch(rf"cuda13\.0-{attr}-[\w.-]+", b) for b in nix["buildInputs"]), (soname, nix)
        elif kind == "nixpkgs":
            assert any(b.startswith(f"{attr}-") for b in nix["buildInputs"]), (soname, nix["buildInputs"])
        elif kind in ("driver", "ignore"):
            assert soname in nix["ignore"], (soname, nix["ignore"])
        elif kind == "torch" and name != "torch":
            assert f"addAutoPatchelfSearchPath {overlay['torchLib']}" in nix["preFixup"], nix["preFixup"]
        elif kind == "package":  # another wheel of the closure ships it (torch: cuDNN's)
            assert soname in DATA["packages"][attr]["provides"], (soname, attr)
            providing = f"{overlay['packages'][attr]['out']}/{overlay['site']}"
            assert f"addAutoPatchelfSearchPath {providing}" in nix["preFixup"], nix["preFixup"]
    driver = any(kind == "driver" for kind, _ in needs.values())
    assert ("auto-add-driver-runpath-hook" in nix["nativeBuildInputs"]) == driver
    assert "auto-patchelf-hook" in nix["nativeBuildInputs"], "uv2nix patches every wheel"
    if name in POLICY["cudaWheels"]:
        assert nix["src"] == PINS[POLICY["cudaWheels"][name]["pin"]]["wheel"]


# -- the SGLang 0.5.23 stack (nix/stacks/sglang-0.5.23), with the same rules ------------------

NEWEST_DIR = stack_dir("0.5.23")
NEWEST = json.loads((NEWEST_DIR / "wheel-libraries.json").read_text())
NEWEST_POLICY = json.loads((NEWEST_DIR / "wheel-closure.json").read_text())


def resolve_in(data: dict, policy: dict, name: str, soname: str) -> tuple[str, str | None]:
    """resolve() for another stack's data and policy (nix/python-overrides.nix, `package:` included)."""
    cuda = {s: m for m, sonames in data["cudaPackages_13_0"].items() for s in sonames}
    if soname in cuda:
        return "cuda", cuda[soname]
    for pattern, kind in policy["providers"].items():
        if not pattern.startswith("_") and re.fullmatch(pattern, soname):
            return tuple(kind.split(":", 1)) if ":" in kind else (kind, None)
    if soname in policy["ignoreMissing"].get(name, {}):
        return "ignore", None
    return "unresolved", None


def test_0_5_23_data_covers_the_closure_its_uv_lock_pins():
    lock = tomllib.loads((NEWEST_DIR / "uv.lock").read_text())
    environment = audit.marker_environment(NEWEST_POLICY["python"])
    root = NEWEST_POLICY["root"]
    closure, _ = audit.resolve_closure(lock, root["package"], root["extras"], environment)
    assert {n for n in closure if audit.dropped(n, NEWEST_POLICY)} == set(NEWEST["dropped"])
    assert NEWEST_POLICY["cudaWheels"] == {}, "PyPI's torch 2.14.1 is the CUDA 13 build: nothing is swapped"
    for name, record in NEWEST["packages"].items():
        assert record["version"] == closure[name]["version"], name
        assert record["wheel"] == audit.best_wheel(closure[name], "cp312")["url"].rsplit("/", 1)[1], name
    # torch 2.14.1 links CUDA 13's libraries itself (no translation, as for 0.5.9's proxies).
    assert {"libcudart.so.13", "libcublas.so.13", "libnccl.so.2"} <= set(NEWEST["packages"]["torch"]["needs"])
    assert "sglang" in NEWEST["packages"], "SGLang 0.5.23's wheel has ELF files of its own"
    assert NEWEST["cudaPackages_13_0"] == DATA["cudaPackages_13_0"], "one nixpkgs CUDA set for both stacks"


@pytest.mark.parametrize("name", sorted(NEWEST["packages"]))
def test_0_5_23_every_needed_soname_is_provided_or_ignored_with_a_reason(name):
    record = NEWEST["packages"][name]
    kinds = {s: resolve_in(NEWEST, NEWEST_POLICY, name, s) for s in external_needs(record)}
    assert [s for s, (kind, _) in kinds.items() if kind == "unresolved"] == [], name
    for soname, (kind, attr) in kinds.items():
        if kind == "package":  # another wheel of the closure ships it
            assert soname in NEWEST["packages"][attr]["provides"], (soname, attr)
        if kind == "ignore":
            assert len(NEWEST_POLICY["ignoreMissing"][name][soname]) > 40


def test_0_5_23_overlay_adds_the_providing_wheels_to_autopatchelfs_search_path(tmp_path_factory):
    if reason:
        pytest.skip(reason)
    ws = Workspace(tmp_path_factory.mktemp("flake"))
    set_ = "flake.packages.x86_64-linux.sglang-eagle3-0_5_23.passthru.pythonSet"
    got = ws.eval_expr(f"let s = {set_}; in {{ tilelang = s.tilelang.preFixup; tvm = s.apache-tvm-ffi.outPath; "
                       f"z3 = s.z3-solver.outPath; site = s.python.sitePackages; "
                       f"numba = s.numba.autoPatchelfIgnoreMissingDeps; }}")  # fmt: skip
    assert f"addAutoPatchelfSearchPath {got['tvm']}/{got['site']}" in got["tilelang"]
    assert f"addAutoPatchelfSearchPath {got['z3']}/{got['site']}" in got["tilelang"]
    assert {"libgomp.so.1.0.0", "libtbb.so.12"} <= set(got["numba"])


# -- cuDNN: the closure's is one its torch and its SGLang start with ---------------------------------


def sglang_cudnn_floor(tree: Path) -> tuple[int, int]:
    """The oldest cuDNN SGLang 0.5.9 starts a multimodal model with on torch 2.9.1: the bound of its own
    check_torch_2_9_1_cudnn_compatibility (srt/server_args.py), read from the source, not restated."""
    source = (tree / "sglang" / "srt" / "server_args.py").read_text()
    body = source[source.index("def check_torch_2_9_1_cudnn_compatibility") :]
    major, minor = re.search(r"version_float < (\d+)\.(\d+)", body).groups()
    return int(major), int(minor)


@pytest.mark.parametrize(
    "stack, attr, package",
    [("0.5.9", "default", "nvidia-cudnn-cu12"), ("0.5.23", "sglang-eagle3-0_5_23", "nvidia-cudnn-cu13")],
)
def test_the_closures_cudnn_is_one_its_torch_and_sglang_start_with(stack, attr, package, pristine_tree,
                                                                   tmp_path_factory):  # fmt: skip
    """nixpkgs' cudaPackages_13_0.cudnn is 9.13.0: SGLang 0.5.9 refuses it for Kimi-K2.5 on torch 2.9.1 (< 9.15),
    and torch 2.14.1 requires 9.24. Each closure's cuDNN is the wheel the stack's data names, linked into torch."""
    if reason:
        pytest.skip(reason)
    data, policy = (DATA, POLICY) if stack == "0.5.9" else (NEWEST, NEWEST_POLICY)
    ws = Workspace(tmp_path_factory.mktemp("flake"))
    got = ws.eval_expr(f"""
      let s = flake.packages.x86_64-linux.{attr}.passthru.pythonSet; in {{
        version = s.{package}.version;
        src = s.{package}.src.name;
        out = s.{package}.outPath;
        site = s.python.sitePackages;
        torchFixup = s.torch.preFixup;
        torchInputs = map (d: d.name) s.torch.buildInputs;
        torchDeps = builtins.attrNames s.torch.passthru.dependencies;
      }}
    """)
    assert got["version"] == data["packages"][package]["version"]
    assert got["src"] == data["packages"][package]["wheel"] and "cu13" in got["src"], got["src"]
    # torch links the wheel's libraries (autoPatchelf searches it), not nixpkgs' cuDNN, and depends on it.
    assert f"addAutoPatchelfSearchPath {got['out']}/{got['site']}" in got["torchFixup"]
    assert not [b for b in got["torchInputs"] if "cudnn" in b and "frontend" not in b], got["torchInputs"]
    assert package in got["torchDeps"]
    assert "cudnn" not in data["cudaPackages_13_0"] and "cudnn" not in policy["cudaRedist"]
    version = tuple(int(p) for p in got["version"].split(".")[:2])
    assert version >= sglang_cudnn_floor(pristine_tree), got["version"]
    if stack == "0.5.23":  # torch 2.14.1's own requirement: the lock's nvidia-cudnn-cu13
        lock = tomllib.loads((NEWEST_DIR / "uv.lock").read_text())
        (locked,) = [p["version"] for p in lock["package"] if p["name"] == "nvidia-cudnn-cu13"]
        assert got["version"] == locked
