"""What SGLang asks about installed distributions gets the answer in the Nix closure it gets where it was tested.

The stacks drop pip's CUDA wheels and link cudaPackages_13_0's libraries (nix/stacks/*/wheel-closure.json). The
closure answers importlib.metadata for those distributions with their names and the versions of the libraries it
carries: a dist-info each, written by nix/scripts/cuda-dist-info.py in nix/python-overrides.nix's
cuda-distribution-metadata, a dependency of torch. These tests prove, for both stacks:

- the script writes what importlib.metadata reads, and refuses a version, a name or a list it cannot write;
- evaluated, each stack's closure answers every cudaRedist distribution with the version of the member it links
  (checked against the member's attribute, and against nix/cuda-members.json, which the audits read); the
  environments with torch include it, the router's does not; the derivation runs the script;
- SGLang's own is_nvidia_cublas_version_ge_12_9 (each stack's real wheel) answers True from the closure's
  metadata, laid out by pyproject.nix's own virtual-environment builder as the wrapper's environment is, and
  False without it (what the issue found);
- the differential view (nix/stacks/*/metadata.json, sglang_eagle3_audits/metadata.py) is what the wheels and the
  locks give; every difference between the Nix closure, a pip install of the lock and SGLang's CUDA 13 image has
  a reason; every read of metadata in the closure's code is answered in each environment or listed unresolved.

Refresh the data: python -m sglang_eagle3_audits --write --only metadata
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CACHE, REPO
from sglang_eagle3 import stacks
from sglang_eagle3_audits import environments
from sglang_eagle3_audits import metadata as audit
from sglang_eagle3_audits.closure import Closure
from support import flake_eval
from support.flake_eval import Workspace, needs_flake_eval
from support.scripts import load_script
from support.stack_libraries import NEWEST_LIBRARIES, stack_libraries, with_path

DIST_INFO = REPO / "nix" / "scripts" / "cuda-dist-info.py"
STACKS = list(stacks.versions())
PACKAGES = {"0.5.9": "default", "0.5.23": "sglang-eagle3-0_5_23"}
MEMBERS = json.loads((REPO / "nix" / "cuda-members.json").read_text())

dist_info = load_script(DIST_INFO)
CLOSURES = {v: Closure(stacks.stacks()[v], CACHE) for v in STACKS}
DATA = {v: json.loads((c.data / audit.AUDIT.data).read_text()) for v, c in CLOSURES.items()}


@functools.cache
def fresh(stack: str) -> tuple[dict, list[str]]:
    """The data as the real wheels and the lock give it now (wheels downloaded into the test cache, sha256 checked;
    a dropped wheel's file list read from PyPI once)."""
    data = audit.AUDIT.scan(CLOSURES[stack])
    return data, audit.AUDIT.problems(data, CLOSURES[stack])


def run_dist_info(site: Path, distributions) -> subprocess.CompletedProcess:
    argument = distributions if isinstance(distributions, str) else json.dumps(distributions)
    return subprocess.run([sys.executable, str(DIST_INFO), str(site), argument], capture_output=True, text=True)


# -- the script the derivation runs -------------------------------------------------------------------------------


def test_the_script_writes_what_importlib_metadata_reads(tmp_path):
    site = tmp_path / "site-packages"
    result = run_dist_info(site, {"nvidia-cublas": {"version": "13.1.0.3", "member": "libcublas"},
                                  "nvidia-nccl-cu13": {"version": "2.28.7-1", "member": "nccl"}})  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = {d.metadata["Name"]: d for d in importlib.metadata.distributions(path=[str(site)])}
    assert {n: d.version for n, d in found.items()} == {"nvidia-cublas": "13.1.0.3", "nvidia-nccl-cu13": "2.28.7"}
    assert "cudaPackages_13_0.libcublas" in found["nvidia-cublas"].metadata["Summary"]
    # Its files are the dist-info's own: the library is not under site-packages, and nothing says it is.
    assert {f.name for f in found["nvidia-cublas"].files} == {"METADATA", "INSTALLER", "RECORD"}
    assert all(str(f).startswith("nvidia_cublas-13.1.0.3.dist-info/") for f in found["nvidia-cublas"].files)
    hashed = [f for f in found["nvidia-cublas"].files if f.hash is not None]
    assert all(f.hash.value and f.size == (site / f).stat().st_size for f in hashed) and len(hashed) == 2


@pytest.mark.parametrize(
    ("distributions", "said"),
    [
        ({"nvidia-cublas": {"version": "13.x", "member": "libcublas"}}, "not dotted numbers"),
        ({"nvidia cublas": {"version": "13.1", "member": "libcublas"}}, "is not a distribution name"),
        ({"nvidia-cublas": {"version": "13.1"}}, "give {'version'"),
        (
            {"nvidia-cublas": {"version": "13.1", "member": "a"}, "nvidia_cublas": {"version": "13.1", "member": "b"}},
            "are one distribution name",
        ),
        ("[1, 2]", "must be an object"),
        ("{not json", "cuda-dist-info:"),
    ],
)
def test_the_script_refuses_what_it_cannot_write_and_writes_nothing(tmp_path, distributions, said):
    site = tmp_path / "site-packages"
    result = run_dist_info(site, distributions)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not site.exists() or not any(site.iterdir())


# -- the closure, evaluated -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("flake"))


def evaluated(ws: Workspace, stack: str) -> dict:
    return ws.eval_expr(f"""
      let p = flake.packages.x86_64-linux.{PACKAGES[stack]}; s = p.passthru.pythonSet; m = s.cuda-distribution-metadata;
      in {{
        distributions = m.distributions;
        members = builtins.mapAttrs (_: d: p.passthru.cuda.cudaPackages.${{d.member}}.version) m.distributions;
        out = m.outPath;
        command = m.buildCommand;
        server = p.passthru.serverEnv.NIX_PYPROJECT_DEPS;
        test = p.passthru.testEnv.NIX_PYPROJECT_DEPS;
        router = p.passthru.routerEnv.NIX_PYPROJECT_DEPS;
        torch = builtins.attrNames s.torch.passthru.dependencies;
      }}
    """)


def built(ws: Workspace, stack: str) -> Path:
    attribute = f"packages.x86_64-linux.{PACKAGES[stack]}.passthru.pythonSet.cuda-distribution-metadata"
    out = ws.nix("build", "--no-link", "--print-out-paths", "--option", "sandbox", "false", f"{ws.ref}#{attribute}")
    return Path(out.stdout.strip())


@needs_flake_eval()
@pytest.mark.parametrize("stack", STACKS)
def test_the_closure_answers_each_swapped_distribution_with_its_members_version(ws, stack):
    got = evaluated(ws, stack)
    closure_policy = CLOSURES[stack].policy
    redist = {spec.partition("==")[0]: member for member, spec in closure_policy["cudaRedist"].items()
              if not member.startswith("_")}  # fmt: skip
    assert {d: e["member"] for d, e in got["distributions"].items()} == redist
    for name, entry in got["distributions"].items():
        # the member's own version, as evaluated (never written down in the Nix code), and the audits' record of it
        assert entry["version"] == got["members"][name] == MEMBERS[entry["member"]], name
    assert "cuda-distribution-metadata" in got["torch"]
    assert got["out"] in got["server"].split(":") and got["out"] in got["test"].split(":")
    assert got["out"] not in got["router"].split(":")  # the router host has no CUDA
    assert "/nix/store/" in got["command"] and "-cuda-dist-info.py $out/lib/python3.12/site-packages" in got["command"]
    site = built(ws, stack) / "lib" / "python3.12" / "site-packages"
    found = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[str(site)])}
    assert found == {n: dist_info.library_version(e["member"], e["version"]) for n, e in got["distributions"].items()}
    assert found["nvidia-cublas"] == MEMBERS["libcublas"] and found["nvidia-nccl-cu13"] == "2.28.7"


CUBLAS_CHECK = """
import json, sys
from sglang.srt.utils import common
sys.path[:] = json.loads(sys.argv[1])  # importlib.metadata now searches the closure's site-packages alone
print(json.dumps(common.is_nvidia_cublas_version_ge_12_9()))
"""


def sglang_env(stack: str, request) -> dict[str, str]:
    """An environment that imports the stack's real SGLang tree (its pinned wheel, unpacked) on CPU."""
    tree = request.getfixturevalue("pristine_tree" if stack == "0.5.9" else "newest_tree")
    paths = [tree, REPO / "tests" / "stand_ins"]
    if stack == "0.5.23":
        paths.insert(0, stack_libraries("0.5.23", NEWEST_LIBRARIES, CACHE))
    return with_path({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, *paths)


def closure_venv(out: Path, deps: list[Path]) -> Path:
    """A virtual environment made by pyproject.nix's own builder (the locked input's make_venv.py, the script
    mkVirtualEnv runs for the wrapper's environment) from the given store paths: the site-packages the stack's
    CPython 3.12 puts on sys.path (here the venv's own interpreter is this host's, another minor version)."""
    make_venv = flake_eval.input_tree("pyproject-nix") / "build" / "hooks" / "make-venv" / "make_venv.py"
    python_root = Path(sys.executable).parent.parent
    command = [sys.executable, str(make_venv), str(out), "--python", str(python_root)]
    command += [a for dep in deps for a in ("--deps", str(dep))]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "lib" / "python3.12" / "site-packages"


@needs_flake_eval()
@pytest.mark.parametrize("stack", STACKS)
def test_sglangs_own_cublas_check_is_true_in_the_closure(ws, stack, request, tmp_path):
    """SGLang 0.5.9 srt/utils/common.py:318-325 (0.5.23: 398-405), run from the real wheel: True from the closure's
    metadata; False without it, as in the closure before this metadata (the DeepSeek MLA path then takes the FP8
    scale allocation sglang#11272 replaced for cuBLAS >= 12.9)."""
    env = sglang_env(stack, request)
    site = closure_venv(tmp_path / "with", [built(ws, stack)])
    bare = closure_venv(tmp_path / "without", [])
    answers = []
    for path in (site, bare):
        result = subprocess.run([sys.executable, "-c", CUBLAS_CHECK, json.dumps([str(path)])], capture_output=True,
                                text=True, env=env, timeout=600)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        answers.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert answers == [True, False]
    assert any(p.name.startswith("nvidia_cublas-13.") for p in site.iterdir())


# -- the differential view -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_the_data_is_what_the_wheels_and_the_lock_give(stack):
    data, problems = fresh(stack)
    assert problems == []
    assert data == DATA[stack], "stale: run python -m sglang_eagle3_audits --write --only metadata"


@pytest.mark.parametrize("stack", STACKS)
def test_every_difference_has_a_reason_and_every_swapped_version_is_the_members(stack):
    rows = DATA[stack]["distributions"]
    differing = {n: r for n, r in rows.items() if len({v for k, v in r.items() if k in ("nix", "pip", "image")}) > 1}
    assert differing and all(r.get("kind") in ("dropped", "swapped", "pinned") and r["why"] for r in differing.values())
    env = environments.of(CLOSURES[stack])
    swapped = {n for n, r in differing.items() if r["kind"] == "swapped"}
    assert swapped == {n for n in env.answered if rows[n]["nix"] != rows[n]["pip"] or "image" in rows[n]}
    for name, (member, version) in env.answered.items():
        assert rows[name]["nix"] == version == dist_info.library_version(member, MEMBERS[member])
    # pip's dropped CUDA distributions: each answered by metadata or given its own reason
    dropped = {n for n, r in differing.items() if r["kind"] == "dropped" and n.startswith("nvidia-")}
    reasons = CLOSURES[stack].policy["metadata"]["notAnswered"]
    assert dropped == set(reasons) and all("not answered by metadata" in rows[n]["why"] for n in dropped)


def test_a_difference_or_a_drop_without_a_reason_is_reported():
    closure = Closure(stacks.stacks()["0.5.23"], CACHE)  # its own: the policy below is changed
    env = environments.Environments(closure)
    env.nix["nvidia-fake"] = "1.0"
    closure.policy = copy.deepcopy(closure.policy)
    del closure.policy["metadata"]["notAnswered"]["nvidia-cuda-nvcc"]
    closure.policy["metadata"]["notAnswered"]["nvidia-ml-py"] = "kept, not dropped"
    _, problems = env.distributions()
    problems += env.answer_problems()
    assert any("nvidia-fake" in p and "without a reason" in p for p in problems)
    assert any("nvidia-cuda-nvcc is dropped, neither answered" in p for p in problems)
    assert any("names nvidia-ml-py, which the closure does not drop" in p for p in problems)


def test_the_issues_reads_are_answered_in_each_environment():
    """SGLang's check_pkg_version_at_least is asked, through its callers, for nvidia-cublas and nvidia-cublas-cu12;
    the Nix closure now answers the first with cudaPackages' cuBLAS, where it answered nothing."""
    for stack, reference, cublas in (("0.5.9", "image", "13.0.0.19"), ("0.5.23", "pip", "13.1.1.3")):
        key = "sglang sglang/srt/utils/common.py:check_pkg_version_at_least version(pkg)"
        (site,) = [s for k, s in DATA[stack]["reads"].items() if k.startswith(key)]
        assert "the calls of check_pkg_version_at_least" in site["via"]
        assert site["answers"]["nvidia-cublas"]["nix"] == MEMBERS["libcublas"]
        assert site["answers"]["nvidia-cublas"][reference] == cublas
        assert site["answers"]["nvidia-cublas-cu12"]["nix"] == "not installed"
    # tilelang looks for nvcc among nvidia-cuda-nvcc's files when CUDA_HOME is unset: not answered, with why
    (nvcc,) = [s for k, s in DATA["0.5.23"]["reads"].items() if k.startswith("tilelang tilelang/env.py:") and
               "files(" in k]  # fmt: skip
    assert nvcc["answers"] == {"nvidia-cuda-nvcc": {"nix": "not installed", "pip": "13.5.37"}} and nvcc["differs"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_read_is_answered_or_listed_unresolved(stack):
    data = DATA[stack]
    unresolved = {(u["package"], u["location"]) for u in data["unresolved"]}
    for key, site in data["reads"].items():
        listed = (key.split(" ", 1)[0], site["location"]) in unresolved
        assert ("answers" in site) != listed, key
    assert len(unresolved) == len(data["unresolved"]) == sum(1 for s in data["reads"].values() if "unresolved" in s)


def test_docs_show_each_stacks_view():
    text = (REPO / "docs" / "nix.md").read_text()
    for stack in STACKS:
        assert audit.table(stack, DATA[stack]) in text, "run python -m sglang_eagle3_audits --write --docs"
