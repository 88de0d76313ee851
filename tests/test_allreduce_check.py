"""nix/scripts/allreduce-check.py: the all-reduce harness for several GPUs, its logic here on CPU.

Its arithmetic (the size ladder, nccl-tests' bus bandwidth, the exact bf16 pattern and its check, the bf16
bound), what it reads from the real FlashInfer 0.6.3 and 0.7.2 wheels (the paths each has, the rank counts
their kernels take) and the wrapper's variables of nix/runtime-env.json are checked directly; one run at
world size 2 with torch.distributed's gloo backend on CPU checks the figures it writes and the FlashInfer
paths it skips with their reason. The GPU run is skipped without GPUs (docs/gpu-host.md has its figures).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import PurePosixPath

import pytest
from conftest import CACHE, REPO
from support.own_resources import missing_path
from support.pinned_wheels import fetch_wheel
from support.scripts import load_script

SCRIPT = REPO / "nix" / "scripts" / "allreduce-check.py"
RUNTIME_ENV = REPO / "nix" / "runtime-env.json"
SITE_SCRIPT = REPO / "nix" / "scripts" / "flashinfer-comm-site.py"
# The files of a FlashInfer wheel the script reads to know what it offers (it imports flashinfer.comm, which
# needs CUDA, only to run a path).
OFFER_FILES = (
    "flashinfer/__init__.py",
    "flashinfer/_build_meta.py",
    "flashinfer/comm/__init__.py",
    "flashinfer/comm/pcie_ipc_ar.py",
    "flashinfer/data/include/flashinfer/comm/trtllm_allreduce_fusion.cuh",
)
WHEELS = {"0.6.3": ("flashinfer-python", None), "0.7.2": ("flashinfer-python-0.7.2", "flashinfer-python")}


ar = load_script(SCRIPT)


@pytest.fixture(scope="module")
def torch():
    """torch, for the tests that compute with it: imported at collection, every worker would pay for it (about 1 s)."""
    import torch

    return torch


@pytest.fixture(scope="module")
def flashinfer_sites(tmp_path_factory):
    """The real wheels' files the script reads, unpacked as an installed package is laid out."""
    sites = {}
    for version, (pin, package) in WHEELS.items():
        site = tmp_path_factory.mktemp(f"flashinfer-{version}")
        with zipfile.ZipFile(fetch_wheel(pin, CACHE, package)) as wheel:
            for name in OFFER_FILES:
                if name in wheel.namelist():
                    wheel.extract(name, site)
        sites[version] = site
    return sites


def test_the_default_ladder_doubles_from_4_kib_to_256_mib():
    args = ar.parse_args([])
    assert args.sizes[0] == 4 << 10 and args.sizes[-1] == 256 << 20
    assert len(args.sizes) == 17 and all(b == 2 * a for a, b in zip(args.sizes, args.sizes[1:], strict=False))
    assert ar.parse_args(["--min-bytes", "1M", "--max-bytes", "1M"]).sizes == [1 << 20]
    assert args.batches == [1, 2, 4, 8, 16, 32, 64] and args.hidden == 7168
    assert args.parts == ["nccl", "fusion", "pcie_ipc"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--min-bytes", "3000"], "--min-bytes 3000: must be a power of two"),
        (["--min-bytes", "1M", "--max-bytes", "4K"], "--min-bytes 1048576 is larger than --max-bytes 4096"),
        (["--max-bytes", "lots"], "'lots' is not a size"),
        (["--parts", "nccl,nvls"], "unknown part(s): nvls"),
        (["--batches", "1,0"], "each 1 or more"),
        (["--batches", "one"], "give token counts separated by commas"),
        (["--hidden", "7170"], "--hidden 7170: must be a positive multiple of 8"),
        (["--nproc", "0"], "--nproc 0: give 1 or more ranks"),
        (["--runtime-env", "{missing}/runtime-env.json"], "no such file"),
        (["--nproc", "13"], "--nproc 13: the exact bf16 sums allow at most 12 ranks"),
        (["--timeout", "0"], "--timeout 0: give 1 second or more"),
        (["--json", "{missing}/dir/out.json"], "{missing}/dir is not a directory this user can write"),
    ],
)
def test_bad_arguments_exit_2_saying_what_is_wrong(argv, said, capsys, tmp_path):
    missing = missing_path(tmp_path)  # the test's own: a fixed /nonexistent/dir may exist on a busy machine
    argv, said = [a.replace("{missing}", str(missing)) for a in argv], said.replace("{missing}", str(missing))
    with pytest.raises(SystemExit) as exit_:
        ar.parse_args(argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not readable JSON"),
        ('{"variables": {}}', 'has no "environment" object'),
        ('{"environment": {"X": {"value": "nixpkgs:thing"}}}', "X: value 'nixpkgs:thing' has no host equivalent"),
    ],
)
def test_a_bad_runtime_env_file_exits_2_before_any_rank_starts(text, said, tmp_path, capsys):
    bad = tmp_path / "runtime-env.json"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        ar.parse_args(["--runtime-env", str(bad)])
    assert exit_.value.code == 2
    assert f"--runtime-env {bad}: {said}" in capsys.readouterr().err


def test_a_world_size_torchrun_gives_beyond_the_exact_sums_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "16")
    assert ar.main([]) == 2
    assert "world size 16: the exact bf16 sums allow at most 12 ranks" in capsys.readouterr().err


def test_a_failed_baseline_is_printed_with_its_error_not_a_crash(capsys):
    report = {"world_size": 2, "backend": "nccl", "decode": {"hidden": 7168},
              "decode_nccl": {"status": "failed", "error": "DistBackendError: NCCL error"},
              "fusion": {"status": "skipped", "reason": "the NCCL baseline at decode sizes failed"},
              "failures": ["decode_nccl"]}  # fmt: skip
    ar.print_table(report)
    out = capsys.readouterr().out
    assert "decode_nccl: failed: DistBackendError: NCCL error" in out
    assert "fusion: skipped: the NCCL baseline at decode sizes failed" in out
    assert "1 failed: decode_nccl" in out


def test_the_run_status_is_the_first_failure_and_a_signal_fails_it():
    assert ar.run_status([0, 0, 0]) == 0
    assert ar.run_status([0, None, 0]) == 0  # still running: not a failure yet
    assert ar.run_status([0, 3, 1]) == 3
    assert ar.run_status([None, -9]) == 1  # killed by SIGKILL


def test_the_first_rank_to_fail_stops_the_others(monkeypatch, tmp_path):
    """spawn's ranks, replaced by two tiny programs: rank 0 fails at once, rank 1 would wait a minute (as a rank
    waits in a collective for one that died). The run ends with rank 0's status and rank 1 stopped."""
    started, real_popen = [], subprocess.Popen

    def rank_program(argv, env):
        code = "import sys; sys.exit(3)" if env["RANK"] == "0" else "import time; time.sleep(60)"
        process = real_popen([sys.executable, "-c", code])
        started.append(process)
        return process

    monkeypatch.setattr(ar.subprocess, "Popen", rank_program)
    args = ar.parse_args(["--nproc", "2", "--backend", "gloo"])
    assert ar.spawn(args) == 3
    assert started[1].returncode is not None and started[1].returncode < 0  # terminated, not left running


def test_bus_bandwidth_is_nccl_tests_formula():
    assert [ar.bus_factor(n) for n in (1, 2, 4, 8)] == [0, 1, 1.5, 1.75]
    algbw, busbw = ar.bandwidths(2 * 10**9, 0.5, 8)  # 2 GB in half a second
    assert algbw == pytest.approx(4.0) and busbw == pytest.approx(7.0)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 12])
def test_the_pattern_sums_exactly_in_bf16_in_any_order(n, torch):
    period = ar.pattern_period(n)
    parts = [ar.fill_pattern(torch.empty(4096, dtype=torch.bfloat16), r, period) for r in range(n)]
    for order in (parts, parts[::-1], parts[1::2] + parts[::2]):
        total = torch.zeros(4096, dtype=torch.bfloat16)
        for part in order:
            total += part  # rounded to bf16 after every addition, as a ring all-reduce rounds each step
        assert ar.check_sum(total, n, period) == {"ok": True, "mismatches": 0}


def test_the_pattern_refuses_more_ranks_than_bf16_sums_exactly():
    with pytest.raises(ValueError, match="at most 12 ranks"):
        ar.pattern_period(13)


def test_a_wrong_sum_is_found_with_its_first_element(torch):
    n, period = 8, ar.pattern_period(8)
    parts = [ar.fill_pattern(torch.empty(8192, dtype=torch.bfloat16), r, period) for r in range(n)]
    right = sum(p.float() for p in parts).to(torch.bfloat16)
    one = right.clone()
    one[5000] += 1
    # element 5000 of the sum over 8 ranks: 36 x (1 + 5000 % 7) = 108
    assert ar.check_sum(one, n, period) == {"ok": False, "mismatches": 1, "first_wrong": 5000, "got": 109.0,
                                            "want": 108.0}  # fmt: skip
    missing_rank = sum(p.float() for p in parts[:-1]).to(torch.bfloat16)
    assert ar.check_sum(missing_rank, n, period)["mismatches"] == 8192
    moved = right.roll(4096)  # a chunk delivered to the wrong place
    assert not ar.check_sum(moved, n, period)["ok"]


def test_the_bf16_bound_takes_a_real_bf16_sum_and_not_one_rank_short(torch):
    gen = torch.Generator().manual_seed(0)
    n = 8
    xs = [torch.randn(64, 7168, generator=gen).to(torch.bfloat16) for _ in range(n)]
    exact = sum(x.float() for x in xs)
    bound = ar.sum_bound(sum(x.float().abs() for x in xs), n)
    ring = torch.zeros_like(xs[0])
    for x in xs:
        ring += x
    assert ar.within(ring, exact, bound)["ok"]
    short = ar.within(sum(x.float() for x in xs[1:]).to(torch.bfloat16), exact, bound)
    assert not short["ok"] and short["bad"] > xs[0].numel() // 2  # most elements, not a rare one


def test_the_norm_bound_takes_bf16_rmsnorm_and_not_a_wrong_gamma(torch):
    gen = torch.Generator().manual_seed(1)
    r = torch.randn(16, 7168, generator=gen).to(torch.bfloat16)
    gamma = (1 + 0.1 * torch.randn(7168, generator=gen)).to(torch.bfloat16)
    ref = ar.rmsnorm(r.float(), gamma.float())
    in_bf16 = (r.float() * (r.float().pow(2).mean(-1, keepdim=True) + ar.RMS_EPS).rsqrt()).to(torch.bfloat16) * gamma
    assert ar.within(in_bf16, ref, ar.norm_bound(ref))["ok"]
    assert not ar.within(ar.rmsnorm(r.float(), 1.1 * gamma.float()), ref, ar.norm_bound(ref))["ok"]


def test_what_the_real_flashinfer_wheels_offer(flashinfer_sites):
    old = ar.flashinfer_offers(flashinfer_sites["0.6.3"] / "flashinfer")
    new = ar.flashinfer_offers(flashinfer_sites["0.7.2"] / "flashinfer")
    assert old["version"] == "0.6.3" and new["version"] == "0.7.2"
    # the TRT-LLM fusion kernel's rank dispatch, read from each header
    assert old["fusion_ranks"] == new["fusion_ranks"] == [2, 4, 8, 16]
    assert ar.fusion_api(old) == "legacy" and ar.fusion_api(new) == "unified"  # SGLang 0.5.9's, 0.5.23's calls
    assert old["pcie_ipc"] is False and old["pcie_ipc_ranks"] is None
    assert new["pcie_ipc"] is True and new["pcie_ipc_ranks"] == [2, 4, 8]


def test_skip_reasons_name_what_is_missing(flashinfer_sites):
    old = ar.flashinfer_offers(flashinfer_sites["0.6.3"] / "flashinfer")
    new = ar.flashinfer_offers(flashinfer_sites["0.7.2"] / "flashinfer")
    assert "FlashInfer 0.6.3 has no PcieIpcAllReduceWorkspace" in ar.skip_reason("pcie_ipc", old, 8, "cuda")
    one_gpu = ar.skip_reason("fusion", new, 1, "cuda")
    assert "world size 1" in one_gpu and "[2, 4, 8, 16]" in one_gpu and "trtllm_allreduce_fusion.cuh" in one_gpu
    assert ar.skip_reason("fusion", old, 8, "cpu") == "needs CUDA GPUs (this run is on CPU)"
    assert "not installed" in ar.skip_reason("fusion", None, 8, "cuda")
    # runnable: left to FlashInfer (the PCIe-IPC workspace's own world-size refusal is recorded as it says it)
    assert ar.skip_reason("fusion", old, 8, "cuda") is None
    assert ar.skip_reason("pcie_ipc", new, 1, "cuda") is None and ar.skip_reason("pcie_ipc", new, 8, "cuda") is None
    no_fusion = dict(old, fusion_legacy_api=False, fusion_unified_api=False)
    assert "exports no TRT-LLM all-reduce fusion" in ar.skip_reason("fusion", no_fusion, 8, "cuda")


def test_the_wrapper_variables_are_every_one_of_runtime_env_json(tmp_path):
    spec = json.loads(RUNTIME_ENV.read_text())
    environ = {"CC": "/wrapper/bin/cc"}
    cuda = missing_path(tmp_path, "cuda")
    record = ar.wrapper_environment(spec, str(cuda), environ)
    assert [r["name"] for r in record] == list(spec["environment"])
    by_name = {r["name"]: r for r in record}
    assert by_name["CC"] == {"name": "CC", "value": "/wrapper/bin/cc", "how": "already set"}  # the caller's wins
    assert by_name["CUDA_HOME"]["how"] == f"left unset: no bin/nvcc under {cuda}"
    assert "CUDA_HOME" not in environ
    assert by_name["TORCH_CUDA_ARCH_LIST"]["how"].startswith("left unset: only when capabilities are chosen")
    # A plain value is set as it is, as the wrapper's --set-default does (nix/runtime-env.nix).
    assert by_name["FLASHINFER_NO_DOWNLOAD"] == {"name": "FLASHINFER_NO_DOWNLOAD", "value": "1",
                                                 "how": "set from nix/runtime-env.json, as it is"}  # fmt: skip
    for r in record:  # what was set is in the environment the ranks load FlashInfer with
        assert (r["value"] is None) is (r["name"] not in environ) or r["how"] == "already set"


def test_a_runtime_env_value_the_script_cannot_resolve_is_an_error():
    spec = json.loads(RUNTIME_ENV.read_text())
    spec["environment"]["NEW_VARIABLE"] = {"value": "nixpkgs:something", "why": "a test"}
    with pytest.raises(ValueError, match="NEW_VARIABLE: value 'nixpkgs:something'"):
        ar.wrapper_environment(spec, "/cuda", {})


def test_world_size_2_on_cpu_with_gloo(flashinfer_sites, tmp_path):
    """The whole harness at world size 2 (gloo, CPU), the real FlashInfer 0.6.3 files on its path."""
    out = tmp_path / "allreduce.json"
    env = {**os.environ, "PYTHONPATH": str(flashinfer_sites["0.6.3"])}
    env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "NCCL_NVLS_ENABLE")}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--nproc", "2", "--backend", "gloo", "--max-bytes", "64K", "--hidden", "256",
         "--batches", "1,4", "--iters", "3", "--warmup", "1", "--kind", "cpu", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["world_size"] == 2 and report["backend"] == "gloo" and report["kind"] == "cpu"
    assert report["command"].endswith("--json " + str(out)) and "--nproc 2" in report["command"]
    sizes = report["nccl"]["sizes"]
    assert [s["bytes"] for s in sizes] == [4096, 8192, 16384, 32768, 65536]
    for s in sizes:
        assert s["correct"] is True and s["us"] > 0
        assert s["algbw_gbps"] == pytest.approx(s["bytes"] / (s["us"] / 1e6) / 1e9, rel=0.02, abs=0.01)
        assert s["busbw_gbps"] == s["algbw_gbps"]  # 2(n-1)/n = 1 at two ranks
    assert report["nccl"]["negative_control"]["caught"] is True and report["nccl"]["status"] == "passed"
    assert [r["batch"] for r in report["decode_nccl"]["rows"]] == [1, 4]
    assert all(r["within_bound"] and r["us"] > 0 and r["add_rmsnorm_us"] > 0 for r in report["decode_nccl"]["rows"])
    assert report["environment"]["multicast_off"] == ar.MULTICAST_OFF
    assert report["environment"]["nccl_variables"]["NCCL_NVLS_ENABLE"] == "0"
    assert [w["name"] for w in report["environment"]["wrapper"]] == list(
        json.loads(RUNTIME_ENV.read_text())["environment"]
    )
    assert report["software"]["flashinfer"]["version"] == "0.6.3"
    assert report["fusion"] == {"status": "skipped", "reason": "needs CUDA GPUs (this run is on CPU)"}
    assert report["pcie_ipc"]["status"] == "skipped"
    assert "FlashInfer 0.6.3 has no PcieIpcAllReduceWorkspace" in report["pcie_ipc"]["reason"]
    assert report["failures"] == []
    assert "busbw GB/s" in result.stdout and "negative control caught: True" in result.stdout
    assert "pcie_ipc: skipped: FlashInfer 0.6.3 has no PcieIpcAllReduceWorkspace" in result.stdout


def gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    return sum(line.startswith("GPU ") for line in out.splitlines())


@pytest.mark.skipif(gpu_count() == 0, reason="needs a GPU host: no nvidia-smi or no GPU")
def test_on_the_gpus_of_this_host(tmp_path):
    n = gpu_count()
    out = tmp_path / "allreduce.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--nproc", str(n), "--max-bytes", "16M", "--iters", "10", "--json", str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["backend"] == "nccl" and report["world_size"] == n
    assert all(s["correct"] for s in report["nccl"]["sizes"]) and report["nccl"]["negative_control"]["caught"]
    assert report["software"]["nccl"]["version"] and report["software"]["nccl"]["library"]
    if n == 1:  # NCCL launches nothing at one rank: no graph figure, the reason instead (docs/gpu-host.md (i))
        assert all("graph is empty" in r["graph_error"] for r in report["decode_nccl"]["rows"])
    for part in ("fusion", "pcie_ipc"):  # ran and passed, or skipped with a reason: never failed
        assert report[part]["status"] in ("passed", "skipped"), report[part]
        assert report[part]["status"] == "passed" or report[part]["reason"]


def test_the_cut_down_flashinfer_0_7_2_keeps_what_the_all_reduce_paths_load(tmp_path):
    """nix/scripts/flashinfer-comm-site.py on the real 0.7.2 wheel: what a device call carries for the paths."""
    wheel = fetch_wheel("flashinfer-python-0.7.2", CACHE, "flashinfer-python")
    out = tmp_path / "fi.tar.gz"
    result = subprocess.run([sys.executable, str(SITE_SCRIPT), str(wheel), str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size < 16 << 20  # with the harness and the other wheels, well inside a call's 64 MiB
    with tarfile.open(out) as tar:  # one pass: a gzip stream read member by member
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    names = {name for name, _ in members}
    sources = {name: data.decode() for name, data in members if name.endswith((".py", ".cu"))}
    init = sources["flashinfer/__init__.py"]
    csrc = "flashinfer/data/csrc/"
    # the sources of the two modules, as jit/comm.py's generators name them
    for cu in ("trtllm_allreduce.cu", "trtllm_allreduce_fusion.cu", "trtllm_moe_allreduce_fusion.cu",
               "pcie_ipc_all_reduce.cu"):  # fmt: skip
        assert csrc + cu in names
    assert not any(n.startswith(("flashinfer/experimental/", "flashinfer/fused_moe/")) for n in names)
    assert not any(n.endswith((".so", ".cubin")) for n in names)
    assert "import jit" in init and "attention" not in init
    # every header a kept source includes is there
    for name, text in sources.items():
        if name.endswith(".cu"):
            for header in re.findall(r'#include "([^"]+)"', text):
                assert csrc + header in names or "flashinfer/data/include/" + header in names, (name, header)
    # every import flashinfer.comm makes of its own package resolves inside the archive
    for name, text in sources.items():
        if not name.startswith("flashinfer/comm/") or not name.endswith(".py"):
            continue
        package = PurePosixPath(name).parent
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("flashinfer")):
                base = package.parents[node.level - 2] if node.level > 1 else package
                base = base if node.level else PurePosixPath()
                target = base.joinpath(*(node.module or "").split(".")) if node.module else base
                assert f"{target}.py" in names or f"{target}/__init__.py" in names, (name, ast.unparse(node))


def test_the_cut_down_flashinfer_refuses_what_is_not_a_flashinfer_wheel(tmp_path):
    not_zip = tmp_path / "flashinfer.whl"
    not_zip.write_text("no")
    result = subprocess.run([sys.executable, str(SITE_SCRIPT), str(not_zip), str(tmp_path / "o.tgz")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "not a wheel" in result.stderr
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("other/__init__.py", "")
    result = subprocess.run([sys.executable, str(SITE_SCRIPT), str(other), str(tmp_path / "o.tgz")],
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "no flashinfer/jit/comm.py" in result.stderr
    result = subprocess.run([sys.executable, str(SITE_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 2 and "usage:" in result.stderr
