"""Every start-up gate of each stack's closure passes for the versions the stack composes, by data.

Each stack's startup-gates.json (nix/stacks/sglang-<version>/) lists, for every wheel of the server
closure (resolved from the stack's uv.lock as the ELF audit resolves it), every place that compares a version
or a capability with what is installed or present, with its verdict for the stack's composed versions
(sglang_eagle3_audits/startup_gates.py; what counts: sglang_eagle3_audits/gates.py and gate_scan.py).
These tests prove, for both stacks:

- the data is what the real wheels hold, judged against the versions the stack composes (the lock, with
  nix/pins.json's swaps): a gate the source grows, or a version that changes a verdict, makes it stale;
- every gate that raises passes, or has a reason in the stack's startup-gate-policy.json, and every reason
  is used;
- the gates this project exists for hold: SGLang's own version checks of FlashInfer and the kernel package,
  its cuDNN check on 0.5.9, deep-ep's CUDA check on 0.5.23 — and they fail when the versions are wrong,
  which shows the judge computes them;
- every gate is judged again in the environment SGLang was tested in (metadata-policy.json's reference: SGLang's
  CUDA 13 image for 0.5.9, a pip install of the lock for 0.5.23); a gate judged otherwise there has a reason that
  says what happens to Kimi-K2.5 with EAGLE-3 (startup-gate-policy.json differs), and SGLang's cuBLAS check, the
  issue's example, is judged alike once the closure answers nvidia-cublas's metadata;
- the reader finds a gate in new code (a version compared at module level, through a name, through a
  helper's parameter) and what it decides; what it cannot resolve is listed per package (unresolved).

Refresh the data after changing a uv.lock or nix/pins.json: python -m sglang_eagle3_audits --write --only startup-gates
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json

import pytest
from conftest import CACHE, REPO
from sglang_eagle3 import stacks
from sglang_eagle3_audits import gate_scan, gates
from sglang_eagle3_audits import startup_gates as audit
from sglang_eagle3_audits.base import unique
from sglang_eagle3_audits.closure import Closure

STACKS = list(stacks.versions())
CLOSURES = {v: Closure(stacks.stacks()[v], CACHE) for v in STACKS}
DATA = {v: json.loads((c.data / audit.AUDIT.data).read_text()) for v, c in CLOSURES.items()}
POLICY = {v: json.loads((c.data / audit.AUDIT.policy).read_text()) for v, c in CLOSURES.items()}


@functools.cache
def fresh(stack: str) -> dict:
    """The data as the real wheels give it now (downloaded into the test cache, sha256 checked)."""
    return audit.AUDIT.scan(CLOSURES[stack])


def gate(stack: str, package: str, key_start: str, data: dict | None = None) -> dict:
    data = DATA[stack] if data is None else data
    found = [g for k, g in data["packages"][package]["gates"].items() if k.startswith(key_start)]
    assert len(found) == 1, f"{stack} {package}: {key_start!r} names {len(found)} gates"
    return found[0]


@pytest.mark.parametrize("stack", STACKS)
def test_the_data_is_what_the_wheels_hold_for_the_composed_versions(stack):
    assert fresh(stack) == DATA[stack], "stale: run python -m sglang_eagle3_audits --write --only startup-gates"


@pytest.mark.parametrize("stack", STACKS)
def test_every_gate_that_raises_passes_or_has_a_reason(stack):
    assert audit.problems(DATA[stack], POLICY[stack]) == []
    verdicts = {g["verdict"] for p in DATA[stack]["packages"].values() for g in p["gates"].values()}
    assert "fail" in verdicts  # some fail (Python 3.10's code, and others with a reason): the judge says so


@pytest.mark.parametrize("stack", STACKS)
def test_a_failing_gate_without_a_reason_is_reported_and_so_is_a_reason_without_a_gate(stack):
    data = copy.deepcopy(DATA[stack])
    key = next(iter(POLICY[stack]["gates"]))
    package, _, gate_key = key.partition(": ")
    policy = copy.deepcopy(POLICY[stack])
    del policy["gates"][key]
    assert [p for p in audit.problems(data, policy) if gate_key in p]
    policy["gates"]["sglang: sglang/nothing.py f torch_release < (1, 0)"] = "a reason for nothing"
    assert [p for p in audit.problems(data, policy) if "matches no gate" in p]
    # A gate that starts failing (a version moved) is reported.
    entry = gate(
        stack, "sglang", "sglang/srt/entrypoints/engine.py _set_envs_and_config assert_pkg_version('flash", data
    )
    entry["verdict"] = "fail"
    assert [p for p in audit.problems(data, POLICY[stack]) if "engine.py" in p]


@pytest.mark.parametrize("stack", STACKS)
def test_a_gate_judged_otherwise_where_sglang_was_tested_needs_a_reason_about_kimi(stack):
    where = DATA[stack]["reference"]["environment"]
    differing = {f"{p}: {k}" for p, e in DATA[stack]["packages"].items() for k, g in e["gates"].items()
                 if f"verdict_{where}" in g}  # fmt: skip
    assert differing, "the environments differ somewhere (torchcodec is dropped)"
    policy = copy.deepcopy(POLICY[stack])
    name = next(iter(policy["differs"]))
    text = policy["differs"].pop(name)
    assert [p for p in audit.problems(DATA[stack], policy) if "and no reason in startup-gate-policy.json differs" in p]
    policy["differs"][name] = "a reason that names no model and cites no line"
    assert [p for p in audit.problems(DATA[stack], policy) if "must say what happens to Kimi-K2.5" in p]
    policy["differs"][name] = text
    policy["differs"]["sglang: sglang/nothing.py f x < 1"] = text
    assert [p for p in audit.problems(DATA[stack], policy) if "matches no gate whose verdict differs" in p]


def test_the_cudnn_check_stops_kimi_in_the_image_and_not_in_the_closure():
    cudnn = gate(
        "0.5.9", "sglang", "sglang/srt/server_args.py ServerArgs.check_torch_2_9_1_cudnn_compatibility version_float"
    )
    assert (cudnn["verdict"], cudnn["verdict_image"]) == ("pass", "fail")
    assert DATA["0.5.9"]["reference"]["cudnn"] == 91300 and DATA["0.5.9"]["composed"]["cudnn"] == 91600
    reason = POLICY["0.5.9"]["differs"][
        "sglang: sglang/srt/server_args.py ServerArgs.check_torch_2_9_1_cudnn_compatibility version_float < 9.15"
    ]
    assert "Kimi-K2.5" in reason and "server_args.py:5168" in reason and "0.5.23" in reason


def test_sglangs_cublas_check_is_judged_alike_once_the_closure_answers_its_metadata():
    """The issue's example: is_nvidia_cublas_version_ge_12_9 loops over two distribution names; both are gates now,
    true in the closure as where SGLang was tested, and it would differ without the closure's metadata."""
    for stack, composed in (("0.5.9", "13.1.0.3"), ("0.5.23", "13.1.0.3")):
        ours = gate(stack, "sglang", "sglang/srt/utils/common.py is_nvidia_cublas_version_ge_12_9 "
                    "check_pkg_version_at_least(pkg, '12.9') [pkg='nvidia-cublas']")  # fmt: skip
        assert ours["verdict"] == "true" and "verdict_" + DATA[stack]["reference"]["environment"] not in ours
        assert DATA[stack]["composed"]["packages"]["nvidia-cublas"] == composed
        cu12 = gate(stack, "sglang", "sglang/srt/utils/common.py is_nvidia_cublas_version_ge_12_9 "
                    "check_pkg_version_at_least(pkg, '12.9') [pkg='nvidia-cublas-cu12']")  # fmt: skip
        assert cu12["verdict"] == "not installed"
    (cublas,) = [g for k, g in sglang_gates("0.5.9").items() if "[pkg='nvidia-cublas']" in k]
    without = values("0.5.9")
    without.packages.pop("nvidia-cublas")
    assert cublas.verdict(values("0.5.9"))[1] == "true" and cublas.verdict(without)[1] == "not installed"


@pytest.mark.parametrize("stack", STACKS)
def test_what_the_reader_cannot_resolve_is_listed_with_its_site(stack):
    listed = [(p, u) for p, e in DATA[stack]["packages"].items() for u in e.get("unresolved", [])]
    assert listed and all(u["names"] and ".py:" in u["location"] for _, u in listed)
    assert audit.table(stack, DATA[stack]).splitlines()[0].endswith(
        f"{len(listed)} gates read a name not resolved to a constant.")  # fmt: skip


def test_sglangs_own_version_checks_pass_for_each_stack():
    for stack, kernel, flashinfer in (("0.5.9", "sgl-kernel", "0.6.3"), ("0.5.23", "sglang-kernel", "0.7.2")):
        entries = {
            k: g
            for k, g in DATA[stack]["packages"]["sglang"]["gates"].items()
            if k.startswith("sglang/srt/entrypoints/engine.py") and "assert_pkg_version(" in k
        }
        assert {g["effect"] for g in entries.values()} == {"raise"}
        assert {g["verdict"] for g in entries.values()} == {"pass"}
        reads = {r for g in entries.values() for r in g["reads"]}
        assert reads == {"package:flashinfer-python", f"package:{kernel}"}
        assert any(f"'{flashinfer}'" in k for k in entries)
    cudnn = gate(
        "0.5.9", "sglang", "sglang/srt/server_args.py ServerArgs.check_torch_2_9_1_cudnn_compatibility version_float"
    )
    assert (cudnn["reads"], cudnn["effect"], cudnn["verdict"]) == (["cudnn"], "raise", "pass")
    deep_ep = gate("0.5.23", "sgl-deep-ep", "deep_ep/__init__.py <module> _check_prerequisites")
    assert (deep_ep["reads"], deep_ep["verdict"]) == (["cuda"], "pass")


def values(stack: str, **change) -> gates.Values:
    composed = DATA[stack]["composed"]
    base = gates.Values(
        python=composed["python"],
        packages=dict(composed["packages"]),
        modules=dict(composed["modules"]),
        cuda=composed["cuda"],
        cudnn=composed["cudnn"],
        nccl=tuple(int(p) for p in composed["nccl"].split(".")),
        device=audit.TUNED_HOST,
    )
    packages = change.pop("packages", {})
    base.packages.update(packages)
    return dataclasses.replace(base, **change)


def sglang_gates(stack: str) -> dict[str, gates.Gate]:
    """SGLang's gates read from its wheel, as objects that can be judged again."""
    closure = CLOSURES[stack]
    path = closure.wheel(closure.server["sglang"]["package"])
    found = {}
    for record in closure.scanned(gate_scan.SCANNER, path)["gates"]:
        found[unique(found, gates.Gate.from_record(record).key())] = record
    return {k: gates.Gate.from_record(r) for k, r in found.items()}


def test_the_gates_fail_when_the_stack_composes_the_wrong_versions():
    found = sglang_gates("0.5.9")
    cudnn = next(g for k, g in found.items() if "check_torch_2_9_1_cudnn_compatibility" in k and g.effect == "raise")
    flashinfer = next(g for k, g in found.items() if "assert_pkg_version('flashinfer_python'" in k)
    kernel = next(g for k, g in found.items() if "assert_pkg_version('sgl-kernel'" in k)
    right = values("0.5.9")
    assert [g.verdict(right)[1] for g in (cudnn, flashinfer, kernel)] == ["pass"] * 3
    # nixpkgs' cudaPackages_13_0.cudnn (9.13.0), the one 0.5.9 refuses; and an older FlashInfer and kernel.
    assert cudnn.verdict(values("0.5.9", cudnn=91300))[1] == "fail"
    assert flashinfer.verdict(values("0.5.9", packages={"flashinfer-python": "0.6.2"}))[1] == "fail"
    assert kernel.verdict(values("0.5.9", packages={"sgl-kernel": "0.3.20+cu130"}))[1] == "fail"
    # The cuDNN check is for torch 2.9.1 only: under torch 2.10 it is not reached.
    assert cudnn.verdict(values("0.5.9", cudnn=91300, packages={"torch": "2.10.0+cu130"}))[1] == "unreached"


def test_a_gate_that_reads_the_gpu_is_judged_for_a_host():
    found = sglang_gates("0.5.9")
    fa3 = next(
        g for k, g in found.items() if k.startswith("sglang/srt/layers/attention/attention_registry.py") and g.host
    )
    assert fa3.verdict(values("0.5.9"))[1] == "fail"  # FlashAttention 3 wants SM90; the tuned host is SM120
    hopper = gates.Device(major=9, minor=0, name="NVIDIA H200")
    assert fa3.verdict(values("0.5.9", device=hopper))[1] == "pass"
    assert fa3.verdict(values("0.5.9", device=None))[1] == "unevaluated"  # no GPU, no verdict


NEW_CODE = {
    "pkg/__init__.py": "from .util import torch_release\nfrom .check import require\n",
    "pkg/util.py": "import torch\nfrom packaging import version\n"
    "torch_release = version.parse(torch.__version__).release\n",
    "pkg/check.py": "from importlib.metadata import version as v\nfrom packaging.version import parse\n"
    "def require(name, least):\n    if parse(v(name)) < parse(least):\n        raise RuntimeError(name)\n",
    "pkg/_meta.py": 'LEAST = "2.0"\n',
    "pkg/server.py": "import sys\nimport torch\nfrom pkg import torch_release\nfrom pkg.check import require\n"
    "from pkg._meta import LEAST\n"
    "if torch_release < (2, 8):\n    raise ImportError('torch too old')\n"
    "require('numpy', LEAST)\n"
    "def pick():\n    cuda = torch.version.cuda\n    major = int(cuda.split('.')[0])\n"
    "    return 'new' if major >= 13 else 'old'\n"
    "def warn():\n    if sys.version_info < (3, 13):\n        import warnings\n        warnings.warn('old python')\n",
}


def test_the_reader_finds_gates_in_new_code():
    found = {(g.file, g.line): g for g in gate_scan.wheel_gates(list(NEW_CODE.items()))}
    stack = values("0.5.9", packages={"numpy": "1.26.4"})
    judged = {where: (g.effect, g.kinds, g.verdict(stack)[1]) for where, g in found.items()}
    assert judged[("pkg/server.py", 6)] == (
        "raise",
        ["torch"],
        "pass",
    )  # 2.9.1 is not < 2.8: read through the shared name
    assert judged[("pkg/server.py", 8)] == ("raise", ["package:numpy"], "fail")  # the helper, with a module constant
    assert judged[("pkg/server.py", 12)] == ("branch", ["cuda"], "true")  # CUDA 13.0: the new code
    assert judged[("pkg/server.py", 14)] == ("warn", ["python"], "warns")
    assert judged[("pkg/check.py", 4)][2] == "helper"  # judged at each call, not on its own
    # numpy 2 passes the helper's gate; a distribution the closure lacks is "not installed", not a failure.
    assert found[("pkg/server.py", 8)].verdict(values("0.5.9", packages={"numpy": "2.1.0"}))[1] == "pass"
    without = values("0.5.9")
    without.packages.pop("numpy", None)
    assert found[("pkg/server.py", 8)].verdict(without)[1] == "not installed"


def test_a_gate_inside_the_package_tests_is_not_read():
    code = {"pkg/tests/test_x.py": "import sys\nassert sys.version_info < (3, 0)\n"}
    assert gate_scan.wheel_gates(list(code.items())) == []
    assert gate_scan.wheel_gates([("pkg/x.py", code["pkg/tests/test_x.py"])]) != []


def test_docs_show_the_gate_tables_of_the_data():
    text = (REPO / "docs" / "nix.md").read_text()
    for stack in STACKS:
        assert audit.table(stack, DATA[stack]) in text, "run python -m sglang_eagle3_audits --write --docs"
