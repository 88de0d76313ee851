"""Both SGLang versions the flake builds (0.5.9, 0.5.23): each tree's own parser, environ.py and all-reduce gates,
read from the real wheels (0.5.23 cannot be imported here: it needs Python 3.11 and its CUDA wheels, so its
parser is read from its source, as preflight does).

A setting one version lacks is refused by preflight, naming the version that has it and its stack's app.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import REPO
from sglang_eagle3 import stacks
from sglang_eagle3.judging import draft_check, patch_check, preflight, probe, settings_rules
from sglang_eagle3.judging.findings import Status
from sglang_eagle3.serving import launch_plan, settings
from sglang_eagle3.serving.credentials import API_KEY_FILE_ENV
from sglang_eagle3.source import allreduce_gates, patchset, sglang_source
from sglang_eagle3.source.allreduce_gates import Effect
from sglang_eagle3.source.source_index import SourceIndex
from support import pins
from support.bench_fixtures import free_port
from support.draft_fixtures import eagle3_draft_config, kimi_target, write_config, write_weights
from support.gpus import fake_nvidia_smi

PCIE = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"


def source_line(tree, where: str) -> str:
    path, line = where.rsplit(":", 1)
    return (tree.package / path).read_text().splitlines()[int(line) - 1]


def test_each_stack_is_its_pinned_release():
    for version, stack in stacks.stacks().items():
        assert stack.pin["version"] == version and stack.pin["wheel"].startswith(f"sglang-{version}-")
        assert (REPO / stack.series / "series").is_file() and (REPO / stack.data).is_dir()
    assert stacks.default().version == pins.pins()["stack"]["default"] and stacks.default().app == "serve-eagle3"


def test_every_setting_is_written_for_a_stack():
    for name in settings.ServerSettings.model_fields:
        assert stacks.get(settings.field_origin(name)[0]) is not None, name


def test_the_parser_of_each_tree_is_read(tree):
    flags = sglang_source.server_flags(tree)
    assert flags["--tp-size"] == (frozenset({"--tp-size", "--tensor-parallel-size"}), True)
    assert flags["--enable-flashinfer-allreduce-fusion"][1] is False  # store_true (deprecated on 0.5.23)
    if tree.version == "0.5.9":
        assert "--cuda-graph-max-bs" in flags and "--flashinfer-allreduce-fusion-backend" not in flags
    else:  # fields of srt/arg_groups/fields/, by add_cli_args_from_dataclass's rules
        assert "--cuda-graph-max-bs" not in flags and flags["--cuda-graph-max-bs-decode"][1] is True
        assert flags["--flashinfer-allreduce-fusion-backend"][1] is True
        assert flags["--no-enable-tf32-matmul"][1] is False  # BooleanOptionalAction
        assert flags["--disable-cuda-graph"][1] is False  # DeprecatedStoreTrueAction, added by hand
    variables = sglang_source.environment_variables(tree)
    assert "SGLANG_USE_MODELSCOPE" in variables
    assert ("SGLANG_ENABLE_SPEC_V2" in variables) == (tree.version == "0.5.9")  # 0.5.23 reads it nowhere
    assert (PCIE in variables) == (tree.version == "0.5.23")


def test_a_settings_origin_is_where_it_says(pristine_tree, newest_tree):
    """pcie_ipc_allreduce names 0.5.23's environ.py line; 0.5.9 has no such variable."""
    version, where = settings.field_origin("pcie_ipc_allreduce")
    assert version == "0.5.23" and PCIE in source_line(sglang_source.locate(newest_tree), where)
    assert PCIE not in sglang_source.environment_variables(sglang_source.locate(pristine_tree))


def run_preflight(tmp_path, tree, **values):
    s = settings.ServerSettings(**values)
    return preflight.preflight(s, str(tree.root), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))


def finding(report, name):
    return next(f for f in report.findings if f.name == name)


@pytest.mark.parametrize(
    "values, refused_on, message",
    [
        ({"pcie_ipc_allreduce": True}, "0.5.9", "pcie_ipc_allreduce: SGLang 0.5.9 has no variable " + PCIE),
        ({"cuda_graph_max_bs": 8}, "0.5.23", "cuda_graph_max_bs: SGLang 0.5.23 has no flag --cuda-graph-max-bs"),
    ],
)
def test_a_setting_the_tree_lacks_is_refused_naming_the_version_and_its_stack(tmp_path, tree, values, refused_on,
                                                                             message):  # fmt: skip
    report = run_preflight(tmp_path, tree, **values)
    found = finding(report, "settings")
    if tree.version != refused_on:
        assert found.status is preflight.Status.OK, found.message
        return
    assert found.status is preflight.Status.FAIL and message in found.message and not report.passed
    other = next(v for v in stacks.versions() if v != refused_on)
    assert f"it is in SGLang {other}" in found.message
    assert f"nix run .#{stacks.get(other).app}" in found.message
    if refused_on == "0.5.23":
        assert "its nearest flag is --cuda-graph-max-bs-decode" in found.message
    else:
        assert "(srt/environ.py:1539)" in found.message and "serve-eagle3-0_5_23" in found.message


def test_an_environment_variable_the_tree_never_reads_is_refused(tmp_path, tree):
    report = run_preflight(tmp_path, tree, environment={PCIE: "1", "SGLANG_ENABLE_SPEC_V2": "1",
                                                         "SGLANG_USE_MODELSCOPE": "0"})  # fmt: skip
    found = finding(report, "settings")
    assert found.status is preflight.Status.FAIL and "SGLANG_USE_MODELSCOPE" not in found.message
    lacks = PCIE if tree.version == "0.5.9" else "SGLANG_ENABLE_SPEC_V2"
    assert f"SGLang {tree.version} does not read {lacks}" in found.message
    assert f"does not read {({PCIE, 'SGLANG_ENABLE_SPEC_V2'} - {lacks}).pop()}" not in found.message


def test_spec_v2s_top_k_rule_is_0_5_9s_and_0_5_23_refuses_the_variable(tmp_path, tree):
    """SGLANG_ENABLE_SPEC_V2 with top-k 4: 0.5.9 refuses the top-k (its server_args.py rule); 0.5.23 never reads the
    variable, so preflight refuses the variable there, not with 0.5.9's rule."""
    values = {
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
        "environment": {"SGLANG_ENABLE_SPEC_V2": "1"},
    }
    found = finding(run_preflight(tmp_path, tree, **values), "settings")  # the settings themselves load on both
    assert found.status is preflight.Status.FAIL
    rule = next(r for r in settings_rules.RULES if r.name == "spec-v2-topk").site(tree)
    if tree.version == "0.5.9":
        assert "speculative_eagle_topk: environment SGLANG_ENABLE_SPEC_V2 supports only top-k 1" in found.message
        path, line = rule.where.rsplit(":", 1)  # the raise; its message follows
        text = "\n".join((tree.package / path).read_text().splitlines()[int(line) - 1 : int(line) + 2])
        assert rule.where in found.message and "Spec v2 currently only supports topk = 1" in text
        top_k_1 = {**values, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
        assert finding(run_preflight(tmp_path, tree, **top_k_1), "settings").status is preflight.Status.OK
        return
    assert "SGLang 0.5.23 does not read SGLANG_ENABLE_SPEC_V2" in found.message
    assert rule is None and "top-k" not in found.message  # 0.5.23 has no such site


def test_pcie_ipc_allreduce_is_a_variable_not_a_flag():
    plan = launch_plan.build(settings.ServerSettings(pcie_ipc_allreduce=True), python="python")
    assert plan.env[PCIE] == "1" and not any("pcie" in a for a in plan.argv)
    assert PCIE not in launch_plan.build(settings.ServerSettings(), python="python").env


def gates(tree, **kw):
    args = {"compute_capability": "12.0", "tp_size": 8, "torch_symm_mem": True, "allreduce_fusion": True} | kw
    return allreduce_gates.effects(SourceIndex(tree), **args)


def test_sm120_allreduce_gates_of_each_tree(tree):
    effects = gates(tree, pcie_ipc=True)
    symm, fusion, ipc = effects.torch_symm_mem, effects.allreduce_fusion, effects.pcie_ipc
    assert effects.topology == "pcie" and effects.topology_assumed
    if tree.version == "0.5.9":
        assert symm.effect is Effect.CRASH and "KeyError: 12" in symm.detail
        assert fusion.effect is Effect.IGNORED
        assert ipc.effect is Effect.IGNORED and ipc.warning
        return
    # 0.5.23: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(...) -> None disables the communicator (PR #24548)
    assert symm.effect is Effect.DISABLED and symm.warning
    assert ".get(" in source_line(tree, symm.detail.split("(")[-1].split(")")[0])
    # the backend resolver raises on anything but SM90/SM10x when the workspaces are built
    assert fusion.effect is Effect.CRASH and "admits SM9x, SM10x only" in fusion.detail
    where = fusion.detail.split("ValueError at ")[1].split(" ")[0]
    assert "is_sm90" in source_line(tree, where) and "not" in source_line(tree, where)
    assert ipc.effect is Effect.ACTIVE and "no compute capability test" in ipc.detail
    assert PCIE in source_line(tree, ipc.detail.split("active (")[1].split(")")[0])
    assert "custom_all_reduce_utils.py:" in ipc.detail and ":?" not in ipc.detail


# (tree, gates) where SGLang turns torch symmetric memory off by itself, and the line it does so on.
SYMM_MEM_OFF = [
    ("patched_tree", {"tp_size": 3}, "self.world_size"),  # 0.5.9 patched: SM12x has an entry, not for tp 3
    ("patched_tree", {"tp_size": 16}, "self.world_size"),
    ("pristine_tree", {"compute_capability": "9.0", "tp_size": 3}, "self.world_size"),
    ("pristine_tree", {"compute_capability": "8.0"}, "self.device_capability < 9"),
    ("newest_tree", {}, ".get("),  # 0.5.23: no SM12x entry, looked up with .get (PR #24548)
    ("newest_tree", {"tp_size": 3}, ".get("),
    ("newest_tree", {"compute_capability": "9.0", "tp_size": 3}, "self.world_size"),
]


@pytest.mark.parametrize(("fixture", "kw", "line"), SYMM_MEM_OFF, ids=lambda v: str(v).replace(" ", ""))
def test_a_requested_optimisation_that_ends_up_off_is_a_warning_on_every_stack(request, fixture, kw, line):
    """One judgement: symmetric memory that SGLang disables itself was [ OK ] on 0.5.9 at tp 3 or 16 and [WARN] on
    0.5.23; whatever the reason (capability, no entry, world size), it is WARN and names the setting to unset,
    and the line it rests on is the one that disables it."""
    tree = sglang_source.locate(request.getfixturevalue(fixture))
    symm = gates(tree, allreduce_fusion=False, **kw).torch_symm_mem
    assert symm.effect is Effect.DISABLED
    found = probe.flag_finding(symm)
    assert found.status is Status.WARN and "requested but not active" in found.message
    assert "unset enable_torch_symm_mem" in found.message
    where = re.search(r"\((srt/[^)]+:\d+)\)", symm.detail).group(1)
    assert line in source_line(tree, where)


def test_preflight_warns_of_symmetric_memory_that_disables_itself(tmp_path, patched_tree):
    report = run_preflight(tmp_path, sglang_source.locate(patched_tree), tp_size=3)
    (symm,) = [f for f in report.findings if f.name == "optimisations" and "--enable-torch-symm-mem" in f.message]
    assert symm.status is Status.WARN and "unset enable_torch_symm_mem" in symm.message


def test_every_requested_flag_that_ends_up_off_is_a_warning(newest_tree):
    """PCIe-IPC at a world size it does not serve, and the rule itself: a flag SGLang turns off or ignores is never
    [ OK ], even where the reading gives no warning text."""
    ipc = gates(sglang_source.locate(newest_tree), tp_size=6, pcie_ipc=True).pcie_ipc
    found = probe.flag_finding(ipc)
    assert found.status is Status.WARN and "unset pcie_ipc_allreduce" in found.message
    for effect in (Effect.DISABLED, Effect.IGNORED):
        bare = allreduce_gates.FlagEffect("--some-flag", True, effect, "turned off")
        assert probe.flag_finding(bare).status is Status.WARN
        assert probe.flag_finding(allreduce_gates.FlagEffect("--some-flag", False, effect, "")).status is Status.OK


def test_pcie_ipc_conditions_on_0523(newest_tree):
    tree = sglang_source.locate(newest_tree)
    assert gates(tree, tp_size=6, pcie_ipc=True).pcie_ipc.effect is Effect.DISABLED  # _SUPPORTED_WORLD_SIZES
    assert gates(tree, pcie_ipc=True, topology="nvlink").pcie_ipc.effect is Effect.LOADS  # custom AR first
    assert gates(tree).pcie_ipc.effect is Effect.NOT_REQUESTED
    with pytest.raises(ValueError, match="topology"):
        gates(tree, topology="infiniband")


def test_preflight_judges_pcie_ipc_on_the_hosts_topology(tmp_path, newest_tree):
    """The links come from the host's nvidia-smi topo -m: on the NVLink H200 matrix custom all-reduce goes first;
    on the PCIe RTX PRO 6000 one the PCIe-IPC all-reduce is active; without a matrix, PCIe is assumed, not checked."""
    tree = sglang_source.locate(newest_tree)
    s = settings.ServerSettings(pcie_ipc_allreduce=True, enable_flashinfer_allreduce_fusion=False)

    def run(recording, topology="recorded"):
        (tmp_path / recording).mkdir(exist_ok=True)
        smi = fake_nvidia_smi(tmp_path / recording, recording, topology)
        report = preflight.preflight(s, str(tree.root), nvidia_smi=smi)
        ipc = next(f for f in report.findings if f.name == "optimisations" and PCIE in f.message)
        return finding(report, "topology"), ipc

    topology, ipc = run("8x-h200.csv")
    assert topology.status is preflight.Status.OK and topology.message.startswith("NVLink (nvidia-smi topo -m:")
    assert "on NVLink custom all-reduce is tried first" in ipc.message
    topology, ipc = run("8x-rtx-pro-6000.csv")
    assert topology.message == "PCIe (nvidia-smi topo -m: GPU0-GPU7 over PCIe only (NODE, SYS))"
    assert f"{PCIE}: active" in ipc.message
    topology, ipc = run("8x-h200.csv", topology=None)
    assert topology.status is preflight.Status.NOT_CHECKED and "judged for PCIe" in topology.message
    assert f"{PCIE}: active" in ipc.message


def test_sm90_fusion_is_automatic_on_both(tree):
    assert gates(tree, compute_capability="9.0").allreduce_fusion.effect is Effect.AUTO


@pytest.fixture
def opt_in_tree(newest_tree, tmp_path):
    """0.5.23 with its resolver admitting SM120 under an extra condition, and its run-time gate admitting SM120, so
    the reading of an opt-in condition is tested (patch 0003 of the 0.5.23 series admits SM120 without one)."""
    root = tmp_path / "tree"
    shutil.copytree(newest_tree / "sglang", root / "sglang")
    path = root / "sglang" / "srt" / "layers" / "flashinfer_comm_fusion.py"
    text = path.read_text()
    old = "if not (get_platform().is_sm90 or get_platform().is_sm100):"
    assert old in text
    gate = root / "sglang" / "srt" / "layers" / "layer_boundary" / "residual" / "add_norm.py"
    gate_text = gate.read_text()
    flag, test = (
        "_is_sm100_supported = _is_cuda and get_platform().is_sm100\n",
        "(_is_sm90_supported or _is_sm100_supported)\n",
    )
    assert gate_text.count(flag) == gate_text.count(test) == 1
    gate_text = gate_text.replace(flag, flag + flag.replace("100", "120"))
    gate.write_text(gate_text.replace(test, test.replace(")", " or _is_sm120_supported)")))

    def write(condition: str):
        path.write_text(text.replace(old, f"if not (get_platform().is_sm90 or get_platform().is_sm100 or "
                                          f"(get_platform().is_sm120 and {condition})):"))  # fmt: skip
        return sglang_source.SGLangTree(root, "0.5.23")

    return write


def test_an_opt_in_condition_is_read_not_assumed(opt_in_tree):
    tree = opt_in_tree("envs.SGLANG_SM120_ALLREDUCE_FUSION.get()")
    assert gates(tree).allreduce_fusion.effect is Effect.CRASH
    assert "SGLANG_SM120_ALLREDUCE_FUSION=1" in gates(tree).allreduce_fusion.detail
    active = gates(tree, environment={"SGLANG_SM120_ALLREDUCE_FUSION": "1"}).allreduce_fusion
    assert active.effect is Effect.ACTIVE and active.warning
    unknown = gates(opt_in_tree("_p2p_available()")).allreduce_fusion
    assert unknown.effect is Effect.UNKNOWN
    assert probe.flag_finding(unknown).status is preflight.Status.NOT_CHECKED


RESOLVER = "srt/layers/flashinfer_comm_fusion.py"
RUNTIME_GATE = "srt/layers/layer_boundary/residual/add_norm.py"


@pytest.mark.parametrize("halves", [(RESOLVER, RUNTIME_GATE), (RESOLVER,), (RUNTIME_GATE,)])
def test_the_0523_fusion_opt_in_needs_both_halves(newest_tree, tmp_path, halves):
    """Patch 0003 of the 0.5.23 series changes the backend resolver (start-up) and the run-time gate that applies
    the fusion in the layers; each is read. Resolver only: the workspaces are built, the fusion never applied.
    Gate only: the resolver still stops start-up."""
    from conftest import gnu_patch

    root = tmp_path / "tree"
    shutil.copytree(newest_tree / "sglang", root / "sglang")
    series = REPO / "patches" / "sglang-0.5.23"
    patch = next(series.glob("0003-*.patch"))
    assert gnu_patch(root, patch).returncode == 0
    for rel in {RESOLVER, RUNTIME_GATE} - set(halves):
        shutil.copyfile(newest_tree / "sglang" / rel, root / "sglang" / rel)  # that half left pristine
    tree = sglang_source.SGLangTree(root, "0.5.23")
    fusion = gates(tree).allreduce_fusion
    where = {rel: re.search(rf"{re.escape(rel)}:(\d+)", fusion.detail) for rel in (RESOLVER, RUNTIME_GATE)}
    if halves == (RUNTIME_GATE,):
        assert fusion.effect is Effect.CRASH and "the backend resolver admits SM9x, SM10x only" in fusion.detail
        assert "would apply it on SM12x, but start-up stops first" in fusion.detail
    elif halves == (RESOLVER,):
        assert fusion.effect is Effect.IGNORED and "never applied" in fusion.detail and fusion.warning
        assert (
            f"the run-time gate ({RUNTIME_GATE}:" in fusion.detail and "applies it on SM9x, SM10x only" in fusion.detail
        )
    else:
        assert fusion.effect is Effect.ACTIVE and "applies it on SM9x, SM10x, SM12x" in fusion.detail
        assert "opt-in and unproven" in fusion.warning
    for rel, found in where.items():  # each file:line quoted is the line that decides
        assert found, (rel, fusion.detail)
        line = source_line(tree, f"{rel}:{found.group(1)}")
        assert ("def flashinfer_ar_fusion_applies" in line) if rel == RUNTIME_GATE else ("if not" in line), line


def grep_calls(tree, folder: str, needle: str) -> set[str]:
    """file:line of each line under srt/<folder> calling needle on something: found apart from the probe."""
    found = set()
    for path in sorted((tree.srt / folder).rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if needle in line and not line.lstrip().startswith(("def ", "#")):
                found.add(f"{tree.relative(path)}:{number}")
    return found


def test_probe_follows_the_helpers_that_call_the_target(tree):
    """0.5.9 calls the EAGLE-3 methods on the target in place; 0.5.23 hands the model to helpers
    (configure_aux_hidden_state_capture, resolve_draft_embed_and_head) that call them: both are read."""
    result = probe.probe(tree)
    assert result.call_sites_read
    sites = {m.method: {s.location for s in m.call_sites} for m in result.methods}
    assert set(sites) == {"get_embed_and_head", "set_eagle3_layers_to_capture"}
    assert sites["get_embed_and_head"] == grep_calls(tree, "speculative", "model.get_embed_and_head()")
    capture = grep_calls(tree, "model_executor", ".set_eagle3_layers_to_capture(")
    assert sites["set_eagle3_layers_to_capture"] == capture
    helped = [s for m in result.methods for s in m.call_sites if s.via]
    if tree.version == "0.5.9":
        assert not helped and set(result.missing) == set(sites)  # patch 0001's job
        return
    assert not result.missing and result.passed is False  # only the fusion flag fails (below), not the methods
    for m in result.methods:  # upstream KimiK25 forwards each (PR #19689): its own lines
        where = m.how.split("(", 1)[1].split(")")[0]
        assert f"def {m.method}(" in source_line(tree, where) and where.startswith("srt/models/kimi_k25.py:")
        for site in m.call_sites:
            assert site.via, site  # reached through a helper, each step a call of the next function
            steps = [*site.via, f"{site.location} in {site.function}"]
            for step, callee in zip(steps, steps[1:], strict=False):
                name = callee.split(" in ")[1].rsplit(".", 1)[-1]
                assert f"{name}(" in source_line(tree, step.split(" in ")[0]), (step, callee)
    capture_site = next(m for m in result.methods if m.method == "set_eagle3_layers_to_capture").call_sites[0]
    assert capture_site.condition == "self.spec_aux_config.eagle_use_aux_hidden_state"  # the helper's guard, named
    assert capture_site.via[0].startswith("srt/model_executor/model_runner.py:")
    workers = {s.worker for s in result.methods[0].call_sites}
    assert workers == {"EAGLEWorkerV2", "MultiLayerEagleWorkerV2"}


def test_probe_on_0523_fails_a_target_without_the_methods(newest_tree, tree_copy, run_cli):
    """The same class with upstream's forwarding taken out: the helpers' calls are requirements (the hasattr
    there raises ValueError), so the probe fails naming them, as on pristine 0.5.9."""
    root = tree_copy(newest_tree)
    kimi = root / "sglang/srt/models/kimi_k25.py"
    text = kimi.read_text()
    for method in ("get_embed_and_head", "set_eagle3_layers_to_capture"):
        assert f"    def {method}(" in text
        text = text.replace(f"    def {method}(", f"    def _was_{method}(")
    kimi.write_text(text)
    result = run_cli("probe", "--sglang", str(root), "--set", "enable_flashinfer_allreduce_fusion=false")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "[FAIL] get_embed_and_head: not defined in KimiK25ForConditionalGeneration" in result.stdout
    assert "first called at srt/speculative/pp_draft_embedding.py:" in result.stdout
    assert "first called at srt/model_executor/model_runner_components/attention_backend_setup.py:" in result.stdout


def test_probe_on_0523_reads_the_call_sites(newest_tree, run_cli):
    result = run_cli("probe", "--sglang", str(newest_tree), "--set", "enable_flashinfer_allreduce_fusion=false",
                     "--set", "pcie_ipc_allreduce=true")  # fmt: skip
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "[ ?? ] call sites" not in result.stdout and "[ OK ] set_eagle3_layers_to_capture" in result.stdout
    assert "reached from srt/model_executor/model_runner.py:" in result.stdout
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: active" in result.stdout
    failed = run_cli("probe", "--sglang", str(newest_tree))  # the defaults request fusion: ValueError on SM120
    assert failed.returncode == 1 and "would crash the server: ValueError" in failed.stdout


def capture_report(tmp_path, tree, layer_ids):
    target = kimi_target(tmp_path / "Kimi-K2.5")
    draft = write_config(tmp_path / f"draft-{layer_ids[0]}", eagle3_draft_config(layer_ids))
    write_weights(draft, 32000)
    arch = "DeepseekV3ForCausalLM" if tree.version == "0.5.9" else None  # pristine 0.5.9's KimiK25 lacks it
    return draft_check.check(tree, str(draft), str(target), target_arch=arch)


def test_the_captured_layers_name_patch_0004_as_patch_check_reads_it(tmp_path, tree):
    """An input-convention draft (first id 2): 0.5.9 captures one layer too deep (0004 applies and fixes it);
    0.5.23's own rule follows the convention (PR #25454), which patch check recognises, not a "conflict"."""
    report = capture_report(tmp_path, tree, (2, 30, 58))
    capture, found = report.capture, report.finding("captured layers")
    patch = next(p for p in patchset.PatchSeries.load(version="0.5.9").patches if p.name.startswith("0004"))
    checked = patch_check.check_one(patch, tree, SourceIndex(tree))
    if tree.version == "0.5.9":
        assert checked.outcome is patch_check.Outcome.APPLIES
        assert capture.patch_0004 == "not applied" and capture.captured == [3, 31, 59]
        assert found.status is preflight.Status.WARN and "apply patch 0004" in found.message
        return
    assert checked.outcome is patch_check.Outcome.UPSTREAM
    assert capture.patch_0004 == "already upstream" and "conflict" not in found.message
    assert capture.captured == capture.intended == [2, 30, 58] and found.status is preflight.Status.OK
    assert checked.how in found.message and "PR #25454" in found.message  # patch check's words, once
    method = capture.method.split(" at ")[1]
    assert "def set_eagle3_layers_to_capture(" in source_line(tree, method)
    rendered = "\n".join(report.render_lines())
    assert "(patch 0004 already upstream)" in rendered and "with patch 0004" not in rendered


def test_the_captured_layers_come_from_running_the_trees_own_rule(tmp_path, newest_tree, tree_copy):
    """0.5.23 with its convention test taken out (the +1 always applied, as 0.5.9): patch check no longer
    recognises 0004 upstream, and the prediction is the edited method's."""
    root = tree_copy(newest_tree)
    path = root / "sglang/srt/models/deepseek_v2.py"
    text = path.read_text()
    old = "if layer_ids and layer_ids[0] == 1:"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "if layer_ids:"))
    report = capture_report(tmp_path, sglang_source.locate(root), (2, 30, 58))
    assert report.capture.captured == [3, 31, 59] and report.capture.patch_0004 == "conflict"
    assert report.finding("captured layers").status is preflight.Status.WARN


MAIN_DRIVER = REPO / "tests" / "support" / "drivers" / "sglang_main_driver.py"


def test_sglang_main_does_what_each_trees_launch_server_does(tmp_path, tree):
    """sglang_main's start-up calls (read from the tree's launch_server.py: 0.5.23's load_plugins(), none on 0.5.9),
    its own parser on the settings' argv, the keys from their files: real SGLang code on CPU (the driver says what
    stands in). A test plugin, installed as an sglang.srt.plugins entry point, runs before the arguments are parsed
    on 0.5.23, as under `python -m sglang.launch_server`; 0.5.9 has no plugins."""
    plugin = tmp_path / "plugin"
    dist = plugin / "eagle3_test_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (plugin / "eagle3_test_plugin.py").write_text(
        "def register():\n    import eagle3_order\n    eagle3_order.calls.append('plugin')\n"
    )
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: eagle3-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\neagle3-order = eagle3_test_plugin:register\n")
    key = tmp_path / "api-key"
    key.write_text("sk-eagle3-driver-key")
    key.chmod(0o400)
    s = settings.ServerSettings(model_path=str(tmp_path / "model"), speculative_num_steps=5,
                                speculative_num_draft_tokens=6)  # fmt: skip
    given = {"argv": launch_plan.sglang_args(s), "environ": {API_KEY_FILE_ENV: str(key)}}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python" / "src"), str(plugin)])}
    env.pop("SGLANG_PLUGINS", None)
    result = subprocess.run([sys.executable, str(MAIN_DRIVER), str(tree.root)], input=json.dumps(given),
                            capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    main_block = (tree.package / "launch_server.py").read_text().split('if __name__ == "__main__":')[1]
    if tree.version == "0.5.9":
        assert out["startup"] == [] and out["order"] == ["parse"] and not (tree.srt / "plugins").exists()
    else:
        assert out["startup"] == ["sglang.srt.plugins.load_plugins"]
        assert main_block.index("load_plugins()") < main_block.index("prepare_server_args(")
        assert out["order"] == ["plugin", "parse"]  # SGLang's load_plugins ran the entry point, then the parse
        assert "sk-eagle3" not in out["launch_command"] and "--tp-size 8" in out["launch_command"]
    assert out["keys"] == {"api_key": "sk-eagle3-driver-key", "admin_api_key": None}
    assert out["changed"] == ["api_key"]  # the file's key is the one difference from parsing the argv alone
    assert out["tp_size"] == 8 and out["speculative_algorithm"] == "EAGLE3"


def test_serve_dry_run_on_each_tree(tmp_path, tree, run_cli):
    smi = fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")
    # a port of the test's own: the default (30000) may be another job's, and preflight's port check would say so
    args = ["--set", "pcie_ipc_allreduce=true", "--set", "enable_flashinfer_allreduce_fusion=false", "--set",
            f"port={free_port()}"]  # fmt: skip
    result = run_cli("serve", "--dry-run", "--sglang", str(tree.root), *args, env={"SGLANG_EAGLE3_NVIDIA_SMI": smi})
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == (1 if tree.version == "0.5.9" else 0)  # 0.5.23: warnings and not-checked only
    assert f"env:     {PCIE}=1" in result.stdout
    if tree.version == "0.5.9":
        assert "[FAIL] settings: pcie_ipc_allreduce: SGLang 0.5.9 has no variable" in result.stdout
    else:
        assert "[ OK ] settings" in result.stdout and "[ OK ] probe: SGLang 0.5.23 can serve" in result.stdout


def test_docs_have_the_settings_by_version_section(pristine_tree, newest_tree):
    text = (REPO / "docs" / "upgrade.md").read_text()
    assert "## Settings by version" in text and "serve-eagle3-0_5_23" in text
    # the call sites and the forwarding the section quotes are the probe's, on each real tree
    quotes = {
        pristine_tree: ["srt/speculative/eagle_worker.py:157", "srt/model_executor/model_runner.py:622"],
        newest_tree: ["srt/speculative/pp_draft_embedding.py:95", "srt/model_executor/model_runner.py:1109",
                      "srt/models/kimi_k25.py:928", "srt/models/kimi_k25.py:965"],
    }  # fmt: skip
    for root, quoted in quotes.items():
        result = probe.probe(sglang_source.locate(root))
        said = " ".join(f"{s.location} {' '.join(s.via)} {m.how}" for m in result.methods for s in m.call_sites)
        for where in quoted:
            assert where in said, where
            path, line = where.rsplit(":", 1)
            assert f"`{where}`" in text or f"`{path}:{line}`" in text or f"`:{line}`" in text, where
