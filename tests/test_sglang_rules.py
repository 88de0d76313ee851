"""Every rule SGLang enforces on its arguments before it loads, as data, and preflight's answer to each.

sglang_eagle3_audits/sglang_rules.py reads each stack's pinned wheel with ast (source/validation_sites.py) and writes
every raise, assert, silent rewrite and parser choices/type of SGLang's argument validation to the stack's
sglang-rules.json; the hand-written sglang-rule-policy.json beside it gives each site to a preflight rule or a
reason it cannot be checked before start-up. These tests prove, for both stacks:

- the data is what the real wheel holds (the sites, their keys; a new release's new sites are new keys);
- every site has a disposition; a disposition names a rule that exists, restates the site it is given, or (SGLang's
  own run) reaches it; every pattern and reason is used; and the checker reports each way that can break;
- each rule catches its trigger: preflight FAILs naming the setting and quoting the tree's file:line, and passes
  it with that rule taken out (so removing a rule fails a test);
- SGLang's own run (sglang_validation.py) runs the tree's parser, resolution and check_server_args to the end
  without weights or a GPU, catches what no rule restates, and reports what SGLang silently changes;
- the issue's examples are caught by `serve --dry-run`, exit 1, naming the setting.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
from conftest import CACHE, REPO
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sglang_eagle3 import stacks
from sglang_eagle3.errors import BadInput
from sglang_eagle3.judging import preflight, settings_rules, sglang_validation
from sglang_eagle3.judging.findings import Status
from sglang_eagle3.serving import launch_plan
from sglang_eagle3.serving.settings import ServerSettings, field_flag
from sglang_eagle3.source import validation_sites
from sglang_eagle3.source.server_args import server_flags
from sglang_eagle3.source.tree import locate
from sglang_eagle3_audits import sglang_rules as audit
from support.draft_fixtures import eagle3_draft_config, kimi_target, write_draft
from support.forkserver import ForkServer
from support.gpus import DATA as DATA_SMI
from support.gpus import fake_nvidia_smi
from support.pins import stack_dir
from support.stack_libraries import NEWEST_LIBRARIES, stack_libraries, with_path

DIRS = {v: stack_dir(v) for v in stacks.versions()}
DATA = {v: json.loads((d / audit.AUDIT.data).read_text()) for v, d in DIRS.items()}
POLICY = {v: json.loads((d / audit.AUDIT.policy).read_text()) for v, d in DIRS.items()}
RULES = audit.preflight_rules()


# -- the data is what the wheels hold ------------------------------------------------------------------------------


def test_the_data_is_what_the_pinned_wheel_holds(tree):
    data = DATA[tree.version]
    assert data["sglang"]["version"] == tree.version
    assert {s.key: s.to_dict() for s in validation_sites.sites(tree)} == data["sites"], (
        "run python -m sglang_eagle3_audits --write --only sglang-rules"
    )


def test_the_raise_and_assert_sites_of_the_validation_files():
    """All of 0.5.9's server_args.py, and 0.5.23's server_args.py with srt/arg_groups/, counted line by line as
    the issue counts them (129 and 764); then the helpers they reach, the rewrites and the parser."""

    def count(version, prefixes):
        return sum(1 for s in DATA[version]["sites"].values() if s["kind"] in ("raise", "assert")
                   and s["where"].startswith(prefixes))  # fmt: skip

    assert count("0.5.9", "srt/server_args.py:") == 129
    assert count("0.5.23", ("srt/server_args.py:", "srt/arg_groups/")) == 764
    for version, data in DATA.items():
        kinds = {s["kind"] for s in data["sites"].values()}
        assert kinds == set(validation_sites.KINDS), version
        helpers = {s["where"].split(":")[0] for s in data["sites"].values()} - {"srt/server_args.py"}
        assert "srt/configs/model_config.py" in helpers and "srt/utils/common.py" in helpers  # reached helpers


def test_the_issues_sites_are_in_the_data_at_their_lines():
    """The sites issue 26 quotes, found by key, at the lines it gives (the V2 worker's rules included)."""
    sites59, sites523 = DATA["0.5.9"]["sites"], DATA["0.5.23"]["sites"]

    def where(sites, needle):
        return next(s["where"] for k, s in sites.items() if needle in k)

    assert where(sites59, "is_flashinfer_trtllm()") == "srt/server_args.py:2348"
    assert where(sites59, "page_size > 1 is unstable") == "srt/server_args.py:2457"
    assert where(sites59, "choices --attention-backend") == "srt/server_args.py:3829"
    assert (
        where(sites523, "_handle_eagle_family::raise ValueError: trtllm_mha")
        == "srt/arg_groups/speculative_hook.py:1178"
    )
    assert where(sites523, "page_size > 1 is only supported") == "srt/arg_groups/speculative_hook.py:1278"


# -- every site is accounted for ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", sorted(DATA))
def test_every_site_is_a_rule_or_not_checkable_with_a_reason(version):
    found = audit.problems(DATA[version], POLICY[version], RULES)
    assert found == [], f"{len(found)} not accounted for:\n" + "\n".join(found[:40])


def test_the_checker_reports_each_way_it_can_break():
    data, policy = copy.deepcopy(DATA["0.5.9"]), copy.deepcopy(POLICY["0.5.9"])
    new = "srt/layers/new_helper.py::check::raise ValueError: a rule of a new release"
    data["sites"][new] = {"kind": "raise", "where": "srt/layers/new_helper.py:7", "function": "check", "text": "."}
    unreached = "srt/server_args.py::ServerArgs.never_called::raise ValueError: x"
    data["sites"][unreached] = {"kind": "raise", "where": "srt/server_args.py:1", "function": "f", "text": ".",
                                "reached": False}  # fmt: skip
    first = {  # patterns are tried in order: these go before the policy's own
        "srt/server_args.py::ServerArgs._handle_speculative_decoding::raise ValueError: Currently standalone*":
            "rule:spec-page-tree",
        "srt/server_args.py::ServerArgs._handle_page_size::*": "rule:no-such-rule",
        "srt/nowhere.py::*": "reason:ports",
        "srt/server_args.py::ServerArgs._handle_grammar_backend::*": "reason:short",
    }  # fmt: skip
    policy["dispositions"] = {**first, **policy["dispositions"]}
    policy["reasons"]["unused"] = "a reason no pattern names, long enough to pass the length test of reasons"
    policy["reasons"]["short"] = "too short"
    found = audit.problems(data, policy, RULES)
    assert f"{new} (srt/layers/new_helper.py:7): no disposition" in found
    assert f"{unreached} (srt/server_args.py:1): given to SGLang's own run, which does not reach it" in found
    assert any("rule spec-page-tree does not restate this site" in p for p in found)
    assert any(p.endswith(": rule no-such-rule does not exist" + p.split("does not exist")[1]) for p in found)
    assert "pattern 'srt/nowhere.py::*' disposes of no site" in found
    assert "reason unused is not used" in found and "reason short too short to say why: 'too short'" in found


@pytest.mark.parametrize("rule", [r.name for r in settings_rules.RULES] + sorted(settings_rules.PARSER_RULES))
def test_removing_a_rule_leaves_its_sites_unaccounted_for(rule):
    rules = {k: v for k, v in RULES.items() if k != rule}
    found = [p for v in DATA for p in audit.problems(DATA[v], POLICY[v], rules)]
    assert found and all(f"rule {rule} does not exist" in p for p in found)


def test_sites_given_to_sglangs_own_run_are_reached_and_the_other_dispositions_are_few():
    """SGLang's own run judges most sites; the restated rules and the reasons are each named, counted."""
    for version in DATA:
        tally = audit.counts(DATA[version], POLICY[version])
        own = sum(n for (_, d), n in tally.items() if d == f"rule:{sglang_validation.RULE}")
        reasons = sum(n for (_, d), n in tally.items() if d.startswith("reason:"))
        assert own > 2 * reasons, (version, own, reasons)


# -- each rule catches its trigger, and only the rule does --------------------------------------------------------


@pytest.fixture(scope="module")
def smi(tmp_path_factory):
    return fake_nvidia_smi(tmp_path_factory.mktemp("smi"), "8x-rtx-pro-6000.csv")


def settings_findings(report) -> list:
    return [f for f in report.findings if f.name in ("settings", "extra_args")]


def restated_cases():
    parser = [(name, trigger) for name, (_, _, trigger) in settings_rules.PARSER_RULES.items()]
    return [(r.name, r.trigger) for r in settings_rules.RULES] + parser


@pytest.mark.parametrize("rule, trigger", restated_cases(), ids=[c[0] for c in restated_cases()])
def test_each_restated_rule_fails_its_trigger_and_only_it_does(tree, rule, trigger, smi, monkeypatch):
    """With the default hub model (not on this host) SGLang's own run does not start (nor on pristine 0.5.9, whose probe
    fails first): the restated rule alone judges.
    A rule applies to a tree that has its site; with the rule taken out, preflight passes the same settings."""
    restated = next((r for r in settings_rules.RULES if r.name == rule), None)
    site = restated.site(tree) if restated else None
    settings = ServerSettings(**trigger)
    report = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    failed = [f for f in settings_findings(report) if f.status is Status.FAIL]
    own = next(f for f in report.findings if f.name == sglang_validation.NAME)
    assert own.status is Status.NOT_CHECKED  # a hub model not on this host, or a probe failure first
    if restated is not None and site is None:
        assert not any(rule in f.message for f in failed), failed  # 0.5.23 has no such check: nothing refused
        return
    assert len(failed) == 1, report.render_text()
    named = [k for k in trigger if k not in ("extra_args", "environment")] + list(trigger.get("extra_args", [])[:1])
    named += [f"environment {k}" for k in trigger.get("environment", {})] + ["SGLANG_ENABLE_SPEC_V2"]
    assert any(n.split()[-1] in failed[0].message for n in named), failed[0].message
    if site is not None:
        assert site.where in failed[0].message
    if restated is not None:
        monkeypatch.setattr(settings_rules, "RULES", tuple(r for r in settings_rules.RULES if r.name != rule))
    else:
        monkeypatch.setattr(settings_rules, "PARSER_RULES", {k: v for k, v in settings_rules.PARSER_RULES.items()
                                                             if k != rule})  # fmt: skip
    again = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    assert not any(f.status is Status.FAIL for f in settings_findings(again)), again.render_text()


def test_a_site_pattern_has_one_wildcard_for_the_rules_and_the_audit_alike(tree):
    """Keys hold [ ] and ?, so * is the only wildcard. Each rule finds its site with the very matcher the audit
    disposes of sites with: the site the rule applies is one the policy gives that rule."""
    key = "srt/server_args.py::ServerArgs.f::assert x[0] in ('a', 'b')?"
    assert validation_sites.key_matches("*::assert x[0] in *?", key)
    assert not validation_sites.key_matches("*::assert x[01] in *", key)  # fnmatch's set would match x[0]
    assert not validation_sites.key_matches("*::assert x?0] in *", key)  # and its ? one character
    policy = POLICY[tree.version]
    for rule in settings_rules.RULES:
        site = rule.site(tree)
        if site is not None:
            assert audit.disposition(site.key, policy)[1] == f"rule:{rule.name}", (rule.name, site.key)


def test_a_trtllm_mha_tree_is_judged_by_the_running_trees_own_rule(tree, smi):
    """top-k > 1 with attention_backend trtllm_mha loads as settings on every stack; preflight refuses it with the
    line of the tree that will run it (0.5.9's server_args.py, 0.5.23's speculative_hook.py), never another's."""
    values = {"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 4, "attention_backend": "trtllm_mha"}
    settings = ServerSettings(**values)
    site = next(r for r in settings_rules.RULES if r.name == "spec-trtllm-mha").site(tree)
    report = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    failed = [f for f in settings_findings(report) if f.status is Status.FAIL]
    assert len(failed) == 1, report.render_text()
    message = failed[0].message
    assert message.startswith("speculative_eagle_topk: attention_backend trtllm_mha supports only top-k 1, not 2")
    assert f"SGLang {tree.version} refuses it: ValueError at {site.where}" in message
    assert site.where.startswith("srt/server_args.py:" if tree.version == "0.5.9" else "srt/arg_groups/")
    chain = ServerSettings(**{**values, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4})
    again = preflight.preflight(chain, str(tree.root), nvidia_smi=smi, drafts=False)
    assert not any(f.status is Status.FAIL for f in settings_findings(again)), again.render_text()


def owned(flag: str) -> str | None:
    return next((n for n in ServerSettings.model_fields if field_flag(n) == flag), None)


def test_every_choices_flag_refuses_a_value_outside_its_choices(tree):
    """Each flag whose choices are literals, given a value outside them: refused, naming it and its file:line."""
    known = server_flags(tree)
    sites = [s for s in settings_rules.tree_sites(tree) if s.kind == "choices" and s.choices and s.flag in known]
    assert len(sites) > 40
    for site in sites:
        given = [settings_rules.Given(site.flag, "nope-value", f"extra_args {site.flag}", known[site.flag][0])]
        problems = settings_rules.value_problems(given, tree, known)
        assert len(problems) == 1 and site.flag in problems[0][1] and site.where in problems[0][1], site.key
        if all(isinstance(c, str) for c in site.choices):
            ok = [settings_rules.Given(site.flag, site.choices[0], "x", known[site.flag][0])]
            assert settings_rules.value_problems(ok, tree, known) == [], site.key


PARSER_DRIVER = REPO / "tests" / "support" / "drivers" / "sglang_parser_driver.py"
VALUES = st.one_of(
    st.sampled_from(["nope-value", "12", "1.5", "many", "0", "auto"]),
    st.integers().map(str),
    st.text(st.characters(codec="ascii", exclude_characters="-\x00"), min_size=1, max_size=8),
)


@hypothesis_settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_values_are_judged_as_sglangs_parser_judges_them(pristine_tree, fork_server, data):
    """Generated values for every choices, int and float flag of 0.5.9, judged by the restated rules and by SGLang's
    own parser (ServerArgs.add_cli_args, run by tests/support/drivers/sglang_parser_driver.py): refused by one
    exactly when refused by the other (flags with another type, e.g. json.loads, are SGLang's own run's)."""
    tree = locate(pristine_tree)
    known = server_flags(tree)
    sites = [s for s in settings_rules.tree_sites(tree) if s.flag in known and (s.kind == "type" or s.choices)]
    kinds = {s.flag: s.parser_type for s in sites if s.kind == "type"}
    flags = sorted({s.flag for s in sites if kinds.get(s.flag, "int") in ("int", "float")})
    cases = {}
    for flag in flags:
        choices = next((s.choices for s in sites if s.flag == flag and s.kind == "choices"), None) or []
        value = data.draw(st.one_of(VALUES, st.sampled_from([str(c) for c in choices] or ["1"])), label=flag)
        cases[f"{flag}={value}"] = ["--model-path", "m", flag, value]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.root), str(REPO / "tests" / "stand_ins")])}
    result = fork_server.run([sys.executable, str(PARSER_DRIVER)], input=json.dumps(cases), capture_output=True,
                             text=True, env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    differ = []
    for case, argv in cases.items():
        flag, value = argv[2], argv[3]
        ours = settings_rules.value_problems([settings_rules.Given(flag, value, f"extra_args {flag}",
                                                                   known[flag][0])], tree, known)  # fmt: skip
        if bool(ours) != ("__error__" in parsed[case]):
            differ.append((case, ours, parsed[case].get("__error__")))
    assert differ == []


# -- SGLang's own run ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_server(tmp_path_factory):
    """SGLang's own runs (and its parser's) of this module's tests, each a fork of one interpreter per environment
    that imported the tree once (support/forkserver.py), instead of a new interpreter importing it for each run."""
    server = ForkServer(tmp_path_factory.mktemp("fork-server"))
    yield server
    server.close()


@pytest.fixture
def own_env(tree, monkeypatch, request, fork_server):
    """A tree preflight passes apart from the settings under test (0.5.9 patched: its probe fails pristine, and
    SGLang's own run waits for the rest to pass), and what that run needs in this test environment: 0.5.23's
    transformers 5 (and the rest of stack_libraries.NEWEST_LIBRARIES) beside it; 0.5.9 imports as it is."""
    monkeypatch.setattr(sglang_validation, "subprocess", fork_server.module())
    if tree.version == "0.5.9":
        return locate(request.getfixturevalue("patched_tree"))
    if os.environ.get("SGLANG_EAGLE3_SGLANG_WHEEL"):
        pytest.skip("the Nix check has no network to fetch 0.5.23's libraries")
    libraries = stack_libraries("0.5.23", NEWEST_LIBRARIES, CACHE)
    monkeypatch.setenv("PYTHONPATH", with_path(dict(os.environ), libraries)["PYTHONPATH"])
    return tree


def site_where(tree, needle: str) -> str:
    """Where the tree's own site whose key holds ``needle`` is (a patched tree's lines are its own)."""
    return next(s.where for s in validation_sites.sites(tree) if needle in s.key and "#" not in s.key)


def local_settings(tmp_path, **values) -> ServerSettings:
    model = kimi_target(tmp_path / "Kimi-K2.5")
    base = {"model_path": str(model), "speculative_draft_model_path": str(model)}
    return ServerSettings(**{**base, **values})


def own_finding(report):
    found = [f for f in report.findings if f.name == sglang_validation.NAME]
    assert found, report.render_text()
    return found


def test_sglangs_own_run_catches_what_no_rule_restates(own_env, tmp_path, smi, monkeypatch):
    """served_model_name with a colon: both trees' check_server_args assert against it, and no restated rule does.
    The run FAILs naming the setting at SGLang's line; without the run, preflight passes the settings."""
    tree = own_env
    settings = local_settings(tmp_path, served_model_name="kimi:k2.5", enable_flashinfer_allreduce_fusion=False)
    report = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    failed = [f for f in own_finding(report) if f.status is Status.FAIL]
    assert len(failed) == 1, report.render_text()
    assert (
        failed[0].where == site_where(tree, "assert ':' not in")
        and "served_model_name (kimi:k2.5)" in failed[0].message
    )
    assert "check_server_args, before any weights load" in failed[0].message
    assert not any(f.status is Status.FAIL for f in settings_findings(report))  # no restated rule has it
    monkeypatch.setattr(sglang_validation, "check", lambda *args, **kwargs: None)
    again = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    judged = [f for f in again.findings if f.name in ("settings", "extra_args", sglang_validation.NAME)]
    assert judged and not any(f.status is Status.FAIL for f in judged), again.render_text()


def test_sglangs_own_run_reports_a_value_it_changes(own_env, tmp_path, smi):
    """A value the user set that SGLang rewrites while it resolves: a WARN naming the setting and SGLang's line.
    FlashMLA takes pages of 64 only: both trees raise a page size of 16 to it."""
    tree = own_env
    settings = local_settings(tmp_path, attention_backend="flashmla", extra_args=["--page-size", "16"],
                              enable_flashinfer_allreduce_fusion=False)  # fmt: skip
    report = preflight.preflight(settings, str(tree.root), nvidia_smi=smi, drafts=False)
    warned = [f for f in own_finding(report) if f.status is Status.WARN]
    assert len(warned) == 1 and warned[0].message.startswith("extra_args --page-size: SGLang"), report.render_text()
    assert "from 16 to 64" in warned[0].message.replace("'", "")
    path, line = warned[0].where.rsplit(":", 1)
    text = (tree.package / path).read_text().splitlines()[int(line) - 1]
    assert "page_size" in text, text


def test_gpus_without_a_memory_total_leave_sglangs_own_run_to_say_so(own_env, tmp_path):
    """nvidia-smi prints [N/A] for memory.total where a GPU's memory is the host's: preflight neither crashes nor
    makes a figure up. SGLang sizes its memory settings from the GPU's total, so its run says it needed that."""
    recording = tmp_path / "no-memory-total.csv"
    rows = (DATA_SMI / "8x-rtx-pro-6000.csv").read_text().splitlines()
    recording.write_text("".join(row.rsplit(",", 1)[0] + ", [N/A]\n" for row in rows))
    smi = fake_nvidia_smi(tmp_path, str(recording), topology=(DATA_SMI / "8x-rtx-pro-6000.topo").read_text())
    settings = local_settings(tmp_path, enable_flashinfer_allreduce_fusion=False)
    report = preflight.preflight(settings, str(own_env.root), nvidia_smi=smi, drafts=False)
    own = own_finding(report)
    assert len(own) == 1 and own[0].status is Status.NOT_CHECKED, report.render_text()
    assert f"SGLang {own_env.version}'s own checks need nvidia-smi's memory.total (it reported none)" in own[0].message
    assert own[0].where and own[0].where.startswith("srt/"), own[0]


def test_sglangs_own_run_reaches_the_whole_validation_without_weights_or_gpu(own_env, tmp_path):
    """The run on the defaults gets through the parser, the resolution and check_server_args ("done"), entering
    every entry point the audit starts from and the handlers of speculative decoding; the facts it was answered
    with are the recorded GPUs'."""
    tree = own_env
    settings = local_settings(tmp_path, enable_flashinfer_allreduce_fusion=False)
    plan = launch_plan.build(settings)
    request = {"argv": plan.args, "trace": True,
               "facts": {"compute_capability": "12.0", "names": ["NVIDIA RTX PRO 6000"] * 8, "memory_mib": [97887] * 8},
               "modules": validation_sites.imported_by_validation(tree)}  # fmt: skip
    outcome = sglang_validation.run(request, plan, tree, explicit=True)
    assert outcome["stage"] == "done", outcome
    entered = set(outcome["entered"])
    roots = validation_sites.roots(tree)
    assert {f"srt/server_args.py::{r}" for r in roots} <= entered and "ServerArgs.check_server_args" in roots
    spec = "ServerArgs._handle_speculative_decoding" if tree.version == "0.5.9" else "_handle_eagle_family"
    assert any(e.endswith(spec) for e in entered), sorted(entered)[:20]
    own = {f"{s['where'].split(':')[0]}::{s['function']}" for k, s in DATA[tree.version]["sites"].items()
           if audit.disposition(k, POLICY[tree.version])[1] == f"rule:{sglang_validation.RULE}"}  # fmt: skip
    print(f"{tree.version}: {len(own & entered)} of {len(own)} functions given to the run were entered on the defaults")
    assert len(own & entered) > 30


def cudnn_findings(settings, patched_tree, smi) -> list:
    report = preflight.preflight(settings, str(locate(patched_tree).root), nvidia_smi=smi, drafts=False)
    return [f for f in own_finding(report) if f.status is Status.FAIL and "CuDNN" in f.message]


def test_sglangs_own_run_catches_the_cudnn_check_nobody_listed(patched_tree, tmp_path, smi, monkeypatch, fork_server):
    """0.5.9's check_server_args refuses torch 2.9.1 with cuDNN < 9.15 for a multimodal model (Kimi-K2.5): found by
    running SGLang's own code, not by any rule written here. The stack carries cuDNN 9.16 (nix/pins.json), as this
    environment's torch does (tests/run), and passes; cuDNN 9.13, nixpkgs' cudaPackages_13_0.cudnn, is refused.
    This is the one test that sets SGLANG_DISABLE_CUDNN_CHECK, SGLang's escape, to show what it turns off."""
    import torch

    if not torch.__version__.startswith("2.9.1") or not torch.backends.cudnn.is_available():
        pytest.skip(f"the gate is torch 2.9.1's with cuDNN; this environment has torch {torch.__version__}")
    assert torch.backends.cudnn.version() >= 91500, "tests/run gives the tests' torch the stack's cuDNN"
    monkeypatch.setattr(sglang_validation, "subprocess", fork_server.module())
    settings = local_settings(tmp_path, enable_flashinfer_allreduce_fusion=False)
    assert cudnn_findings(settings, patched_tree, smi) == []

    # An older cuDNN: the one value the gate reads, torch.backends.cudnn.version(), answered as cuDNN 9.13 answers
    # it (a stand-in: the real 9.13 library is a 700 MB wheel the test environment does not carry).
    site = tmp_path / "old-cudnn"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import torch.backends.cudnn\ntorch.backends.cudnn.version = lambda: 91300\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    (failed,) = cudnn_findings(settings, patched_tree, smi)
    assert "CuDNN Compatibility" in failed.message and "CuDNN 9.13" in failed.message, failed.message
    assert failed.where.startswith("srt/server_args.py:") and "SGLANG_DISABLE_CUDNN_CHECK" in failed.message

    # SGLang's escape turns the gate off (the stack, its wrapper, unit, images and manifests never set it).
    monkeypatch.setenv("SGLANG_DISABLE_CUDNN_CHECK", "1")
    assert cudnn_findings(settings, patched_tree, smi) == []


def test_without_sglang_importable_the_run_says_not_checked(tmp_path, smi, patched_tree, monkeypatch):
    """An interpreter that cannot import the tree's dependencies: NOT CHECKED, saying so; the restated rules
    still judge."""
    monkeypatch.setattr(sglang_validation.sys, "executable", sys.executable)
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('no torch on this laptop')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))
    settings = local_settings(tmp_path, attention_backend="nope_backend")
    report = preflight.preflight(settings, str(locate(patched_tree).root), nvidia_smi=smi, drafts=False)
    own = own_finding(report)[0]
    assert own.status is Status.NOT_CHECKED and "no torch on this laptop" in own.message
    assert "only the restated rules above judged the settings" in own.message
    assert any(f.status is Status.FAIL and "nope_backend" in f.message for f in settings_findings(report))


# -- the issue's examples, as a user runs them ---------------------------------------------------------------------


EXAMPLES = {
    "choices": (["--set", "attention_backend=nope_backend"], "attention_backend: SGLang {v} refuses 'nope_backend'"),
    "extra_args choices": (["--set", 'extra_args=["--decode-attention-backend", "nope_backend"]'],
                           "extra_args --decode-attention-backend: SGLang {v} refuses 'nope_backend'"),
    "extra_args owned flag": (["--set", 'extra_args=["--attention-backend", "nope_backend"]'],
                              "--attention-backend is the setting 'attention_backend'; set it there"),
    "page tree": (["--set", "speculative_eagle_topk=4", "--set", "speculative_num_draft_tokens=8", "--set",
                   "attention_backend=flashmla", "--set", 'extra_args=["--page-size", "64"]'],
                  "speculative_eagle_topk: 4 with extra_args --page-size 64 on attention_backend flashmla"),
    "moe runner": (["--set", 'extra_args=["--speculative-moe-runner-backend", "flashinfer_trtllm"]'],
                   "extra_args --speculative-moe-runner-backend: SGLang {v} refuses flashinfer_trtllm"),
}  # fmt: skip


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_issues_examples_fail_serve_dry_run(tree, example, run_cli, smi):
    args, message = EXAMPLES[example]
    result = run_cli("serve", "--dry-run", "--sglang", str(tree.root), *args, env={"SGLANG_EAGLE3_NVIDIA_SMI": smi})
    assert "Traceback" not in result.stdout + result.stderr
    said = message.format(v=tree.version)
    if example == "moe runner" and tree.version == "0.5.23":  # 0.5.23 dropped that assert: the flag is taken
        assert said not in result.stdout
        return
    assert result.returncode == 1 and said in result.stdout, result.stdout  # exit 1 before any weights load
    line = next(s for s in result.stdout.splitlines() if said in s)
    if example != "extra_args owned flag":  # that one names the setting to use instead
        assert ("srt/server_args.py:" if tree.version == "0.5.9" else "srt/arg_groups/") in line


def test_own_run_catches_an_issue_example_in_sglangs_words(own_env, tmp_path, run_cli, smi):
    """With the model on this host, `serve --dry-run` also runs SGLang's own checks: the page-tree example is
    refused in SGLang's words, at its line, naming the settings."""
    tree = own_env
    model = kimi_target(tmp_path / "Kimi-K2.5")
    draft = write_draft(tmp_path / "draft", eagle3_draft_config(), d2t_rows=32000)
    backend = "triton" if tree.version == "0.5.9" else "flashmla"
    args = ["--set", f"model_path={model}", "--set", f"speculative_draft_model_path={draft}",
            "--set", "enable_flashinfer_allreduce_fusion=false", "--set", "speculative_draft_attention_backend=fa3",
            "--set", "speculative_eagle_topk=4", "--set", "speculative_num_draft_tokens=8",
            "--set", f"attention_backend={backend}", "--set", 'extra_args=["--page-size", "16"]']  # fmt: skip
    result = run_cli("serve", "--dry-run", "--sglang", str(tree.root), *args,
                     env={"SGLANG_EAGLE3_NVIDIA_SMI": smi, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    line = next((s for s in result.stdout.splitlines() if s.startswith("[FAIL] sglang checks")), result.stdout)
    assert (
        f"({site_where(tree, 'page_size > 1 is')})" in line
        and "ValueError: speculative_eagle_topk > 1 with page_size > 1" in line
    )
    assert "speculative_eagle_topk (4)" in line and f"attention_backend ({backend})" in line


def test_the_audit_check_passes():
    """--check: the data and docs/sglang-rules.md are what the audit writes, and every site accounted for."""
    result = subprocess.run([sys.executable, "-m", "sglang_eagle3_audits", "--check", "--only", "sglang-rules",
                             "--cache", str(CACHE)], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_audit_refuses_a_stack_it_does_not_have():
    result = subprocess.run([sys.executable, "-m", "sglang_eagle3_audits", "--check", "--only", "sglang-rules",
                             "--stack", "0.4.0"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "no stack 0.4.0 in nix/pins.json" in result.stderr and "0.5.23" in result.stderr


@pytest.mark.parametrize(
    "text, said",
    [(None, "is missing"), ("{", "is not JSON"), ("[]", "must be an object"),
     ('{"dispositions": {"*": "reason:x"}}', "must be an object"),
     ('{"dispositions": {"*": 1}, "reasons": {}}', "must be an object")],
)  # fmt: skip
def test_a_policy_file_that_is_missing_or_malformed_is_named(tmp_path, text, said):
    path = tmp_path / audit.AUDIT.policy
    if text is not None:
        path.write_text(text)
    with pytest.raises(BadInput) as exit_:
        audit.AUDIT.read_policy(path)
    assert str(exit_.value).startswith(f"{path} {said}"), exit_.value


def test_each_stacks_policy_reads():
    for directory in DIRS.values():
        policy = directory / audit.AUDIT.policy
        assert audit.AUDIT.read_policy(policy) == json.loads(policy.read_text())


def test_the_docs_say_v2_is_the_only_path_on_0523(newest_tree):
    """On 0.5.23 speculative decoding always runs the V2 worker; the lines the docs quote say so in the real wheel,
    and its top-k rules are the ones preflight applies there."""
    package = locate(newest_tree).package / "srt"
    quoted = {
        "speculative/spec_info.py:352": "always use the V2 worker",
        "speculative/spec_registry.py:38": "the spec V1 worker path has been",
        "speculative/spec_registry.py:147": "worker path has been removed",
        "arg_groups/speculative_hook.py:1177": "if cfg.speculative_eagle_topk > 1:",
        "arg_groups/speculative_hook.py:1274": "cfg.speculative_eagle_topk > 1",
        "arg_groups/speculative_hook.py:1221": "if cfg.speculative_eagle_topk != 1:",
        "speculative/eagle_worker_v2.py:197": "Chain speculative sampling supports only topk=1",
    }
    for where, text in quoted.items():
        path, line = where.rsplit(":", 1)
        assert text in (package / path).read_text().splitlines()[int(line) - 1], where
    upgrade, drafts = (REPO / "docs" / "upgrade.md").read_text(), (REPO / "docs" / "draft-checks.md").read_text()
    assert "the V2 worker is the only path" in upgrade and "the V2 worker only" in drafts
    for doc in (upgrade, drafts):
        assert "srt/speculative/spec_info.py:352" in doc and "srt/speculative/eagle_worker_v2.py:197" in doc
        assert "speculative_hook.py:1177" in doc and ":1274" in doc


CASES_DRIVER = REPO / "tests" / "support" / "drivers" / "sglang_validation_cases_driver.py"
BACKENDS = ["flashinfer", "fa3", "triton", "flashmla", "trtllm_mla", "trtllm_mha"]


@st.composite
def speculative_cases(draw, newest: bool) -> dict:
    """Settings around the restated rules' boundaries: top-k, page size, the backends, the MoE runner, rejection
    sampling (0.5.23's flag)."""
    topk = draw(st.sampled_from([1, 2, 4]))
    extra = []
    if (page := draw(st.sampled_from([None, 1, 2, 16, 64]))) is not None:
        extra += ["--page-size", str(page)]
    if draw(st.booleans()):
        extra += ["--decode-attention-backend", draw(st.sampled_from(BACKENDS))]
    if draw(st.booleans()):
        extra += ["--speculative-moe-runner-backend", draw(st.sampled_from(["flashinfer_trtllm", "triton"]))]
    if newest and draw(st.booleans()):
        extra += ["--speculative-use-rejection-sampling"]
    return {"speculative_eagle_topk": topk, "speculative_num_draft_tokens": 4 if topk == 1 else 8,
            "attention_backend": draw(st.sampled_from(BACKENDS)), "extra_args": extra,
            "enable_flashinfer_allreduce_fusion": False}  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
@hypothesis_settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)  # a shrink step is a 30 s run
@given(data=st.data())
def test_restated_rules_agree_with_sglangs_own_resolution(version, data, request, tmp_path_factory, fork_server):
    """Generated settings around each restated rule's boundary, judged by the rules (no SGLang import) and by
    SGLang's own resolution (all cases in one process, tests/support/drivers/sglang_validation_cases_driver.py):
    a rule never refuses what SGLang takes (no false alarm), and where SGLang stops at a rule's site the rule
    refuses too, except where SGLang changed the page size itself first (a backend's own pages: only its own
    run sees that, and it runs in preflight where SGLang can be imported)."""
    tree = locate(request.getfixturevalue("pristine_tree" if version == "0.5.9" else "newest_tree"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if version == "0.5.23":
        if os.environ.get("SGLANG_EAGLE3_SGLANG_WHEEL"):
            pytest.skip("the Nix check has no network to fetch 0.5.23's libraries")
        env = with_path(env, stack_libraries("0.5.23", NEWEST_LIBRARIES, CACHE))
    model = kimi_target(tmp_path_factory.mktemp("model") / "Kimi-K2.5")
    cases, judged = {}, {}
    known = server_flags(tree)
    applied = [(r, s) for r in settings_rules.RULES if (s := r.site(tree)) is not None]
    for i in range(25):
        values = data.draw(speculative_cases(version == "0.5.23"), label=f"case {i}")
        settings = ServerSettings(model_path=str(model), speculative_draft_model_path=str(model), **values)
        args = launch_plan.sglang_args(settings)
        given = settings_rules.given_flags(settings, args, known)
        judged[f"case {i}"] = {r.name for r, s in applied if r.judge(settings, given, tree, s)}
        cases[f"case {i}"] = {"argv": args, "facts": {"compute_capability": "12.0",
                              "names": ["NVIDIA RTX PRO 6000"] * 8, "memory_mib": [97887] * 8},
                              "modules": validation_sites.imported_by_validation(tree)}  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join([str(tree.root), env.get("PYTHONPATH", "")])
    result = fork_server.run([sys.executable, str(CASES_DRIVER)], input=json.dumps(cases), capture_output=True,
                             text=True, env=env, timeout=900)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    sites = {s.where: r.name for r, s in applied}
    for name, outcome in outcomes.items():
        assert outcome["stage"] != "import" and "missing_fact" not in outcome, outcome
        argv = cases[name]["argv"]
        if outcome["stage"] == "done":
            assert not judged[name], (name, argv, judged[name])  # a rule refused what SGLang takes
        stopped_at = sites.get(outcome.get("where"))
        if stopped_at and stopped_at not in judged[name]:
            page = argv[argv.index("--page-size") + 1] if "--page-size" in argv else None
            page_changed = stopped_at == "spec-page-tree" and (page is None or int(page) <= 1)
            assert page_changed, (name, argv, outcome)  # SGLang raised an unset or single page to the backend's
