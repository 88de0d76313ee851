"""Alert rules: valid for Prometheus, unit-tested with promtool (Debian's prometheus
package), every alert with a firing and a quiet case, thresholds rendered by Nix."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml
from conftest import REPO
from support.thresholds import render_thresholds

MONITORING = REPO / "modules" / "monitoring"
ALERTS = MONITORING / "sglang-eagle3-alerts.yml"
THRESHOLDS = MONITORING / "sglang-eagle3-thresholds.yml"
UNIT_TESTS = sorted((REPO / "tests" / "monitoring").glob("*.test.yml"))
PROMTOOL = shutil.which("promtool")
NIX = shutil.which("nix-instantiate")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian: apt-get install prometheus)")
needs_nix = pytest.mark.skipif(NIX is None, reason="needs nix-instantiate (Debian: apt-get install nix-bin)")


def alert_names() -> list[str]:
    return [r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_rule_files_pass_promtool_check():
    result = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS), str(THRESHOLDS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("unit_test", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(unit_test):
    result = subprocess.run([PROMTOOL, "test", "rules", str(unit_test)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("alert", alert_names())
def test_every_alert_has_a_firing_and_a_quiet_case(alert):
    cases = [case for path in UNIT_TESTS for test in yaml.safe_load(path.read_text())["tests"]
             for case in test.get("alert_rule_test", []) if case["alertname"] == alert]  # fmt: skip
    assert any(case.get("exp_alerts") for case in cases), f"{alert}: no promtool case where it fires"
    assert any(not case.get("exp_alerts") for case in cases), f"{alert}: no promtool case where it stays quiet"


@needs_nix
def test_committed_thresholds_are_the_nix_rendering_of_the_defaults():
    assert yaml.safe_load(THRESHOLDS.read_text()) == render_thresholds(), (
        f"{THRESHOLDS.relative_to(REPO)} is stale; write the rendering of modules/monitoring/thresholds.nix into it"
    )


def test_default_thresholds_come_from_the_users_baseline_and_the_draft():
    reference = json.loads((REPO / "python/src/sglang_eagle3/bench/reference.json").read_text())
    baseline = max(r["tok_s"] for r in reference["runs"] if not r["speculative"])
    assert baseline == 92.6
    rules = {r["record"]: r["expr"] for r in yaml.safe_load(THRESHOLDS.read_text())["groups"][0]["rules"]}
    assert rules["sglang_eagle3:decode_tok_s_floor"] == f"vector({round(baseline * 0.9, 2)})"
    assert rules["sglang_eagle3:accept_length_min"] == f"vector({round(2.69 * 0.8, 3)})"


@needs_nix
@needs_promtool
def test_thresholds_set_in_nix_change_what_fires(tmp_path):
    """With the draft's accept length set to 2.4 (alert below 1.92), a steady 2.0 no longer alerts; 1.8 does."""
    thresholds = tmp_path / "thresholds.yml"
    thresholds.write_text(json.dumps(render_thresholds(draftAcceptLength=2.4)))
    labels = 'job="sglang-eagle3", instance="gpu-a:30000"'
    unit = {
        "rule_files": [str(ALERTS), str(thresholds)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f"sglang:spec_accept_length{{{labels}}}", "values": "2x30"},
                {"series": 'sglang:spec_accept_length{job="sglang-eagle3",instance="gpu-b:30000"}', "values": "1.8x30"},
            ],
            "alert_rule_test": [{"eval_time": "20m", "alertname": "EagleAcceptLengthLow", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "job": "sglang-eagle3", "instance": "gpu-b:30000"},
                "exp_annotations": next(r["annotations"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
                                        for r in g["rules"] if r.get("alert") == "EagleAcceptLengthLow"),
            }]}],
        }],
    }  # fmt: skip
    annotations = unit["tests"][0]["alert_rule_test"][0]["exp_alerts"][0]["exp_annotations"]
    annotations["summary"] = "EAGLE-3 accept length on gpu-b:30000 is 1.80 tokens per step"
    test_file = tmp_path / "unit.test.yml"
    test_file.write_text(yaml.safe_dump(unit))
    result = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
