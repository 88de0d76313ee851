"""Preflight on recorded nvidia-smi outputs, model directories, ports and extra_args."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from sglang_eagle3.host import gpus
from sglang_eagle3.judging import preflight
from sglang_eagle3.judging.findings import Status
from sglang_eagle3.serving import settings
from sglang_eagle3.source import sglang_source
from support.bench_fixtures import free_port
from support.gpus import fake_nvidia_smi

DATA = Path(__file__).parent / "data" / "nvidia-smi"


def checks(report):
    return {f.name: f for f in report.findings}


def run(tmp_path, tree, recording, **overrides):
    s = settings.ServerSettings(port=free_port(), **overrides)
    return preflight.run(
        s,
        str(tree),
        nvidia_smi=fake_nvidia_smi(tmp_path, recording) if recording != "absent" else "/nonexistent/nvidia-smi",
    )


def test_rtx_pro_6000_host_with_patched_sglang_passes_with_sm120_warnings(tmp_path, patched_tree):
    report = run(tmp_path, patched_tree, "8x-rtx-pro-6000.csv")
    assert report.passed, report.findings
    c = checks(report)
    assert "8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (compute capability 12.0)" in c["gpus"].message
    warnings = [x.message for x in report.findings if x.status is Status.WARN]
    assert any("multicast" in w for w in warnings) and any("allreduce-fusion" in w for w in warnings)


def test_rtx_pro_6000_host_with_pristine_sglang_fails_before_any_load(tmp_path, pristine_tree):
    report = run(tmp_path, pristine_tree, "8x-rtx-pro-6000.csv")
    assert not report.passed
    message = checks(report)["probe"].message
    assert "set_eagle3_layers_to_capture" in message and "KeyError: 12" in message and "patch apply" in message


def test_h200_host(tmp_path, pristine_tree):
    report = run(tmp_path, pristine_tree, "8x-h200.csv", model_path="deepseek-ai/DeepSeek-V3")
    c = checks(report)
    assert "compute capability 9.0" in c["gpus"].message
    # On SM90 symm mem and fusion are supported; the architecture still decides the probe (Kimi by default).
    assert not any(x.name == "optimisations" and "ignored" in x.message for x in report.findings)


def test_too_few_gpus(tmp_path, patched_tree):
    report = run(tmp_path, patched_tree, "4x-rtx-pro-6000.csv")
    assert checks(report)["gpus"].status == "fail"
    assert "4 GPU(s) visible, tp_size 8 over 1 node(s) needs 8 here" in checks(report)["gpus"].message
    assert run(tmp_path, patched_tree, "4x-rtx-pro-6000.csv", tp_size=4).passed


def test_no_gpus(tmp_path, patched_tree):
    report = run(tmp_path, patched_tree, "absent")
    assert checks(report)["gpus"].status == "fail" and "nvidia-smi not found" in checks(report)["gpus"].message
    broken = run(tmp_path, patched_tree, None)
    assert "could not communicate with the NVIDIA driver" in checks(broken)["gpus"].message


def test_local_model_directories(tmp_path, patched_tree):
    model = tmp_path / "kimi"
    model.mkdir()
    report = run(
        tmp_path,
        patched_tree,
        "8x-rtx-pro-6000.csv",
        model_path=str(model),
        speculative_draft_model_path=str(tmp_path / "nope"),
    )
    c = checks(report)
    assert c["model"].status == "fail" and "has no config.json" in c["model"].message
    assert c["draft model"].status == "fail" and "does not exist" in c["draft model"].message
    (model / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForConditionalGeneration"]}))
    report = run(tmp_path, patched_tree, "8x-rtx-pro-6000.csv", model_path=str(model))
    assert checks(report)["model"].status == "ok"


def test_port_in_use(tmp_path, patched_tree):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        s = settings.ServerSettings(port=busy.getsockname()[1])
        report = preflight.run(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    assert checks(report)["port"].status == "fail" and "is in use" in checks(report)["port"].message


@pytest.mark.parametrize(
    "extra, status, message",
    [
        (["--log-level", "debug", "--disable-radix-cache"], "ok", "--log-level debug"),
        (["--log-levl", "debug"], "fail", "has no flag --log-levl; did you mean --log-level?"),
        (["--tensor-parallel-size", "2"], "fail", "is the setting 'tp_size'"),
        (["--log-level"], "fail", "--log-level needs a value"),
        (["debug"], "fail", "is not a flag"),
    ],
)
def test_extra_args_are_checked_against_sglangs_flags(tmp_path, patched_tree, extra, status, message):
    report = run(tmp_path, patched_tree, "8x-rtx-pro-6000.csv", extra_args=extra)
    assert checks(report)["extra_args"].status == status and message in checks(report)["extra_args"].message


def test_sglang_flags_are_read_from_its_source(patched_tree):
    flags = sglang_source.server_flags(sglang_source.locate(patched_tree))
    assert flags["--tp-size"][0] == {"--tp-size", "--tensor-parallel-size"} and flags["--tp-size"][1]
    assert flags["--enable-torch-symm-mem"][1] is False


def test_serve_on_this_machine_fails_fast_and_clearly(run_cli, patched_tree):
    result = run_cli("serve", "--sglang", str(patched_tree), env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert "nvidia-smi not found" in result.stdout and "nothing was started" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_dry_run_json_masks_secrets_and_keeps_the_key_out_of_argv(run_cli, patched_tree, tmp_path):
    key = tmp_path / "api-key"
    key.write_text("sk-very-secret\n")
    result = run_cli(
        "serve", "--dry-run", "--json", "--sglang", str(patched_tree),
        "--set", f"api_key_file={key}", "--set", 'environment={"HF_TOKEN": "hf_secret", "NCCL_DEBUG": "INFO"}',
    )  # fmt: skip
    plan = json.loads(result.stdout)
    text = result.stdout + result.stderr
    assert "sk-very-secret" not in text and "hf_secret" not in text
    assert plan["env"]["HF_TOKEN"] == "***" and plan["env"]["NCCL_DEBUG"] == "INFO"
    assert plan["env"]["SGLANG_EAGLE3_API_KEY_FILE"] == str(key)
    assert plan["argv"][1:3] == ["-m", "sglang_eagle3.serving.sglang_main"] and "--api-key" not in plan["argv"]
    assert plan["sglang_argv"][1:3] == ["-m", "sglang.launch_server"]
    verdict = plan["preflight"]["verdict"]  # the probe's and the draft checks' JSON shape: verdict and findings
    assert (verdict == "fail") == (result.returncode == 1) and plan["preflight"]["findings"][0]["name"] == "gpus"
    assert all(set(f) == {"name", "status", "message", "where"} for f in plan["preflight"]["findings"])


def test_credentials_directory_is_used_under_systemd(tmp_path):
    from sglang_eagle3.serving import credentials, launch_plan

    (tmp_path / "api-key").write_text("k")
    plan = launch_plan.build(settings.ServerSettings(), environ={"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert plan.env[credentials.API_KEY_FILE_ENV] == str(tmp_path / "api-key")
    assert launch_plan.build(settings.ServerSettings(), environ={}).key_files == {}


def test_device_nodes_without_nvidia_smi_fail_since_sglang_runs_it_at_start(tmp_path, patched_tree, monkeypatch):
    """SGLang 0.5.9's ServerArgs.__post_init__ runs nvidia-smi (get_nvgpu_memory_capacity) and
    raises without it, so GPUs without nvidia-smi cannot serve: preflight stops there, naming the fix."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in [*(f"nvidia{i}" for i in range(8)), "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]:
        (dev / name).touch()
    assert [p.name for p in gpus.device_nodes(dev)] == [f"nvidia{i}" for i in range(8)]
    found = gpus.device_nodes(dev)
    monkeypatch.setattr(gpus, "device_nodes", lambda: found)
    report = run(tmp_path, patched_tree, "absent")
    found = checks(report)["gpus"]
    assert found.status == "fail" and "/dev has 8 GPU device node(s)" in found.message
    assert "put the driver's nvidia-smi on PATH" in found.message and not report.passed
