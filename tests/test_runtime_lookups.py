"""Everything the server's code looks up at run time is accounted for, by data.

nix/stacks/sglang-0.5.9/runtime-lookups.json lists, for every wheel of the server closure of python/uv.lock
(resolved from the lock as nix/stacks/sglang-0.5.9/wheel-closure.json says, not from a list), every program,
library, fixed path, toolchain and cache variable its Python code, its Cython sources and
its compiled Cython modules look up (sglang_eagle3_audits/runtime_lookups.py). These tests prove,
for both stacks:

- the data scans exactly the closure the lock pins (a wheel of the closure that is not scanned
  fails), and each wheel's record is what the real wheel holds (downloaded into the test cache,
  sha256 checked; a scan is kept in the audits' cache under the wheel's sha256 and the scanner's code);
- every lookup is provided by an entry of nix/runtime-env.json (the shared entries plus the
  stack's own, "stacks") or is not needed, with a reason; a reason that holds because of an
  entry names it ("relies") and fails when the entry is gone, even with every mapping to it
  removed too; every rule and reason of the policy is used;
- the scanner finds each kind of lookup: in Python, in Cython sources, in a compiled module's
  strings (a real shared object built here), in a shell script held in a string;
- what a reason rests on: no wheel of either closure ships a CUDA library torch's import-time
  preload would pick up from site-packages.

Refresh the data after changing a uv.lock: python -m sglang_eagle3_audits --write --only runtime-lookups
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import re
import shutil
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
from conftest import CACHE, REPO
from sglang_eagle3 import stacks
from sglang_eagle3.errors import BadInput
from sglang_eagle3_audits import lookup_scan, lookups, lookups_cython
from sglang_eagle3_audits import runtime_lookups as audit
from sglang_eagle3_audits.closure import Closure, Contents
from support.scripts import load_script

SHARED_ENV = json.loads((REPO / "nix" / "runtime-env.json").read_text())
REFRESH = "run python -m sglang_eagle3_audits --write --only runtime-lookups --stack"

STACKS = list(stacks.versions())
CLOSURES = {v: Closure(stacks.stacks()[v], CACHE) for v in STACKS}
DATA = {v: json.loads((c.data / audit.AUDIT.data).read_text()) for v, c in CLOSURES.items()}
POLICY = {v: json.loads((c.data / audit.AUDIT.policy).read_text()) for v, c in CLOSURES.items()}
ENV = {v: audit.stack_env(SHARED_ENV, v) for v in STACKS}
CLOSURE = {v: c.server for v, c in CLOSURES.items()}


def wheel_path(version: str, name: str) -> Path:
    """The wheel of ``name`` in the stack's server closure (downloaded into the test cache, sha256 checked)."""
    return CLOSURES[version].wheel(CLOSURE[version][name]["package"])


# -- the data is the closure, as the real wheels hold it -------------------------------------------


@pytest.mark.parametrize("version", STACKS)
def test_the_data_scans_every_wheel_of_the_server_closure(version):
    closure = CLOSURE[version]
    assert audit.coverage(DATA[version], closure) == []
    assert len(closure) > 150, "the whole closure, not a hand list"
    assert {"nvidia-cutlass-dsl", "xgrammar", "torch-memory-saver", "quack-kernels", "cuda-bindings"} <= set(closure)


def test_a_wheel_of_the_closure_left_unscanned_fails():
    data = copy.deepcopy(DATA["0.5.9"])
    del data["packages"]["nvidia-cutlass-dsl"]
    data["packages"]["xgrammar"]["version"] = "0.0.1"
    assert audit.coverage(data, CLOSURE["0.5.9"]) == [
        "nvidia-cutlass-dsl 4.3.5: a wheel of the server closure the data does not scan",
        "xgrammar: scanned at 0.0.1, the lock pins 0.1.27",
    ]


@pytest.mark.parametrize(
    ("version", "name"), [(v, n) for v in STACKS for n in sorted(DATA[v]["packages"])], ids=lambda x: x
)
def test_data_matches_the_real_wheel(version, name):
    path = wheel_path(version, name)
    record = DATA[version]["packages"][name]
    assert (record["version"], record["wheel"]) == (CLOSURE[version][name]["package"]["version"], path.name)
    assert record.get("proxy") == CLOSURE[version][name]["proxy"]
    fresh = CLOSURES[version].scanned(lookup_scan.SCANNER, path)  # kept in the test cache, by the scanner's code
    assert record["lookups"] == fresh["lookups"], f"{REFRESH} {version}"
    assert record.get("unresolved", {}) == fresh["unresolved"], f"{REFRESH} {version}"


def test_the_known_lookups_are_found():
    """Issue 17's and issue 27's findings are in the data: the scanner sees the lookups that matter."""
    found = {v: {f"{p} {k}" for p, r in DATA[v]["packages"].items() for k in r["lookups"]} for v in STACKS}
    assert {
        "sglang program nvidia-smi",
        "triton program /sbin/ldconfig",
        "triton env TRITON_LIBCUDA_PATH",
        "triton env CC",
        "flashinfer-python program ninja",
        "flashinfer-python path -L$cuda_home/lib64",
        "nvidia-ml-py library libnvidia-ml.so.1",
        # issue 27: wheels that were not scanned, Cython, a script, the caches
        "nvidia-cutlass-dsl env CUDA_HOME",  # base_dsl/env_manager.py:183
        "nvidia-cutlass-dsl program nvcc",
        "nvidia-cutlass-dsl path /usr/local/cuda*",
        "nvidia-cutlass-dsl library <dynamic> path",  # cute/runtime.py:923
        "xgrammar program nvcc",  # kernels/apply_token_bitmask_inplace_cuda.py:36
        "torch-memory-saver library <dynamic> path_binary",  # binary_wrapper.py:10
        "cuda-bindings library cuda.pathfinder:cuda",  # _internal/driver_linux.pyx:3501
        "cuda-bindings library cuda.pathfinder:nvrtc",  # _internal/nvrtc_linux.pyx:368
        "sglang program numactl",  # srt/utils/numa_utils.py:32, in a shell script
        "triton env TRITON_CACHE_DIR",
        "flashinfer-python env FLASHINFER_WORKSPACE_BASE",
        "apache-tvm-ffi env TVM_FFI_CACHE_DIR",
        "torch env TORCH_EXTENSIONS_DIR",
        "huggingface-hub env HF_HOME",
    } <= found["0.5.9"]
    assert {
        "sglang program nvcc",  # SGLang's own JIT kernels (sglang/kernels/jit)
        "sglang program numactl",
        "triton program g++",
        "nvidia-cutlass-dsl-libs-core env CUDA_HOME",
        # cuda-bindings 13 ships no .pyx: read from the compiled module's strings
        "cuda-bindings library <compiled cuda.bindings._internal.nvrtc> cuda.pathfinder.load_nvidia_dynamic_lib",
        "cuda-bindings library <compiled cuda.bindings._internal.driver> cuda.pathfinder.load_nvidia_dynamic_lib",
        "quack-kernels env QUACK_CACHE_DIR",
    } <= found["0.5.23"]
    locations = DATA["0.5.9"]["packages"]["cuda-bindings"]["lookups"]["library cuda.pathfinder:nvrtc"]["locations"]
    assert "cuda/bindings/_internal/nvrtc_linux.pyx:368" in locations


# -- every lookup is accounted for ------------------------------------------------------------------


@pytest.mark.parametrize("version", STACKS)
def test_every_lookup_is_provided_or_not_needed(version):
    found = audit.problems(DATA[version], POLICY[version], ENV[version])
    assert found == [], f"{len(found)} not accounted for:\n" + "\n".join(found)


def answer(version, package, key):
    return audit.disposition(package, key, DATA[version]["packages"][package]["lookups"][key], POLICY[version])


def test_dispositions_of_the_lookups_that_matter():
    assert answer("0.5.9", "sglang", "program numactl") == ("provided", "programs.numactl")
    assert answer("0.5.9", "triton", "env TRITON_CACHE_DIR") == ("provided", "caches.TRITON_CACHE_DIR")
    assert answer("0.5.9", "xgrammar", "program nvcc") == ("provided", "programs.nvcc")
    assert answer("0.5.9", "nvidia-cutlass-dsl", "env CUDA_HOME") == ("provided", "environment.CUDA_HOME")
    kind, reason = answer("0.5.9", "cuda-bindings", "library cuda.pathfinder:nvrtc")
    assert kind == "notNeeded" and "libnvrtc.so.13" in reason and "CUDA 12.9" in reason
    kind, reason = answer("0.5.9", "torch", "library <dynamic> lib_path")
    assert kind == "notNeeded" and "_preload_cuda_deps" in reason, "torch/__init__.py:319 is not torch's own file"
    kind, reason = answer("0.5.9", "apache-tvm-ffi", "env TVM_FFI_CUDA_ARCH_LIST")
    assert kind == "notNeeded" and "set by SGLang itself" in reason and "jit_kernel/utils.py" in reason
    assert "tvm_ffi/utils/*" not in POLICY["0.5.9"]["rules"], "tvm-ffi's builder runs on the serving path"
    kind, reason = answer("0.5.9", "apache-tvm-ffi", "program <dynamic> cxx")
    assert kind == "notNeeded" and "_build_optional_torch_c_dlpack.py" in reason
    assert answer("0.5.23", "sglang", "program ninja") == ("provided", "programs.ninja")
    assert answer("0.5.23", "sglang", "program numactl") == ("provided", "programs.numactl")
    kind, reason = answer("0.5.23", "sglang", "program cargo")
    assert kind == "notNeeded" and "srt/rust_extensions/loader.py:116-121" in reason


@pytest.mark.parametrize("version", STACKS)
def test_the_environment_entries_say_why(version):
    for section in audit.SECTIONS:
        for name, entry in ENV[version][section].items():
            assert len(entry["why"]) > 40, f"nix/runtime-env.json {section}.{name} needs a why"


def test_removing_an_environment_entry_fails_the_check():
    env = copy.deepcopy(ENV["0.5.9"])
    del env["programs"]["nvidia-smi"]
    assert "sglang program nvidia-smi: provided by programs.nvidia-smi, which nix/runtime-env.json lacks" in (
        audit.problems(DATA["0.5.9"], POLICY["0.5.9"], env)
    )


@pytest.mark.parametrize(
    ("section", "name"),
    [
        ("environment", "CUDA_HOME"),
        ("environment", "TRITON_LIBCUDA_PATH"),
        ("environment", "CC"),
        ("paths", "/run/opengl-driver/lib"),
        ("caches", "HOME"),
    ],
)
def test_a_conditional_reason_fails_when_its_entry_goes_even_with_its_mappings(section, name):
    """'only when CUDA_HOME is unset' holds because the environment sets it: removing the entry and
    every provided mapping to it still fails, through the reasons that rely on it."""
    for version in STACKS:
        env, policy = copy.deepcopy(ENV[version]), copy.deepcopy(POLICY[version])
        del env[section][name]
        policy["provided"] = {k: v for k, v in policy["provided"].items() if v != f"{section}.{name}"}
        found = [p for p in audit.problems(DATA[version], policy, env) if "no disposition" not in p]
        assert any(f"relies on {section}.{name}, which nix/runtime-env.json lacks" in p for p in found), version


def test_a_reason_that_names_an_entry_must_rely_on_it():
    policy = copy.deepcopy(POLICY["0.5.9"])
    policy["reasons"]["cuda-home-set"] = policy["reasons"]["cuda-home-set"]["why"]  # its "relies" dropped
    found = audit.problems(DATA["0.5.9"], policy, ENV["0.5.9"])
    assert any(p.startswith('reason names environment.CUDA_HOME without relying on it (add "relies"') for p in found)
    assert audit.names_entry("Triton's fallback when CC is unset", "environment.CC")
    assert not audit.names_entry("the $CUDA_HOME/bin directory, a gcc", "environment.CC")


def test_removing_a_disposition_fails_the_check():
    policy = copy.deepcopy(POLICY["0.5.9"])
    del policy["notNeeded"]["triton program gcc"]
    assert [p for p in audit.problems(DATA["0.5.9"], policy, ENV["0.5.9"]) if p.startswith("triton program gcc ")] == [
        "triton program gcc (triton/runtime/build.py:28): no disposition"
    ]
    policy = copy.deepcopy(POLICY["0.5.23"])
    del policy["notNeeded"]["sglang program cargo"]
    assert [
        p for p in audit.problems(DATA["0.5.23"], policy, ENV["0.5.23"]) if p.startswith("sglang program cargo ")
    ] == ["sglang program cargo (sglang/srt/mem_cache/unified_cache/tree_core_registry.py:96): no disposition"]


def test_a_short_reason_an_unused_rule_and_a_stale_disposition_fail_the_check():
    policy = copy.deepcopy(POLICY["0.5.9"])
    policy["notNeeded"]["triton program gcc"] = "not needed"
    policy["rules"]["nowhere/*"] = "tests"
    policy["provided"]["triton program make"] = "programs.cc"
    policy["rules"]["x/*"] = "no-such-reason"
    found = audit.problems(DATA["0.5.9"], policy, ENV["0.5.9"])
    assert "reason too short to show why: 'not needed'" in found
    assert "rule nowhere/* disposes of no lookup" in found
    assert "triton program make: disposition of a lookup the wheels no longer make" in found
    assert "rule x/*: unknown reason no-such-reason" in found


# -- the environment as each stack sees it -----------------------------------------------------------


def test_a_stacks_own_entry_is_seen_by_that_stack_only():
    env = copy.deepcopy(SHARED_ENV)
    env["stacks"]["0.5.23"] = {"programs": {"frobnicate": {"from": "nixpkgs:hello", "why": "x" * 50}}}
    assert "frobnicate" in audit.stack_env(env, "0.5.23")["programs"]
    assert "frobnicate" not in audit.stack_env(env, "0.5.9")["programs"]
    pins = json.loads((REPO / "nix" / "pins.json").read_text())
    assert set(SHARED_ENV["stacks"]) - {"_comment"} <= set(pins["stacks"]), "stacks are nix/pins.json's"


def test_numactl_is_every_stacks():
    """0.5.9 runs numactl when --numa-node is given (through extra_args), 0.5.23 by default."""
    assert "numactl" in SHARED_ENV["programs"]
    assert all("numactl" in ENV[v]["programs"] for v in STACKS)


def test_an_addition_that_redefines_a_shared_entry_is_refused():
    env = copy.deepcopy(SHARED_ENV)
    env["stacks"]["0.5.23"] = {"programs": {"ninja": {"from": "nixpkgs:ninja", "why": "a second definition"}}}
    with pytest.raises(BadInput, match=r"stacks\.0\.5\.23\.programs\.ninja: already defined for every stack"):
        audit.stack_env(env, "0.5.23")


# -- what the reasons rest on ----------------------------------------------------------------------

# torch's _preload_cuda_deps / _preload_cuda_lib (torch/__init__.py) glob sys.path for these at import
PRELOADED = re.compile(
    r"(nvidia/)?[^/]+/lib/lib(cublasLt|cublas|cudnn|nvrtc|nvrtc-builtins|cudart|cupti|cufft|curand|nvJitLink|"
    r"cusparse|cusparseLt|cusolver|nccl|nvshmem_host|cufile|nvToolsExt)\.so"
)


@pytest.mark.parametrize("version", STACKS)
def test_no_wheel_ships_a_cuda_library_torch_would_preload(version):
    """The reason of 'torch library <dynamic> lib_path': with pip's CUDA wheels dropped, torch's
    import-time preload finds nothing in site-packages and the libraries come from cudaPackages, but cuDNN:
    the closure keeps the one cuDNN wheel its ELF policy links torch against, and ships nothing else."""
    shipped = {name: [f for f in zipfile.ZipFile(wheel_path(version, name)).namelist() if PRELOADED.match(f)]
               for name in CLOSURE[version]}  # fmt: skip
    closure_policy = CLOSURES[version].policy
    (cudnn,) = [p.removeprefix("package:") for s, p in closure_policy["providers"].items() if s.startswith("libcudnn")]
    found = {name: files for name, files in shipped.items() if files}
    assert set(found) == {cudnn} and all("/libcudnn" in f for f in found[cudnn]), found
    reason = answer(version, "torch", "library <dynamic> lib_path")[1]
    assert "_preload_cuda" in reason and cudnn in reason, reason


# deep_ep's compiled _C and torch, stood in for: its import-time checks read torch's CUDA version
DEEP_EP_STANDINS = {
    "torch/__init__.py": "class version:\n    cuda = '13.0'\n\n\n"
    "class cuda:\n    is_available = staticmethod(lambda: True)\n\n\nclass Tensor:\n    pass\n",
    "deep_ep/_C.py": "class EventHandle:\n    pass\n\n\nclass Config:\n    pass\n\n\ntopk_idx_t = int\n\n\n"
    "def init_jit(*args):\n    raise SystemExit('init_jit reached')\n",
}
DEEP_EP_IMPORT = """
import glob, subprocess, sys
sys.path.insert(0, sys.argv[1])
ran = []
for module, name in ((subprocess, "run"), (subprocess, "check_output"), (subprocess, "Popen"), (glob, "glob")):
    setattr(module, name, lambda *a, _real=getattr(module, name), _name=name, **k: ran.append(_name) or _real(*a, **k))
try:
    import deep_ep
except AssertionError as err:
    print(f"AssertionError: {err}; ran {ran}")
"""


def test_deep_ep_stops_importing_before_its_lookups(tmp_path):
    """The reason of sgl-deep-ep's lookups (0.5.23's "deep-ep"): SGLang imports deep_ep on every MoE start, and
    on this closure deep_ep's import raises at find_nccl_root, before it runs a program or globs a path: no
    wheel of the closure is a Python distribution named nvidia-nccl*, the closure's metadata of
    nvidia-nccl-cu13 (cudaPackages' NCCL, nix/scripts/cuda-dist-info.py) lists no libnccl.so among its files, and
    the environment sets neither EP_NCCL_ROOT_DIR nor NCCL_DIR. deep_ep's own Python, from the real wheel, without
    site-packages but with that metadata (as the closure); with NCCL_DIR set it would go on to glob that
    directory."""
    assert not [name for name in CLOSURE["0.5.23"] if name.startswith("nvidia-nccl")]
    members = json.loads((REPO / "nix" / "cuda-members.json").read_text())
    closure_policy = CLOSURES["0.5.23"].policy
    metadata = {spec.partition("==")[0]: {"version": members[m], "member": m}
                for m, spec in closure_policy["cudaRedist"].items() if not m.startswith("_")}  # fmt: skip
    assert "nvidia-nccl-cu13" in metadata
    load_script("nix/scripts/cuda-dist-info.py").write(tmp_path, metadata)
    assert not {"EP_NCCL_ROOT_DIR", "NCCL_DIR", "EP_SUPPRESS_NCCL_CHECK"} & {
        name for section in ("environment", "caches") for name in ENV["0.5.23"][section]
    }
    with zipfile.ZipFile(wheel_path("0.5.23", "sgl-deep-ep")) as archive:
        sources = {name: archive.read(name) for name in archive.namelist() if name.endswith(".py")}
    for name, text in {**sources, **{n: t.encode() for n, t in DEEP_EP_STANDINS.items()}}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(text)

    def imported(**env):
        command = [sys.executable, "-S", "-E", "-c", DEEP_EP_IMPORT, str(tmp_path)]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.strip()

    assert imported() == "AssertionError: Cannot find package: nccl; ran []"
    assert imported(NCCL_DIR="/nowhere") == "AssertionError: No libnccl.so found in /nowhere/lib/; ran ['glob']"
    reason = answer("0.5.23", "sgl-deep-ep", "path /lib/libnccl.so*")[1]
    assert "Cannot find package: nccl" in reason and "never selects" in reason


# -- every file a reason cites is in that stack's wheels, at lines the file has ---------------------

# path/file.py:123, file.py:12-34, cpp/extension.py:163-190, numa_utils.py:516-518,601-611, "0.5.9's
# srt/x.py" (another stack's file), "(:172-176)" (more lines of the file cited just before)
CITATION = re.compile(
    r"(?:(?P<stack>\d+\.\d+\.\d+)'s )?(?<![\w./-])(?P<file>(?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|pyx|pxd|pxi))(?!\w)"
    r"(?::(?P<lines>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*))?"
    r"|\(:(?P<more>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*)"
)
OWN_FILES = ("nix/", "tests/", "python/")  # this repository's files, cited by path from its root


@functools.cache
def wheel_files(version: str) -> dict[str, list[tuple[str, Path]]]:
    """Path inside a wheel -> [(package, wheel)] over the stack's closure: each zip listing read once."""
    files: dict[str, list[tuple[str, Path]]] = {}
    for name in CLOSURE[version]:
        path = wheel_path(version, name)
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                files.setdefault(member, []).append((name, path))
    return files


@functools.cache
def line_count(wheel: Path | None, member: str) -> int:
    """Lines of a file of a wheel (None: of this repository), read once."""
    if wheel is None:
        return len((REPO / member).read_bytes().splitlines())
    with zipfile.ZipFile(wheel) as archive:
        return len(archive.read(member).splitlines())


@functools.cache
def reason_packages(version: str) -> dict[str, frozenset[str]]:
    """Reason id -> the packages whose lookups it disposes of (through notNeeded or a rule): where its
    citations are looked for first."""
    policy, found = POLICY[version], {}
    for package, record in DATA[version]["packages"].items():
        for key, lookup in record["lookups"].items():
            value = policy["notNeeded"].get(f"{package} {key}")
            if isinstance(value, str):
                ids = {value}
            elif f"{package} {key}" in policy["provided"] or value is not None:
                ids = set()
            else:
                ids = {policy["rules"][r] for loc in lookup["locations"] for r in policy["rules"]
                       if fnmatch.fnmatch(loc.rsplit(":", 1)[0], r)}  # fmt: skip
            for reason_id in ids:
                found.setdefault(reason_id, set()).add(package)
    return {reason_id: frozenset(packages) for reason_id, packages in found.items()}


def policy_reasons(version: str):
    """(where, packages, text) of every reason the stack's policy gives: its named reasons and every
    notNeeded text; packages are those whose lookups the reason disposes of."""
    policy = POLICY[version]
    for name, value in policy["reasons"].items():
        yield f"reasons.{name}", reason_packages(version).get(name, frozenset()), audit.reason(value, policy)[0]
    for key, value in policy["notNeeded"].items():
        if not (isinstance(value, str) and value in policy["reasons"]):
            yield f"notNeeded[{key}]", frozenset({key.split()[0]}), audit.reason(value, policy)[0]


def resolve_citation(version: str, cited: str, packages: frozenset[str]) -> tuple[list[tuple[Path | None, str]], str]:
    """([(wheel, member)], why not): the file of the stack's wheels whose path is cited or ends in /cited,
    looked for among the files of the packages the reason is for, then in the whole closure; among
    several, the one at exactly that path (at that path in several of the reason's own wheels: each of
    them). A bare file name (no directory) is read as a file of the reason's own packages: another
    package's file is cited with its directory."""
    if cited.startswith(OWN_FILES):
        return ([(None, cited)], "") if (REPO / cited).is_file() else ([], "not a file of this repository")
    if version not in STACKS:
        return [], f"no stack {version} in nix/pins.json"
    files = wheel_files(version)
    found = [(package, wheel, member) for member in files if member == cited or member.endswith("/" + cited)
             for package, wheel in files[member]]  # fmt: skip
    if not found:
        return [], f"in no wheel of the {version} closure"
    ours = [f for f in found if f[0] in packages]
    if not ours and "/" not in cited and packages:
        owners = ", ".join(sorted({p for p, _, _ in found}))
        return [], f"a bare name is read as the reason's own package's file; this is {owners}'s: cite its directory"
    candidates = ours or found
    exact = [f for f in candidates if f[2] == cited]
    if len(candidates) == 1 or len(exact) == 1 or (exact and ours):
        return [(wheel, member) for _, wheel, member in (candidates if len(candidates) == 1 else exact)], ""
    members = sorted({m for _, _, m in candidates})
    return (
        [],
        f"ambiguous in the {version} closure ({len(members)} files: {', '.join(members[:4])}); cite more of its path",
    )


def citation_problems(version: str, reasons) -> tuple[int, list[str]]:
    """(citations checked, problems) over (where, packages, text): each cited file is one file of the
    stack's wheels (or of another stack's, when the text says whose) and each cited line is in it."""
    checked, found = 0, []
    for where, packages, text in reasons:
        last: list[tuple[Path | None, str]] | None = None  # the files of the citation before
        for match in CITATION.finditer(text):
            if match["more"] is not None:
                if last is None:
                    found.append(f"{version} {where}: (:{match['more']}) follows no cited file")
                if not last:
                    continue
                files, lines, cited = last, match["more"], f"{last[0][1]}:{match['more']}"
            else:
                cited = match["file"] + (f":{match['lines']}" if match["lines"] else "")
                files, why = resolve_citation(match["stack"] or version, match["file"], packages)
                last, lines = files, match["lines"]
                if not files:
                    found.append(f"{version} {where}: {cited}: {why}")
                    continue
            checked += 1
            for span in lines.split(",") if lines else []:
                first, _, end = span.partition("-")
                for file in files:
                    count = line_count(*file)
                    if not 1 <= int(first) <= int(end or first) <= count:
                        found.append(f"{version} {where}: {cited}: {file[1]} has {count} lines, not {span}")
    return checked, found


@pytest.mark.parametrize("version", STACKS)
def test_every_citation_in_a_reason_is_in_the_stacks_wheels(version):
    """A reason's file:line is where the reader checks it: each is a file of this stack's closure (the
    one its path names) and has those lines, so a reason copied from the other stack or left behind
    by an upgrade that moved the file or shortened it is caught."""
    checked, found = citation_problems(version, policy_reasons(version))
    assert checked > 100, "the reasons cite files; the pattern finds them"
    assert found == [], f"{len(found)} citations that are not in the {version} wheels:\n" + "\n".join(found)


def test_a_wrong_citation_fails_the_check():
    """Reasons fed to the same check: a line past a file's end, a file no wheel has, a name many files
    end in, another stack's file, another package's file named bare; and 0.5.23's own hub reason as it
    was (huggingface_hub 1.x has neither repository.py nor commands/lfs.py: the one repository.py of
    the closure is ModelScope's)."""
    torch = frozenset({"torch"})
    reasons = [
        ("a", torch, "as torch/__init__.py:348 says (torch/__init__.py:426-448)"),  # right for 0.5.23
        ("b", torch, "torch/__init__.py:99999"),  # past the end of the file
        ("c", torch, "torch/_inductor/no_such_file.py:10"),  # in no wheel
        ("d", torch, "utils.py:12"),  # dozens of torch's files end so
        ("e", torch, "torch/__init__.py:348 and then (:1-99999)"),  # more lines of it, past its end
        ("f", torch, "0.5.9's jit_kernel/utils.py:156-175, which 0.5.23 does not ship (jit_kernel/utils.py)"),
        ("g", torch, "tests/test_runtime_lookups.py:1, nix/no-such-script.py"),
        ("h", torch, "mixed_comm.py:86, (:1) of nothing"),  # FlashInfer's file named as if it were torch's
        ("i", torch, "comm/mixed_comm.py:86 names it; (:70-86) more of it"),  # with its directory: found
        ("j", frozenset({"huggingface-hub"}), "git-lfs CLI helpers (repository.py, cli/lfs.py, commands/lfs.py)"),
    ]
    checked, found = citation_problems("0.5.23", reasons)
    assert [p.split(":")[0] for p in found] == [f"0.5.23 {w}" for w in "bcdefghjj"]
    assert "not 99999" in found[0]
    assert "in no wheel of the 0.5.23 closure" in found[1]
    assert "ambiguous" in found[2] and "cite more of its path" in found[2]
    assert "not 1-99999" in found[3]
    assert found[4].endswith("jit_kernel/utils.py: in no wheel of the 0.5.23 closure")
    assert "not a file of this repository" in found[5]
    assert "this is flashinfer-python's: cite its directory" in found[6]
    assert "repository.py: a bare name" in found[7] and "this is modelscope's" in found[7]
    assert found[8].endswith("commands/lfs.py: in no wheel of the 0.5.23 closure")
    assert checked == 10  # the citations that resolve: a (2), b, e (2), f, g, i (2), j's cli/lfs.py


# -- the scanner finds each kind of lookup ---------------------------------------------------------

FAKE_MODULE = """
import ctypes
import os
import subprocess as sp
from shutil import which
from cuda.pathfinder import load_nvidia_dynamic_lib


def build():
    command = ["frobnicate", "--all"]
    sp.run(command)
    which("nvcc")
    ctypes.CDLL("libfoo.so.1")
    load_nvidia_dynamic_lib("nvrtc")
    return os.environ.get("FOO_HOME"), os.environ.get("SGLANG_ENABLE_THING"), "/usr/local/foo"


def flags():
    return os.getenv("CUDA_HOME"), os.getenv("BAR_HOME"), os.getenv("FOO_CACHE_DIR"), "~/.cache/foo"


def script(args):
    return f'''#!/bin/sh
exec numactl {args} "$@"'''
"""


def test_the_scanner_finds_each_kind_of_lookup(tmp_path):
    assert set(lookup_scan.scan([("fake/build.py", FAKE_MODULE)])) == {
        "program frobnicate",  # a list literal assigned to a name, through an import alias
        "program nvcc",
        "library libfoo.so.1",
        "library cuda.pathfinder:nvrtc",
        "env FOO_HOME",  # ends in HOME, read where a lookup is made
        "env CUDA_HOME",  # a toolchain name, read anywhere
        "env FOO_CACHE_DIR",  # a cache location, read anywhere
        "path /usr/local/foo",
        "path ~/.cache/foo",
        "path /bin/sh",  # a shell script's interpreter
        "program numactl",  # and the program it runs
    }  # SGLANG_ENABLE_THING is a feature flag; BAR_HOME is read where nothing is looked up


FAKE_CYTHON = '''
from libc.stdint cimport uintptr_t
from os import getenv as _cyb_getenv
from cuda.pathfinder import load_nvidia_dynamic_lib
cimport cuda.bindings._lib.dlfcn as dlfcn

cdef extern from "<dlfcn.h>" nogil:
    void *dlopen(const char *, int)

cdef void* load_library() except* with gil:
    cdef uintptr_t handle = load_nvidia_dynamic_lib("nvrtc")._handle_uint
    return <void*>handle

cdef int _init() except -1 nogil:
    with gil:
        if bool(int(_cyb_getenv('CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM', default=0))):
            pass
        handle = dlfcn.dlopen(b"libcuda.so.1", 2)
        home = _cyb_getenv("CUDA_HOME")

def docs():
    """/usr/local/doc is a docstring, not a lookup"""
    return "/etc/cuda.conf"
'''


def test_the_scanner_reads_cython_sources():
    found = lookup_scan.scan([("cuda/bindings/_internal/fake_linux.pyx", FAKE_CYTHON)])
    assert set(found) == {
        "library cuda.pathfinder:nvrtc",
        "library libcuda.so.1",  # C's dlopen through a cimport alias, a bytes literal
        "env CUDA_HOME",  # os.getenv through an alias
        "path /etc/cuda.conf",
    }  # the extern declaration of dlopen is not a call; the feature flag and the docstring are not lookups
    assert found["library cuda.pathfinder:nvrtc"]["locations"] == ["cuda/bindings/_internal/fake_linux.pyx:11"]


def test_a_cython_source_python_cannot_tokenize_is_reported():
    with pytest.raises(BadInput, match=r"cannot read the Cython source bad\.pyx"):
        list(lookups_cython.lookups_in_cython('x = """never closed\n', "bad.pyx"))


@pytest.fixture(scope="module")
def compiled_module(tmp_path_factory) -> bytes:
    """A real x86-64 shared object shaped like a Cython 3.1 module built without its .pyx: the
    __pyx_ marker, its constants zlib-compressed into one string without separators (the
    module imports cuda.pathfinder's load_nvidia_dynamic_lib), a C-level dlopen of a soname
    and a fixed path among its strings."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler to build the stand-in module")
    root = tmp_path_factory.mktemp("compiled")
    constants = zlib.compress(b"__main__cuda.pathfinderload_nvidia_dynamic_lib__name__nvrtc_handle_uint" * 2)
    array = ",".join(str(b) for b in constants)
    (root / "m.c").write_text(
        "#include <dlfcn.h>\n"
        f"static const unsigned char table[] = {{{array}}};\n"
        'const char *marker = "__pyx_module_is_main_fake";\n'
        'const char *conf = "/etc/fake/devices.conf";\n'
        'void *load(void) { return dlopen("libfake.so.3", 2) ? (void *)table : 0; }\n'
    )
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(root / "m.so"), str(root / "m.c"), "-ldl"], check=True)
    return (root / "m.so").read_bytes()


def test_the_scanner_reads_a_compiled_modules_strings(compiled_module):
    found = lookup_scan.scan([("fake/_internal/nvrtc.cpython-312-x86_64-linux-gnu.so", compiled_module)])
    assert set(found) == {
        "library <compiled fake._internal.nvrtc> cuda.pathfinder.load_nvidia_dynamic_lib",  # unpacked constants
        "library <compiled fake._internal.nvrtc> dlopen",  # an imported C function
        "library libfake.so.3",
        "path /etc/fake/devices.conf",
    }
    assert found["library libfake.so.3"]["locations"] == [
        "fake/_internal/nvrtc.cpython-312-x86_64-linux-gnu.so:strings"
    ]


def test_a_compiled_module_is_read_only_without_its_source(tmp_path, compiled_module):
    wheel = tmp_path / "fake-1.0-cp312-cp312-linux_x86_64.whl"
    source = compiled_module.replace(b"__pyx_module_is_main_fake", b"fake/_internal/nvrtc.pyx\0\0")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("fake/_internal/nvrtc.cpython-312-x86_64-linux-gnu.so", compiled_module)
        archive.writestr("fake/other.cpython-312-x86_64-linux-gnu.so", source + b"__pyx_")
        archive.writestr("fake/_internal/nvrtc.pyx", "")  # not this module's source: it embeds none
        archive.writestr("fake/c.cpython-312-x86_64-linux-gnu.so", b"\x7fELF not Cython")
    names = [name for name, _ in lookups.wheel_sources(Contents(wheel))]
    # other.so embeds fake/_internal/nvrtc.pyx, which is shipped: read from source; c.so is not Cython
    assert names == ["fake/_internal/nvrtc.cpython-312-x86_64-linux-gnu.so", "fake/_internal/nvrtc.pyx"]


def test_the_real_cuda_bindings_13_modules_are_read_from_their_strings():
    """cuda-bindings 13.4.4 ships its _internal modules compiled, without .pyx: each one's lookup
    through cuda.pathfinder is found in its Cython 3.1 string table."""
    with zipfile.ZipFile(wheel_path("0.5.23", "cuda-bindings")) as archive:
        name = "cuda/bindings/_internal/nvrtc.cpython-312-x86_64-linux-gnu.so"
        assert not [n for n in archive.namelist() if n.endswith(".pyx")]
        found = set(lookup_scan.scan([(name, archive.read(name))]))
    assert "library <compiled cuda.bindings._internal.nvrtc> cuda.pathfinder.load_nvidia_dynamic_lib" in found


def test_a_new_lookup_in_a_wheel_is_reported_undispositioned():
    data = copy.deepcopy(DATA["0.5.9"])
    data["packages"]["triton"]["lookups"].update(lookup_scan.scan([("triton/new.py", FAKE_MODULE)]))
    found = audit.problems(data, POLICY["0.5.9"], ENV["0.5.9"])
    assert "triton program frobnicate (triton/new.py:11): no disposition" in found
    assert "triton library libfoo.so.1 (triton/new.py:13): no disposition" in found
