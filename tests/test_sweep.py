"""`bench sweep` end to end: preflight, then for each point the launcher starts the (stand-in) server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_eagle3.bench import report
from support.bench_fixtures import FAKE_SGLANG, free_port
from support.gpus import fake_nvidia_smi


def test_sweep_finds_the_fastest_point_and_its_gain(tmp_path, patched_tree):
    environment = json.dumps(
        {"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_RATE": "60", "FAKE_SGLANG_FIRST_DELAY": "0.02"}
    )
    out = tmp_path / "sweep"
    env = {**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "sweep", "--sglang", str(patched_tree),
         "--set", f"environment={environment}", "--set", f"port={free_port()}", "--set", "ready_timeout=30",
         "--steps", "1,2,3,4,5", "--topk", "1,2", "--draft-tokens", "40",
         "--requests", "2", "--warmup", "0", "--max-tokens", "48", "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr

    records = report.load(out / "sweep.jsonl")
    measured_labels = {r["label"] for r in records if r["type"] == "server_info"}
    assert "baseline" in measured_labels and "steps3-topk1-draft4" in measured_labels
    summary = [json.loads(line) for line in (out / "sweep-summary.jsonl").read_text().splitlines()]
    measured = {p["label"]: p["median_tok_s"] for p in summary if p["median_tok_s"]}
    assert set(measured) == measured_labels  # every started point was measured and summarised
    # The best point and its gain are the ones the measurements give (whether the measurements
    # match what the server sent is the accuracy tests' business, see test_bench_accuracy.py).
    fastest = max((label for label in measured if label != "baseline"), key=measured.get)
    assert f"best: {fastest} at {measured[fastest]:.1f} tok/s" in result.stdout
    assert f"{measured[fastest] / measured['baseline']:.3f}x the baseline" in result.stdout
    # An impossible point is reported, not run.
    skipped = next(p for p in summary if p["label"] == "steps1-topk2-draft40")
    assert skipped["error"] and "cannot be filled" in skipped["error"]
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_across_drafts_reports_each_drafts_accept_length_and_speed(tmp_path, patched_tree):
    from support.draft_fixtures import eagle3_draft_config, write_draft

    good, weak = (write_draft(tmp_path / name, eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
                  for name in ("draft-good", "draft-weak"))  # fmt: skip
    broken = write_draft(tmp_path / "draft-broken", eagle3_draft_config((1, 29, 57), num_hidden_layers=2), 32000)
    # The stand-in gains with a draft in proportion to its quality: there is one right answer.
    quality = json.dumps({str(good): 1.0, str(weak): 0.3})
    environment = json.dumps({"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_RATE": "60",
                              "FAKE_SGLANG_FIRST_DELAY": "0.02", "FAKE_SGLANG_DRAFT_QUALITY": quality})  # fmt: skip
    out = tmp_path / "sweep"
    env = {**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"),
           "HF_HUB_CACHE": str(tmp_path / "empty-hub-cache")}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "sweep", "--sglang", str(patched_tree),
         "--set", f"environment={environment}", "--set", f"port={free_port()}", "--set", "ready_timeout=30",
         "--draft", str(weak), "--draft", str(good), "--draft", str(broken), "--steps", "2,3", "--topk", "1",
         "--requests", "2", "--warmup", "0", "--max-tokens", "48", "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr

    records = report.load(out / "sweep.jsonl")
    truth = {r["label"]: r["raw"] for r in records if r["type"] == "server_info"}
    summary = {
        p["label"]: p for p in (json.loads(line) for line in (out / "sweep-summary.jsonl").read_text().splitlines())
    }
    for label in ("draft-good/steps3-topk1-draft4", "draft-weak/steps2-topk1-draft3"):
        assert label in truth and summary[label]["draft"] == label.split("/")[0]
    # Accept length per draft and setting is what the server reported, and tells the drafts apart.
    for label, point in summary.items():
        if label in truth and point["draft"]:
            true_accept = truth[label]["internal_states"][0]["avg_spec_accept_length"]
            assert abs(point["accept_length"] - true_accept) / true_accept < 0.1, (label, point, true_accept)
    for shape in ("steps2-topk1-draft3", "steps3-topk1-draft4"):
        good_point, weak_point = summary[f"draft-good/{shape}"], summary[f"draft-weak/{shape}"]
        assert good_point["accept_length"] > weak_point["accept_length"]
    fastest = max((label for label in truth if label != "baseline"), key=lambda label: truth[label]["fake_true_rate"])
    assert fastest == "draft-good/steps3-topk1-draft4"
    assert f"best: {fastest} at " in result.stdout
    assert "best for draft-weak: draft-weak/steps" in result.stdout
    # A draft that cannot work is checked, reported and never started.
    assert "[FAIL] draft layers: the draft has 2 layers" in result.stdout
    broken_points = [p for p in summary.values() if p["draft"] == "draft-broken"]
    assert broken_points and all("draft checks failed" in p["error"] for p in broken_points)
    assert not any(label.startswith("draft-broken") for label in truth)
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
