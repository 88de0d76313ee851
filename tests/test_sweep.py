"""`bench sweep` end to end: preflight, then for each point the launcher starts the (stand-in) server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench_fixtures import FAKE_SGLANG, free_port
from sglang_eagle3.bench import report
from test_preflight import fake_nvidia_smi


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
