"""The probe, on the pristine and the patched SGLang 0.5.9 source; the GPUs' links from nvidia-smi topo -m."""

from __future__ import annotations

import json
import re

import pytest
from sglang_eagle3.host import gpus
from sglang_eagle3.judging import speculative_support
from sglang_eagle3.source.tree import locate
from support.gpus import DATA, fake_nvidia_smi

KIMI = "KimiK25ForConditionalGeneration"


def run_probe(tree, **kwargs) -> speculative_support.ProbeResult:
    return speculative_support.probe(locate(tree), **kwargs)


def source_lines(tree, rel: str, needle: str) -> set[str]:
    """file:line of every line of sglang/<rel> containing needle: found independently of the probe."""
    lines = (tree / "sglang" / rel).read_text().splitlines()
    return {f"{rel}:{i}" for i, line in enumerate(lines, 1) if needle in line}


def test_unpatched_kimi_is_not_ready_and_names_the_missing_methods(pristine_tree, run_cli):
    report = run_probe(pristine_tree, arch=KIMI, algorithm="EAGLE3")
    assert not report.passed and report.verdict == "fail"
    assert set(report.missing) == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    result = run_cli("probe", "--sglang", str(pristine_tree))
    assert result.returncode == 1
    assert "Verdict: FAIL" in result.stdout
    assert f"[FAIL] get_embed_and_head: not defined in {KIMI}" in result.stdout
    assert f"[FAIL] set_eagle3_layers_to_capture: not defined in {KIMI}" in result.stdout


def test_patched_kimi_is_ready_by_forwarding_to_the_inner_model(patched_tree, run_cli):
    report = run_probe(patched_tree, arch=KIMI, algorithm="EAGLE3")
    assert report.passed, report.findings
    for m in report.methods:
        assert m.how.startswith("forwarded to self.language_model"), m.how
        assert "DeepseekV3ForCausalLM" in m.how and "deepseek_v2.py" in m.how
    assert run_cli("probe", "--sglang", str(patched_tree)).returncode == 0


def test_call_sites_are_the_ones_in_the_source(pristine_tree):
    report = run_probe(pristine_tree, arch=KIMI, algorithm="EAGLE3")
    sites = {m.method: {s.location for s in m.call_sites} for m in report.methods}
    expected_embed = set()
    for worker in ("eagle_worker", "eagle_worker_v2", "multi_layer_eagle_worker", "multi_layer_eagle_worker_v2"):
        expected_embed |= source_lines(
            pristine_tree, f"srt/speculative/{worker}.py", "target_worker.model_runner.model.get_embed_and_head()"
        )
    assert sites["get_embed_and_head"] == {f"srt/{s.removeprefix('srt/')}" for s in expected_embed}
    capture = source_lines(
        pristine_tree, "srt/model_executor/model_runner.py", "self.model.set_eagle3_layers_to_capture("
    )
    capture |= source_lines(
        pristine_tree, "srt/model_executor/cuda_graph_runner.py", "model.set_eagle3_layers_to_capture()"
    )
    assert sites["set_eagle3_layers_to_capture"] == capture
    assert len(capture) == 3  # model_runner.py twice (initialize, _dummy_run), cuda_graph_runner.py once
    by_location = {s.location: s for m in report.methods for s in m.call_sites}
    # Conditions are reported as SGLang writes them.
    assert any("eagle_use_aux_hidden_state" in by_location[loc].condition for loc in capture)


@pytest.mark.parametrize("algorithm", ["EAGLE", "NEXTN"])
def test_non_eagle3_algorithms_do_not_need_layer_capture(pristine_tree, algorithm):
    report = run_probe(pristine_tree, arch=KIMI, algorithm=algorithm)
    assert set(report.missing) == {"get_embed_and_head"}
    if algorithm == "NEXTN":
        assert report.algorithm == "NEXTN (= EAGLE)"  # alias read from server_args.py


@pytest.mark.parametrize("arch", ["DeepseekV3ForCausalLM", "LlamaForCausalLM"])
def test_models_that_define_the_methods_are_ready(pristine_tree, patched_tree, arch):
    # On H200 (9.0) the pristine tree has no SM problems, so only the methods decide.
    assert run_probe(pristine_tree, arch=arch, compute_capability="9.0").passed
    assert run_probe(patched_tree, arch=arch, compute_capability="12.0").passed


def test_requirements_are_derived_from_the_source_not_hard_coded(pristine_tree, tree_copy):
    tree = tree_copy(pristine_tree)
    worker = tree / "sglang/srt/speculative/eagle_worker.py"
    text = worker.read_text()
    anchor = "        embed, head = self.target_worker.model_runner.model.get_embed_and_head()\n"
    assert anchor in text
    worker.write_text(
        text.replace(anchor, anchor + "        self.target_worker.model_runner.model.get_spec_hidden_size()\n")
    )
    report = run_probe(tree, arch="DeepseekV3ForCausalLM", compute_capability="9.0")
    assert report.missing == ["get_spec_hidden_size"]
    site = report.methods[[m.method for m in report.methods].index("get_spec_hidden_size")].call_sites[0]
    assert site.location.startswith("srt/speculative/eagle_worker.py:") and site.worker == "EAGLEWorker"


def test_capability_report_unpatched_sm120(pristine_tree):
    result = run_probe(pristine_tree, compute_capability="12.0")
    report = result.allreduce
    assert report.torch_symm_mem.effect == "crash"
    assert re.search(
        r"KeyError: 12 at srt/distributed/device_communicators/torch_symm_mem.py:\d+", report.torch_symm_mem.detail
    )
    assert report.allreduce_fusion.effect == "ignored"
    found = {f.name: f for f in result.findings}
    assert (
        found["--enable-torch-symm-mem"].status == "fail" and "would crash" in found["--enable-torch-symm-mem"].message
    )
    fusion = found["--enable-flashinfer-allreduce-fusion"]
    assert fusion.status == "warn" and "allows SM9x, SM10x only" in fusion.message


def test_capability_report_patched_sm120(patched_tree):
    result = run_probe(patched_tree, compute_capability="12.0")
    report = result.allreduce
    assert report.torch_symm_mem.effect == "loads"
    assert "two-shot" in report.torch_symm_mem.detail and "128 MiB" in report.torch_symm_mem.detail
    assert "multicast" in report.torch_symm_mem.warning  # may still disable itself on PCIe
    assert report.allreduce_fusion.effect == "active"
    assert "requested explicitly" in report.allreduce_fusion.detail
    assert report.allreduce_fusion.warning  # opt-in, may fail on FlashInfer 0.6.3
    flags = [f for f in result.findings if f.name.startswith("--enable-")]
    assert [f.status for f in flags] == ["warn", "warn"]  # the two warnings above; neither fails


def test_capability_report_hopper(pristine_tree):
    report = run_probe(pristine_tree, compute_capability="9.0", tp_size=8).allreduce
    assert report.torch_symm_mem.effect == "loads" and "multimem" in report.torch_symm_mem.detail
    assert report.allreduce_fusion.effect == "auto"
    assert run_probe(pristine_tree, compute_capability="9.0", tp_size=3).allreduce.torch_symm_mem.effect == "disabled"


def test_not_requested_optimisations_are_not_problems(pristine_tree):
    report = run_probe(pristine_tree, arch="DeepseekV3ForCausalLM", torch_symm_mem=False, allreduce_fusion=False)
    assert report.passed
    assert report.allreduce.torch_symm_mem.effect == "not requested"


def test_json_output(pristine_tree, run_cli):
    result = run_cli("probe", "--sglang", str(pristine_tree), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["verdict"] == "fail"
    failed = sorted(f["name"] for f in data["findings"] if f["status"] == "fail")
    assert failed == ["--enable-torch-symm-mem", "get_embed_and_head", "set_eagle3_layers_to_capture"]
    assert set(data["findings"][0]) == {"name", "status", "message", "where"}
    assert data["allreduce"]["torch_symm_mem"]["effect"] == "crash"


def test_bad_inputs_get_clear_messages(pristine_tree, tmp_path, run_cli):
    result = run_cli("probe", "--sglang", str(tmp_path))
    assert result.returncode == 2 and "does not contain an SGLang source tree" in result.stderr
    result = run_cli("probe", "--sglang", str(pristine_tree), "--compute-capability", "sm120")
    assert result.returncode == 2 and "is not of the form 12.0" in result.stderr
    result = run_cli("probe", "--sglang", str(pristine_tree), "--arch", "KimiK25ForConditionalGen")
    assert result.returncode == 2 and "no class KimiK25ForConditionalGen" in result.stderr
    assert "did you mean KimiK25ForConditionalGeneration" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


# -- an SGLang named by its version, and the hints that name the tree --------------------------------------


def test_a_version_is_read_from_its_pristine_wheel_without_installing_it(pristine_tree, release_cache, run_cli):
    """`probe --sglang 0.5.9` on a machine without SGLang: the pinned wheel (sha256 checked) is unpacked in the
    cache and read; the verdict is the one the pristine tree gives, and the fix names no cache path to patch."""
    by_version = run_cli("probe", "--sglang", "0.5.9", "--json", env=release_cache)
    by_tree = run_cli("probe", "--sglang", str(pristine_tree), "--json")
    assert by_version.returncode == by_tree.returncode == 1, by_version.stderr
    read, direct = json.loads(by_version.stdout), json.loads(by_tree.stdout)
    assert read["sglang_version"] == "0.5.9" and read["findings"] == direct["findings"]
    assert read["sglang_root"].startswith(release_cache["XDG_CACHE_HOME"])
    assert read["apply_command"] == "sglang-eagle3 patch apply --sglang DIR, DIR being the SGLang 0.5.9 you serve"
    text = run_cli("probe", "--sglang", "0.5.9", env=release_cache).stdout
    assert "Fix: apply this project's patch set (sglang-eagle3 patch apply --sglang DIR, DIR being" in text


def test_the_fix_names_the_tree_that_was_probed_and_following_it_patches_that_tree(pristine_tree, tree_copy,
                                                                                  run_cli):  # fmt: skip
    """`patch verify --sglang T`, the probe and preflight said `run sglang-eagle3 patch apply` without T, which
    patches the importable SGLang instead: each hint carries T, and running verify's hint makes T pass."""
    tree = tree_copy(pristine_tree)
    probed = run_cli("probe", "--sglang", str(tree))
    assert f"Fix: apply this project's patch set (sglang-eagle3 patch apply --sglang {tree}), " in probed.stdout
    verified = run_cli("patch", "verify", "--sglang", str(tree))
    assert verified.returncode == 1
    hint = re.search(r"run `(sglang-eagle3 patch apply [^`]+)`", verified.stderr).group(1)
    assert hint == f"sglang-eagle3 patch apply --sglang {tree}"
    assert run_cli(*hint.split()[1:]).returncode == 0  # as a user would follow it
    assert run_cli("patch", "verify", "--sglang", str(tree)).returncode == 0
    assert run_cli("probe", "--sglang", str(tree)).returncode == 0


def test_the_former_option_names_are_gone(pristine_tree, run_cli):
    for former in ("--target", "--against"):
        result = run_cli("probe", former, str(pristine_tree), "--json")
        assert result.returncode == 2 and f"No such option '{former}'" in result.stderr


def test_the_probe_takes_the_settings_serve_takes(patched_tree, tmp_path, run_cli):
    """--config and --set, as serve: the probe judges what serve would start; no option restates a setting."""
    config = tmp_path / "settings.json"
    config.write_text(json.dumps({"tp_size": 4, "enable_flashinfer_allreduce_fusion": False}))
    result = run_cli("probe", "--sglang", str(patched_tree), "--config", str(config), "--set",
                     "enable_torch_symm_mem=false", "--topology", "pcie", "--json")  # fmt: skip
    allreduce = json.loads(result.stdout)["allreduce"]
    assert allreduce["tp_size"] == 4 and result.returncode == 0, result.stderr
    assert allreduce["allreduce_fusion"]["requested"] is False and allreduce["torch_symm_mem"]["requested"] is False
    for restated in (
        "--tp",
        "--algorithm",
        "--allreduce-fusion",
        "--model",
        "--torch-symm-mem",
        "--pcie-ipc-allreduce",
    ):
        refused = run_cli("probe", "--sglang", str(patched_tree), restated, "x")
        assert refused.returncode == 2 and f"No such option '{restated}'" in refused.stderr, restated


# -- the GPUs' links, from nvidia-smi topo -m ------------------------------------------------------


def recorded_topology(name: str) -> str:
    return (DATA / name).read_text()


def test_topology_is_read_from_nvidia_smis_matrix():
    """The recorded matrices (nvidia-smi's tab-separated format, legend and NIC columns included): every pair of the
    GPUs the server uses decides; NICs and affinity columns are not links."""
    pcie = recorded_topology("8x-rtx-pro-6000.topo")
    assert gpus.read_topology(pcie, 8) == gpus.Topology(
        "pcie", "nvidia-smi topo -m: GPU0-GPU7 over PCIe only (NODE, SYS)"
    )
    assert gpus.read_topology(pcie, 4).how.endswith("over PCIe only (NODE)")  # one socket
    nvlink = gpus.read_topology(recorded_topology("8x-h200.topo"), 8)
    assert nvlink == gpus.Topology("nvlink", "nvidia-smi topo -m: every pair of GPU0-GPU7 is NV18")
    underlined = "\x1b[4m" + recorded_topology("8x-h200.topo").replace("GPU NUMA ID", "GPU NUMA ID\x1b[0m", 1)
    assert gpus.read_topology(underlined, 8) == nvlink


def test_topology_that_is_not_all_nvlink_or_not_known():
    # NVLink bridges between pairs of PCIe cards: SGLang's custom all-reduce wants every pair on NVLink
    bridged = recorded_topology("8x-rtx-pro-6000.topo").replace("GPU0\t X \tNODE", "GPU0\t X \tNV4", 1)
    found = gpus.read_topology(bridged, 8)
    assert found.kind == "pcie" and "not all NVLink (GPU0-GPU2 NODE)" in found.how
    assert gpus.read_topology(recorded_topology("8x-h200.topo"), 9) is None  # no GPU8
    assert gpus.read_topology(recorded_topology("8x-h200.topo").replace("NV18", "XYZ"), 2) is None
    assert gpus.read_topology("", 8) is None and gpus.read_topology(bridged, 1) is None


def test_a_real_capture_of_one_h200_is_read_and_has_no_pairs_to_judge():
    """`nvidia-smi topo -m` captured on the lent one-GPU H200 (docs/gpu-host.md, (e)): its header is underlined
    with ANSI escapes even when written to a file, and its one row has the affinity columns only."""
    real = recorded_topology("topo-m-1x-h200.txt")
    assert "\x1b[4m" in real and "\x1b[0m" in real  # as nvidia-smi wrote it
    single = [line for line in real.splitlines() if line.startswith("GPU0")]
    assert single and single[0].split()[:3] == ["GPU0", "X", "0-15"]
    assert gpus.read_topology(real, 1) is None  # one GPU: no all-reduce, no link to judge
    assert gpus.read_topology(real, 2) is None  # GPU1 is not in the matrix: not read, never guessed
    # The same header, escapes and all, with a second GPU spliced in the recorded layout: read as NVLink.
    two = real.replace("GPU0\tCPU", "GPU0\tGPU1\tCPU").replace("GPU0\t X \t0-15", "GPU0\t X \tNV18\t0-15")
    two = two.replace("\n\nLegend", "\nGPU1\tNV18\t X \t0-15\t0\t\tN/A\n\nLegend", 1)
    assert gpus.read_topology(two, 2) == gpus.Topology("nvlink", "nvidia-smi topo -m: every pair of GPU0-GPU1 is NV18")


def test_the_probe_reads_the_hosts_topology_unless_told(pristine_tree, tmp_path, run_cli):
    args = ("probe", "--sglang", str(pristine_tree), "--compute-capability", "9.0")
    read = {
        "8x-h200.csv": "NVLink (nvidia-smi topo -m: every pair of GPU0-GPU7 is NV18)",
        "8x-rtx-pro-6000.csv": "PCIe (nvidia-smi topo -m: GPU0-GPU7 over PCIe only",
    }
    for recording, expected in read.items():
        smi = fake_nvidia_smi(tmp_path, recording)
        result = run_cli(*args, env={gpus.NVIDIA_SMI_ENV: smi})
        assert f"tp 8, {expected}" in result.stdout, result.stdout
        told = run_cli(*args, "--topology", "pcie", env={gpus.NVIDIA_SMI_ENV: smi})
        assert "tp 8, PCIe (--topology):" in told.stdout
    failing = fake_nvidia_smi(tmp_path, "8x-h200.csv", topology=None)
    assert "PCIe (assumed: the tuned host's" in run_cli(*args, env={gpus.NVIDIA_SMI_ENV: failing}).stdout
