"""The benchmark against a real HTTP server on loopback streaming at a known rate.

The server is the stand-in in tests/stand_ins/fake_sglang (SGLang itself needs GPUs):
SGLang's /generate and /v1/chat/completions streaming formats, a first-token delay,
EAGLE-style bursts of several tokens per chunk.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from threading import Thread

import pytest
from sglang_eagle3.bench import report
from sglang_eagle3.bench.runner import RunConfig, run
from sglang_eagle3.exit_status import ExitStatus
from support import harness_env
from support.bench_fixtures import fake_server
from support.own_resources import refused_port


def test_openai_api_with_usage_counts(tmp_path):
    with fake_server(RATE=300, BURST=3) as server:
        output = tmp_path / "r.jsonl"
        run(RunConfig(url=server.url, output=output, api="openai", requests=2, warmup=0, max_tokens=300))
        requests = [r for r in report.load(output) if r["type"] == "request"]
    # Counted from the server's cumulative usage, not estimated; bursts of 3 seen as such.
    assert len(requests) == 2 and all(r["ok"] and not r["tokens_estimated"] for r in requests)
    assert all(r["output_tokens"] == 300 and max(r["chunk_tokens"]) == 3 for r in requests)


def test_speculative_metrics_are_recorded(tmp_path):
    with fake_server("--speculative-algorithm", "EAGLE3", RATE=100) as server:
        output = tmp_path / "r.jsonl"
        run(RunConfig(url=server.url, output=output, requests=2, warmup=0, max_tokens=40))
    records = report.load(output)
    request = next(r for r in records if r["type"] == "request")
    assert request["spec_accept_length"] > 1 and request["spec_verify_ct"] > 0 and 0 < request["spec_accept_rate"] <= 1
    info = next(r for r in records if r["type"] == "server_info")
    assert info["avg_spec_accept_length"] == info["raw"]["internal_states"][0]["avg_spec_accept_length"]
    group = report.summarize(records)[0]
    assert group.avg_spec_accept_length and group.stats["spec_accept_length"][1] > 1


def bench_cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "run", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw,
    )  # fmt: skip


def count_requests(path) -> int:
    return sum(1 for line in path.read_text().splitlines() if '"type": "request"' in line) if path.exists() else 0


def test_sigint_keeps_every_finished_request_and_prints_a_summary(tmp_path):
    output = tmp_path / "r.jsonl"
    with fake_server(RATE=100) as server:
        proc = bench_cli("--url", server.url, "--requests", "50", "--warmup", "0", "--max-tokens", "20",
                         "--output", str(output), "--no-plot")  # fmt: skip
        deadline = time.monotonic() + 30
        while count_requests(output) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    finished = count_requests(output)
    assert 3 <= finished < 50
    assert f"interrupted: {finished} finished requests are kept" in err
    assert f"run             1 {finished:>4}    0" in out  # the summary covers exactly those


def test_server_killed_mid_run_keeps_what_finished(tmp_path, run_cli):
    output = tmp_path / "r.jsonl"
    with fake_server(RATE=200, DIE_AFTER=3) as server:
        result = run_cli("bench", "run", "--url", server.url, "--requests", "10", "--warmup", "0", "--max-tokens", "20",
                         "--output", str(output))  # fmt: skip
    assert result.returncode == 1
    records = [r for r in report.load(output) if r["type"] == "request"]
    assert sum(r["ok"] for r in records) == 3
    assert "stopped early: 3 requests in a row failed" in result.stderr
    assert "run             1    3" in result.stdout  # summary of what finished
    assert "Traceback" not in result.stderr


def test_error_mid_stream_is_reported_per_request(tmp_path, run_cli):
    output = tmp_path / "r.jsonl"
    with fake_server(RATE=200, FAIL_AFTER=10) as server:
        result = run_cli("bench", "run", "--url", server.url, "--requests", "2", "--warmup", "0", "--max-tokens", "20",
                         "--output", str(output), "--no-plot")  # fmt: skip
    assert result.returncode == 1
    errors = [r["error"] for r in report.load(output) if r["type"] == "request"]
    assert errors and all("server error mid-stream" in e for e in errors)


def test_unreachable_url(tmp_path, run_cli):
    with refused_port() as port:
        result = run_cli("bench", "run", "--url", f"http://127.0.0.1:{port}", "--output", str(tmp_path / "r.jsonl"))
    assert result.returncode == 1 and "cannot reach http://127.0.0.1:" in result.stderr  # as the hub's (models)
    assert "Traceback" not in result.stderr and not (tmp_path / "r.jsonl").exists()


def test_a_server_that_accepts_and_never_answers_is_said_so(tmp_path, monkeypatch):
    """A port that accepts connections and answers nothing (a hung server, a forward to nothing) kept `bench run`
    silent for ten minutes; after Ctrl-C it named a results file it never wrote. It says what it is doing at once,
    gives up after client.IDENTIFY_TIMEOUT_S, and names no file it did not write."""
    import socket

    from sglang_eagle3.bench import client

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts (the kernel completes the handshake), never reads or answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        (tmp_path / "sitecustomize.py").write_text(  # the timeout, shortened for this test only
            "import sglang_eagle3.bench.client as c\nc.IDENTIFY_TIMEOUT_S = 2.0\n"
        )
        output = tmp_path / "r.jsonl"
        timed_out = subprocess.run([sys.executable, "-m", "sglang_eagle3", "bench", "run", "--url", url, "--output",
                                    str(output)], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
        assert timed_out.returncode == ExitStatus.CHECK_FAILED, timed_out.stderr
        assert timed_out.stderr.startswith(f"bench: {url}: asking what it serves (at most ")
        assert f"{url} did not answer /model_info within 2 s: the port is open but nothing answers" in timed_out.stderr
        proc = bench_cli("--url", url, "--output", str(output))  # the real timeout: stopped by Ctrl-C meanwhile
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert "it was stopped before the first request; nothing was written" in err and str(output) not in err
    assert not output.exists() and client.IDENTIFY_TIMEOUT_S == 30.0


def test_compare_judges_exactly_the_runs_it_names(tmp_path, run_cli):
    """`bench run` appends; compare took the median of every single-stream request in the file, whatever its run:
    a file of two runs (medians 4954 and 3079, as issue 46 found) was gated as one. Now a file of several runs is
    refused unless the run is named, and the run named is the only one judged."""
    base = write_results(tmp_path / "base.jsonl", "baseline", [4000.0, 4000.0, 4000.0])
    both = tmp_path / "eagle3.jsonl"
    first = write_results(tmp_path / "first.jsonl", "eagle3", [4950.0, 4954.0, 4960.0], run="20261204-101010-aaaaaa")
    second = write_results(tmp_path / "second.jsonl", "eagle3", [3070.0, 3079.0, 3090.0], run="20261204-111111-bbbbbb")
    both.write_text(first.read_text() + second.read_text())
    refused = run_cli("bench", "compare", str(base), str(both))
    assert refused.returncode == ExitStatus.BAD_INPUT and "Verdict" not in refused.stdout
    assert f"{both} holds 2 runs (bench run appends to its --output); name the one to judge with --eagle3-run" \
        in refused.stderr  # fmt: skip
    assert "20261204-101010-aaaaaa (label 'eagle3', 3 requests" in refused.stderr
    for named, median, status in (("20261204-101010-aaaaaa", "4954.0", 0), ("20261204-111111-bbbbbb", "3079.0", 1)):
        result = run_cli("bench", "compare", str(base), str(both), "--eagle3-run", named, "--threshold", "1.2")
        assert result.returncode == status and re.search(rf"^  EAGLE-3\s+{median}", result.stdout, re.M), result.stdout
    missing = run_cli("bench", "compare", str(base), str(both), "--eagle3-run", "nope")
    assert missing.returncode == ExitStatus.BAD_INPUT and "has no run 'nope'" in missing.stderr
    labelled = run_cli("bench", "compare", str(base), str(both), "--eagle3-run", "eagle3")  # a label two runs have
    assert labelled.returncode == ExitStatus.BAD_INPUT and "a label several runs have" in labelled.stderr
    # A file written before runs had ids: each "run" record starts the next (#1, #2).
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text(write_results(tmp_path / "a", "eagle3", [10.0]).read_text()
                      + write_results(tmp_path / "b", "eagle3", [20.0]).read_text())  # fmt: skip
    assert run_cli("bench", "compare", str(base), str(legacy)).returncode == ExitStatus.BAD_INPUT
    result = run_cli("bench", "compare", str(base), str(legacy), "--eagle3-run", "#2", "--threshold", "0.001")
    assert result.returncode == 0 and re.search(r"^  EAGLE-3\s+20.0", result.stdout, re.M)


def test_each_run_appended_to_a_file_has_its_own_id_and_summary(tmp_path, run_cli):
    output = tmp_path / "r.jsonl"
    with fake_server(RATE=400) as server:
        for label in ("eagle3", "eagle3"):
            result = run_cli("bench", "run", "--url", server.url, "--label", label, "--requests", "2", "--warmup",
                             "0", "--max-tokens", "8", "--output", str(output), "--no-plot")  # fmt: skip
            assert result.returncode == 0, result.stderr
    runs = report.runs(report.load(output))
    assert len(runs) == 2 and all(all(r["run"] == run_id for r in records) for run_id, records in runs.items())
    last = list(runs)[-1]
    assert f"results: {output} (run {last})" in result.stdout
    assert len(re.findall(r"^eagle3 +1 +2 +0 ", result.stdout, re.M)) == 1, result.stdout  # this run's summary only
    # a summary of the whole file keeps the two runs apart, though they share a label
    summary = run_cli("bench", "summary", str(output), "--no-plot")
    assert all(f"eagle3 ({run_id})" in summary.stdout for run_id in runs), summary.stdout


def test_not_an_sglang_server(tmp_path, run_cli):
    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = run_cli("bench", "run", "--url", url, "--output", str(tmp_path / "r.jsonl"))
    finally:
        server.shutdown()
    assert result.returncode == 2 and "does not look like an SGLang server" in result.stderr


def write_results(path, label, rates, run=None):
    lines = [{"type": "run", "label": label}]
    lines += [{"type": "request", "label": label, "concurrency": 1, "ok": True, "decode_tok_s": r,
               "chunk_times_us": [100000, 110000], "chunk_tokens": [1, 1]} for r in rates]  # fmt: skip
    path.write_text("".join(json.dumps({**x, "run": run} if run else x) + "\n" for x in lines))
    return path


def test_compare_gate_and_reference_numbers(tmp_path, run_cli):
    base = write_results(tmp_path / "base.jsonl", "baseline", [92.0, 92.6, 93.0])
    fast = write_results(tmp_path / "fast.jsonl", "eagle3", [95.0, 96.1, 97.0])
    slow = write_results(tmp_path / "slow.jsonl", "eagle3", [53.0, 54.1, 55.0])
    result = run_cli("bench", "compare", str(base), str(fast))
    assert result.returncode == 0 and "Verdict: OK" in result.stdout
    assert "[ OK ] speed-up: EAGLE-3 96.1 tok/s is 1.038x the baseline's 92.6" in result.stdout
    for ref in ("89.5", "92.6", "54.1", "96.1"):
        assert ref in result.stdout
    result = run_cli("bench", "compare", str(base), str(slow))
    assert result.returncode == 1 and "Verdict: FAIL (1 fail)" in result.stdout
    assert "[FAIL] speed-up: EAGLE-3 54.1 tok/s is 0.584x the baseline's 92.6" in result.stdout
    assert run_cli("bench", "compare", str(base), str(fast), "--threshold", "1.1").returncode == 1
    result = run_cli("bench", "compare", str(base), str(fast), "--floor", "100")
    assert result.returncode == 1 and "[FAIL] floor: EAGLE-3 96.1 tok/s is below the floor 100 tok/s" in result.stdout
    assert "[ OK ] speed-up:" in result.stdout and "Verdict: FAIL (1 fail, 1 ok)" in result.stdout


def test_compare_against_live_urls(run_cli, tmp_path):
    with (
        fake_server(RATE=400) as baseline,
        fake_server("--speculative-algorithm", "EAGLE3", RATE=400) as eagle3,
    ):
        result = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", "bench", "compare", baseline.url, eagle3.url],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
    files = sorted((tmp_path / "results").glob("*.jsonl"))
    assert len(files) == 2  # both measurements kept
    medians = {}  # label -> median decode rate of the recorded requests
    for records in map(report.load, files):
        requests = [r for r in records if r["type"] == "request"]
        medians[requests[0]["label"]] = statistics.median(r["decode_tok_s"] for r in requests)
    # The verdict is the one the recorded measurements give.
    printed = {k: float(v) for k, v in re.findall(r"^  (baseline|EAGLE-3)\s+([0-9.]+)", result.stdout, re.M)}
    assert printed == {"baseline": round(medians["baseline"], 1), "EAGLE-3": round(medians["eagle3"], 1)}
    expected = ExitStatus.OK if medians["eagle3"] >= medians["baseline"] else ExitStatus.CHECK_FAILED
    assert result.returncode == expected, result.stdout + result.stderr


def test_malformed_result_files(tmp_path, run_cli):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "run"}\nnot json\n{"type": "request"}\n')
    result = run_cli("bench", "compare", str(bad), str(bad))
    assert result.returncode == 2 and "bad.jsonl:2 is not a JSON record" in result.stderr
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}\n')
    assert "is not a sglang-eagle3 result record" in run_cli("bench", "summary", str(other)).stderr
    torn = write_results(tmp_path / "torn.jsonl", "baseline", [90.0])
    torn.write_text(torn.read_text() + '{"type": "requ')  # a crash mid-write
    assert run_cli("bench", "summary", str(torn), "--no-plot").returncode == 0


def test_plot_is_a_png(tmp_path):
    records = report.load(write_results(tmp_path / "r.jsonl", "baseline", [90.0, 91.0]))
    png = report.plot(records, tmp_path / "r.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_aggregate_throughput_is_what_the_server_sent_over_the_level(tmp_path):
    """Aggregate tok/s: all requests' tokens over the level's wall time, against the server's own log."""
    with fake_server(RATE=200, FIRST_DELAY=0.05) as server:
        output = tmp_path / "r.jsonl"
        outcome = run(RunConfig(url=server.url, output=output, concurrencies=[4], requests=8, warmup=0,
                                max_tokens=300))  # fmt: skip
        streams = [json.loads(line) for line in server.send_log.read_text().splitlines()]
    records = report.load(output)
    (level,) = [r for r in records if r["type"] == "level"]
    assert outcome.finished == 8 and level["requests"] == 8 and level["output_tokens"] == 8 * 300
    # The server's side: every token it sent, from the first request's arrival (its first token
    # minus the first-token delay) to the last token it handed to the socket.
    sent = sum(s["tokens"] for s in streams)
    window = max(s["sent"][-1] for s in streams) - (min(s["sent"][0] for s in streams) - 0.05)
    assert sent == level["output_tokens"]
    assert abs(report.aggregate_tok_s(level) / (sent / window) - 1) < 0.02
    (group,) = report.summarize(records)
    assert group.aggregate_tok_s == report.aggregate_tok_s(level)
    assert "aggregate tok/s" in report.render_summary([group])
    # Four streams at once: the aggregate is several times what one request decodes.
    assert group.aggregate_tok_s > 2 * group.stats["decode_tok_s"][1]


@pytest.mark.skipif(
    not (harness_env.get(harness_env.BASELINE_URL) and harness_env.get(harness_env.EAGLE3_URL)),
    reason="live A/B gate: set EAGLE3_TESTS_BASELINE_URL and EAGLE3_TESTS_EAGLE3_URL to running servers",
)
def test_live_eagle3_beats_baseline(run_cli):
    threshold = harness_env.get(harness_env.THRESHOLD, "1.0")
    result = run_cli(
        "bench", "compare", harness_env.get(harness_env.BASELINE_URL), harness_env.get(harness_env.EAGLE3_URL),
        "--threshold", threshold,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_compare_says_speculation_is_not_running_at_accept_length_one(tmp_path, run_cli):
    """Accept length 1.0: every draft token rejected (EAGLE with an EAGLE-3 draft, #21272). The gate fails
    however the speeds compare, and says so; a real accept length is reported as such."""
    base = write_results(tmp_path / "base.jsonl", "baseline", [92.0, 92.6, 93.0])
    for name, accept in (("stuck", 1.0), ("working", 2.9)):
        path = write_results(tmp_path / f"{name}.jsonl", "eagle3", [95.0, 96.1, 97.0])
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for r in records:
            if r["type"] == "request":
                r["spec_accept_length"] = accept
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = run_cli("bench", "compare", str(base), str(tmp_path / "stuck.jsonl"))
    assert result.returncode == 1, result.stdout
    assert "[FAIL] speculation: accept length 1.00 (median per request): speculation is not running" in result.stdout
    assert "[ OK ] speed-up:" in result.stdout
    result = run_cli("bench", "compare", str(base), str(tmp_path / "working.jsonl"))
    assert result.returncode == 0 and "[ OK ] speculation: accept length 2.90 (median per request)" in result.stdout


def test_a_live_server_whose_draft_is_never_accepted_fails_the_gate(run_cli, tmp_path):
    """The stand-in with a useless draft reports spec_accept_length of about 1.0 in every response's meta_info,
    as SGLang does when nothing is accepted; bench records it per request and compare fails on it."""
    with (
        fake_server(RATE=400) as baseline,
        fake_server("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "useless",
                    RATE=400, DRAFT_QUALITY=json.dumps({"useless": 0.0})) as eagle3,
    ):  # fmt: skip
        result = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", "bench", "compare", baseline.url, eagle3.url],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] speculation: accept length 1.00 (median per request): speculation is not running" in result.stdout
    recorded = [
        r for f in (tmp_path / "results").glob("eagle3*.jsonl") for r in report.load(f) if r["type"] == "request"
    ]
    assert recorded and all(1.0 <= r["spec_accept_length"] < report.NOT_RUNNING_BELOW for r in recorded)
