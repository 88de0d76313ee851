"""Preflight on recorded nvidia-smi outputs, model directories, ports and extra_args."""

from __future__ import annotations

import ast
import json
import re
import socket
from pathlib import Path

import pytest
from sglang_eagle3.host import gpus
from sglang_eagle3.judging import preflight, settings_rules
from sglang_eagle3.judging.findings import Status
from sglang_eagle3.serving import launch_plan, settings
from sglang_eagle3.source import sglang_source
from support.bench_fixtures import free_port
from support.gpus import fake_nvidia_smi
from support.own_resources import missing_path

DATA = Path(__file__).parent / "data" / "nvidia-smi"


def checks(report):
    return {f.name: f for f in report.findings}


def run(tmp_path, tree, recording, **overrides):
    s = settings.ServerSettings(port=free_port(), **overrides)
    return preflight.preflight(
        s,
        str(tree),
        nvidia_smi=fake_nvidia_smi(tmp_path, recording) if recording != "absent" else str(missing_path(tmp_path)),
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
        report = preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
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
    key.chmod(0o600)  # a usable key file: one that is not is bad input before any plan (issue 36)
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
    (tmp_path / "api-key").chmod(0o600)
    plan = launch_plan.build(settings.ServerSettings(), environ={"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert plan.env[credentials.API_KEY_FILE_ENV] == str(tmp_path / "api-key")
    assert launch_plan.build(settings.ServerSettings(), environ={}).key_files == {}
    # The plan is where the key files are checked, systemd's too: one that cannot be used is bad input.
    (tmp_path / "api-key").chmod(0o644)
    with pytest.raises(credentials.KeyFileError, match="can be read by other users"):
        launch_plan.build(settings.ServerSettings(), environ={"CREDENTIALS_DIRECTORY": str(tmp_path)})


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


# -- settings judged against the topology: a model over several nodes ----------------------------------------------

MULTI_NODE = {"nnodes": 2, "tp_size": 16, "dist_init_addr": "10.0.0.1:50000"}
FUSION_FIX = "set enable_flashinfer_allreduce_fusion=false for a multi-node group"


def source_lines(tree: sglang_source.SGLangTree, message: str) -> dict[str, str]:
    """Each `srt/...py:N` a message quotes -> that line of the tree and the two after it (a call spans lines)."""
    found = {}
    for rel, number in re.findall(r"(srt/[\w/]+\.py):(\d+)", message):
        lines = (tree.package / rel).read_text().splitlines()
        found[f"{rel}:{number}"] = " ".join(s.strip() for s in lines[int(number) - 1 : int(number) + 2])
    return found


def assert_quotes_the_trees_own_lines(tree: sglang_source.SGLangTree, message: str) -> None:
    """The fusion rule's FAIL quotes the lines of this tree that say the fusion keeps to one node: 0.5.9's comment
    (flashinfer-ai/flashinfer#2006) and its auto-enable's nnodes == 1; 0.5.23's resolver raise across nodes."""
    lines = source_lines(tree, message)
    said = [w for w, text in lines.items() if "only supported in the single node scenario" in text]
    auto = [w for w, text in lines.items() if "enable_flashinfer_allreduce_fusion = True" in text]
    raised = [w for w, text in lines.items() if "raise ValueError(" in text and "multi-node" in text]
    if tree.version == "0.5.9":
        assert said and said[0].startswith("srt/server_args.py:") and "flashinfer/issues/2006" in lines[said[0]]
        assert auto and auto[0].startswith("srt/server_args.py:"), lines
    else:
        assert raised == [w for w in lines if w.startswith("srt/layers/flashinfer_comm_fusion.py:")], lines
        assert "does not support multi-node on non-Blackwell systems" in message
        assert any(w.startswith("srt/arg_groups/overrides.py:") and "return" in t for w, t in lines.items()), lines


@pytest.mark.parametrize("fusion", [True, False], ids=["fusion-on", "fusion-off"])
def test_a_multi_node_settings_file_with_the_fusion_on_fails_preflight_at_the_running_trees_line(
    tree, run_cli, tmp_path, fusion
):
    """FlashInfer's all-reduce fusion works within one node only (its workspace is shared over CUDA IPC across the
    whole TP group, flashinfer-ai/flashinfer#2006): a settings file for two nodes with it on fails `serve --dry-run`
    (exit 1, before any load) on each stack, naming the setting, the fix, and the line of the tree that will run;
    with it off, that rule passes it."""
    config = tmp_path / "server.toml"
    config.write_text('nnodes = 2\ntp_size = 16\ndist_init_addr = "10.0.0.1:50000"\n')
    smi = fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")
    value = "true" if fusion else "false"
    result = run_cli("serve", "--dry-run", "--sglang", str(tree.root), "--config", str(config),
                     "--set", f"enable_flashinfer_allreduce_fusion={value}",
                     env={"SGLANG_EAGLE3_NVIDIA_SMI": smi})  # fmt: skip
    assert "Traceback" not in result.stdout + result.stderr
    line = next((s for s in result.stdout.splitlines() if s[7:].startswith("settings: ")), result.stdout)
    if not fusion:
        assert line.startswith("[ OK ] settings: "), result.stdout
        assert "single node" not in result.stdout and FUSION_FIX not in result.stdout
        return
    assert result.returncode == 1, result.stdout
    assert line.startswith("[FAIL] settings: enable_flashinfer_allreduce_fusion: ") and line.endswith(FUSION_FIX)
    assert f"SGLang {tree.version}" in line and "nnodes 2" in line
    assert_quotes_the_trees_own_lines(tree, line)


@pytest.mark.parametrize("stack", ["0.5.9", "0.5.23"])
def test_the_nix_stacks_patched_trees_are_judged_at_their_own_lines(stack, request, tmp_path):
    """The Nix stacks run their patched trees: preflight quotes those trees' lines (0.5.23's patch 0003 moves the
    resolver's raise), and passes the fusion off."""
    patched = sglang_source.locate(request.getfixturevalue("patched_tree" if stack == "0.5.9" else "patched_newest"))
    pristine = sglang_source.locate(request.getfixturevalue("pristine_tree" if stack == "0.5.9" else "newest_tree"))
    messages = {}
    for tree in (patched, pristine):
        report = run(tmp_path, tree.root, "8x-rtx-pro-6000.csv", **MULTI_NODE)
        found = checks(report)["settings"]
        assert found.status == "fail" and found.message.endswith(FUSION_FIX), found.message
        assert_quotes_the_trees_own_lines(tree, found.message)
        messages[tree.root] = found.message
        off = run(tmp_path, tree.root, "8x-rtx-pro-6000.csv", **MULTI_NODE, enable_flashinfer_allreduce_fusion=False)
        assert checks(off)["settings"].status == "ok", checks(off)["settings"].message
    if stack == "0.5.23":  # the same rule, another line: the one the running tree has
        assert messages[patched.root] != messages[pristine.root]


def fusion_rule_on(tree, major: int | None, **values) -> str | None:
    rule = next(r for r in settings_rules.RULES if r.name == "fusion-multi-node")
    s = settings.ServerSettings(**values)
    given = settings_rules.given_flags(s, launch_plan.sglang_args(s), sglang_source.server_flags(tree))
    return rule.judge(s, given, tree, rule.site(tree), major=major)


def test_across_nodes_0523_lets_sm10x_through_its_mnnvl_backend_and_059_no_gpu(tree):
    """0.5.23 resolves "auto" across nodes to mnnvl on SM10x (srt/layers/flashinfer_comm_fusion.py, and it turns
    the fusion on by itself there); 0.5.9's TRT-LLM workspace is one node's on any GPU. One node: nothing."""
    for major in (9, 12):
        assert fusion_rule_on(tree, major, **MULTI_NODE), major
    sm100 = fusion_rule_on(tree, 10, **MULTI_NODE)
    assert (sm100 is None) == (tree.version == "0.5.23"), sm100
    assert fusion_rule_on(tree, None, **MULTI_NODE) == fusion_rule_on(tree, 12, **MULTI_NODE)  # the tuned host's
    assert fusion_rule_on(tree, 12) is None and fusion_rule_on(tree, 12, nnodes=1) is None


@pytest.mark.parametrize(
    "extra, refused",
    [
        (["--flashinfer-allreduce-fusion-backend", "trtllm"], "trtllm backend supports single-node only"),
        (["--flashinfer-allreduce-fusion-backend", "auto"], "does not support multi-node on non-Blackwell"),
        (["--enforce-disable-flashinfer-allreduce-fusion"], None),
        (["--enable-deterministic-inference"], None),
    ],
)
def test_0523s_backend_flag_and_its_switches_off_are_judged_as_its_resolution(newest_tree, extra, refused):
    """0.5.23's own backend flag (extra_args) is judged by its resolver's raise for that backend (trtllm: on no GPU
    across nodes, SM10x included); the switches its resolution turns the fusion off with pass."""
    tree = sglang_source.locate(newest_tree)
    values = {**MULTI_NODE, "enable_flashinfer_allreduce_fusion": extra[0] != "--flashinfer-allreduce-fusion-backend"}
    for major in (10, 12):
        problem = fusion_rule_on(tree, major, **values, extra_args=extra)
        if refused is None or (major == 10 and extra[-1] == "auto"):
            assert problem is None, problem
            continue
        assert problem.startswith("extra_args --flashinfer-allreduce-fusion-backend: ") and refused in problem
        assert problem.endswith("drop --flashinfer-allreduce-fusion-backend from extra_args for a multi-node group")
        if extra[-1] == "auto":
            assert_quotes_the_trees_own_lines(tree, problem)


def test_pcie_ipc_all_reduce_across_nodes_is_a_warning_quoting_0523s_module(newest_tree, tmp_path):
    """0.5.23's PCIe-IPC all-reduce is "for switch-free intra-node machines": across nodes its workspace fails to
    build and SGLang keeps the reductions on NCCL, so the setting is requested but not active (WARN, not FAIL)."""
    tree = sglang_source.locate(newest_tree)
    values = {"nnodes": 2, "tp_size": 8, "dist_init_addr": "10.0.0.1:50000", "pcie_ipc_allreduce": True,
              "enable_flashinfer_allreduce_fusion": False}  # fmt: skip
    report = run(tmp_path, newest_tree, "8x-rtx-pro-6000.csv", **values)
    assert checks(report)["settings"].status == "ok"
    (ipc,) = [f for f in report.findings if f.name == "optimisations" and "PCIE_IPC" in f.message]
    assert ipc.status == "warn" and "the tp group spans 2 nodes" in ipc.message, ipc.message
    assert "unset pcie_ipc_allreduce for a multi-node group" in ipc.message
    lines = source_lines(tree, ipc.message)
    assert any("switch-free intra-node machines" in t for t in lines.values()), lines
    assert any("reductions stay on NCCL" in t for t in lines.values()), lines
    one = run(tmp_path, newest_tree, "8x-rtx-pro-6000.csv", **{**values, "nnodes": 1, "dist_init_addr": None})
    assert not any("spans" in f.message for f in one.findings)


# -- the launch plan, built once (issue 36) ------------------------------------------------------------------


def test_preflight_builds_the_launch_plan_once_and_every_check_judges_it(tmp_path, patched_tree, monkeypatch):
    """Preflight builds the plan (SGLang's arguments and environment) once; every check judges that plan: the
    restated rules and SGLang's own run, which gets the plan's arguments and the plan's environment (the key file's
    path under systemd included), and the verdict carries it to the launcher. Nothing renders the settings again."""
    import subprocess

    from sglang_eagle3.judging import sglang_validation
    from sglang_eagle3.serving import credentials
    from support.draft_fixtures import kimi_target

    model = kimi_target(tmp_path / "Kimi-K2.5")
    (tmp_path / "api-key").write_text("k\n")
    (tmp_path / "api-key").chmod(0o600)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    s = settings.load(None, [f"model_path={model}", f"port={free_port()}"], profile="baseline", environ={})
    rendered, render = [], launch_plan.sglang_args
    monkeypatch.setattr(launch_plan, "sglang_args", lambda *args: rendered.append(args) or render(*args))
    seen, real_run = {}, subprocess.run

    def sglangs_own_run(command, *args, **kwargs):
        if "sglang_eagle3.judging.sglang_validation_main" not in command:
            return real_run(command, *args, **kwargs)  # nvidia-smi
        seen.update(request=json.loads(kwargs["input"]), env=kwargs["env"])
        return subprocess.CompletedProcess(command, 0, '{"stage": "done", "rewritten": []}\n', "")

    monkeypatch.setattr(sglang_validation.subprocess, "run", sglangs_own_run)
    verdict = preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    plan = verdict.plan
    assert len(rendered) == 1 and plan.args
    assert checks(verdict)["sglang checks"].status is Status.OK and checks(verdict)["settings"].status is Status.OK
    assert seen["request"]["argv"] == plan.args and plan.args == plan.sglang_argv[3:]
    assert seen["env"][credentials.API_KEY_FILE_ENV] == str(tmp_path / "api-key")
    assert seen["env"].items() >= plan.env.items() and seen["env"]["HF_HUB_OFFLINE"] == "1"
    assert checks(verdict)["api key"].message == f"{tmp_path / 'api-key'} (the key is not shown)"
    assert plan.health_url == launch_plan.health_url(s)


def test_preflight_is_its_list_of_checks(tmp_path, patched_tree, monkeypatch):
    """judge runs CHECKS, in order, on one launch; the checks that read SGLang's source are skipped when there is
    none (the sglang check says why)."""
    s = settings.ServerSettings(port=free_port())
    monkeypatch.setattr(preflight, "CHECKS", (preflight.check_port, preflight.check_sglang, preflight.check_settings))
    report = preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    assert [f.name for f in report.findings] == ["port", "settings"]
    plan = launch_plan.build(s)
    report = preflight.judge(preflight.Launch(s, plan, None, "no SGLang here"))
    assert [(f.name, f.status, f.message) for f in report.findings] == [
        ("port", Status.OK, f"{s.host}:{s.port} is free"),
        ("sglang", Status.FAIL, "no SGLang here"),
    ]


def test_a_named_sglang_that_is_not_there_is_bad_input(tmp_path):
    """--sglang names the tree to judge: one that is not there is bad input (exit 2), not a finding."""
    with pytest.raises(sglang_source.SGLangNotFound, match="is not a directory"):
        preflight.preflight(settings.ServerSettings(), str(missing_path(tmp_path)))


# The steps preflight.preflight takes, each once: (the module, the function) as the package names them.
PREFLIGHT_STEPS = {("launch_plan", "build"), ("sglang_release", "find"), ("sglang_release", "resolve"),
                   ("preflight", "judge"), ("preflight", "Launch"), ("credentials", "read_key")}  # fmt: skip


def steps_called(path: Path) -> set[tuple[str, str]]:
    """The preflight steps a module calls itself (``module.function(...)`` or a name imported from the module),
    read with ast."""
    imported = {}
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module.rsplit(".", 1)[-1], alias.name)
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                called.add((func.value.id, func.attr))
            elif isinstance(func, ast.Name) and func.id in imported:
                called.add(imported[func.id])
    return called & PREFLIGHT_STEPS


def test_the_commands_take_one_path_through_preflight():
    """`serve` and `bench sweep` go through preflight.preflight (plan, resolve, judge, report) and refuse through
    its verdict: the refusal is written once, in judging/judged_plan.py, and no command builds the plan, resolves the
    tree for preflight, reads a key file or judges itself (ast: a call by the module's name or an imported one)."""
    package = Path(preflight.__file__).parents[1]
    refusal = 'CheckFailed("preflight failed; nothing was started'
    written = [p.relative_to(package).as_posix() for p in package.rglob("*.py") if refusal in p.read_text()]
    assert written == ["judging/judged_plan.py"]
    # What the audit looks for is there: preflight.preflight takes the steps.
    assert steps_called(Path(preflight.__file__)) == {("launch_plan", "build"), ("sglang_release", "find")}
    for command in sorted((package / "commands").glob("*.py")):
        called = steps_called(command) - ({("sglang_release", "resolve")}
                                          if command.name in ("patch.py", "probe.py") else set())  # fmt: skip
        assert called == set(), f"{command.name} calls {sorted(called)}: preflight.preflight's steps"
    for command in ("serve.py", "bench.py"):
        assert "preflight.preflight(" in (package / "commands" / command).read_text(), command


def test_the_tree_is_resolved_once_and_each_key_file_read_once(tmp_path, patched_tree, monkeypatch):
    """One path: preflight resolves the SGLang tree once (nothing below locates it again) and reads each key file
    once, as it builds the plan; the verdict reports the file the plan holds."""
    from sglang_eagle3.serving import credentials
    from sglang_eagle3.source import sglang_release

    located, read = [], []
    real_locate, real_read = sglang_source.locate, credentials.read_key
    monkeypatch.setattr(sglang_source, "locate", lambda *a, **k: located.append(a) or real_locate(*a, **k))
    monkeypatch.setattr(sglang_release, "locate", sglang_source.locate)
    monkeypatch.setattr(credentials, "read_key", lambda *a, **k: read.append(a) or real_read(*a, **k))
    key = tmp_path / "api-key"
    key.write_text("k\n")
    key.chmod(0o600)
    s = settings.ServerSettings(port=free_port(), api_key_file=key)
    verdict = preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    assert len(located) == 1 and len(read) == 1, (located, read)
    assert verdict.plan.key_files == {"api_key": key}
    assert checks(verdict)["api key"].message == f"{key} (the key is not shown)"


def test_a_key_file_that_cannot_be_used_stops_preflight_as_bad_input(tmp_path, patched_tree):
    """An unusable key file is bad input before anything is judged (KeyFileError, exit 2), and the message never
    holds the key."""
    from sglang_eagle3.serving import credentials

    key = tmp_path / "api-key"
    key.write_text("sk-notshown0123456789\n")
    key.chmod(0o644)
    s = settings.ServerSettings(port=free_port(), api_key_file=key)
    with pytest.raises(credentials.KeyFileError, match="can be read by other users") as raised:
        preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    assert "sk-notshown" not in str(raised.value)


def test_the_dry_runs_document_reads_back_as_the_judged_plan_it_was(tmp_path, patched_tree):
    """`serve --dry-run --json` writes JudgedPlan.to_dict; bench ab reads another stack's with
    JudgedPlan.from_dict: one definition of the document, both ways."""
    from sglang_eagle3.judging.judged_plan import JudgedPlan

    s = settings.ServerSettings(port=free_port(), environment={"HF_TOKEN": "hf_notshownatall1234"})
    verdict = preflight.preflight(s, str(patched_tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    document = json.loads(json.dumps(verdict.to_dict()))
    again = JudgedPlan.from_dict(document)
    # What reads back is the document: its messages as shown (what looks secret hidden), every finding in place.
    assert [(f.name, f.status) for f in again.findings] == [(f.name, f.status) for f in verdict.findings]
    assert again.passed == verdict.passed and again.findings[0] == verdict.findings[0]
    assert (again.judged, again.runs, again.note) == (verdict.judged, verdict.runs, verdict.note)
    assert again.plan.argv == verdict.plan.argv and again.plan.args == verdict.plan.args
    assert again.plan.env["HF_TOKEN"] == "***" and again.plan.health_url == launch_plan.health_url(s)
    assert again.to_dict() == document
    with pytest.raises(KeyError):
        JudgedPlan.from_dict({**document, "preflight": {"verdict": "ok"}})
