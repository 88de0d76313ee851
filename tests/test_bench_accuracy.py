"""How accurately `bench` measures: the client against what the stand-in server actually sent.

Marked `timing` and left out of the functional suite: these are wall-clock measurements.
Run them with `tests/run -m timing`. The truth is the server's own send log (the time it
handed each chunk to the socket), not the rate it was asked for: the stand-in schedules
chunks at absolute times, so on a busy machine a late wake-up delays a chunk and the next
ones catch up, and the delivered rate may be above or below the nominal one. Only the
client is under test, so there is no bound on how far the server strays from its schedule.

The client timestamps a chunk when it reads it; on a machine where busy neighbours hold
both cores, the client itself is woken late, by tens of milliseconds, which is 1% of a
short stream. So the client and the stand-in run at a higher priority (nice -10) where
that is allowed (root, as on CI): the neighbours still compete, but the scheduler no
longer decides the result. Without the permission the tests run as they are.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys

import pytest
from sglang_eagle3.bench import report
from sglang_eagle3.bench.runner import RunConfig, run
from support.bench_fixtures import fake_server

pytestmark = pytest.mark.timing


@pytest.fixture(autouse=True, scope="module")
def ahead_of_busy_neighbours():
    """nice -10 for this process and the stand-in servers it starts (they inherit it); restored after."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, before - 10)
    except PermissionError:
        yield
        return
    yield
    os.setpriority(os.PRIO_PROCESS, 0, before)


def tokens_for(rate: float) -> int:
    # 1.5 s of decoding per request (at least 32 tokens) at every rate, so that 1% is 15 ms,
    # more than a late wake-up of the client costs. (SGLang's native stream resends the whole
    # text in every chunk; at 2,000 tok/s that is 3,000 tokens, one stream only.)
    return int(max(32, rate * 1.5))


def outside(measured: float, slowest: float, fastest: float) -> float:
    """How far (relative) a measured rate lies outside what the server may have delivered; 0 inside."""
    return max(0.0, slowest / measured - 1, measured / fastest - 1)


# Rates well inside what the client handles on this machine (8 x 2,000 tok/s is its limit
# here, measured by benchmarks/bench_accuracy.py): these tests check the measurement, not
# the machine's capacity, and must hold while neighbours compete for the two cores.
CASES = [(c, burst, rate) for c, rates in ((1, (20, 200, 2000)), (8, (20, 200, 1000))) for rate in rates
         for burst in (1, 4)]  # fmt: skip


@pytest.mark.parametrize("concurrency, burst, rate", CASES)
def test_decode_rate_within_one_percent_of_what_was_sent(tmp_path, rate, burst, concurrency):
    # At least 3 measured requests: the benchmark reports medians, and so is it judged here. A
    # single request whose first chunk the client read late (its process not scheduled for
    # tens of milliseconds on a loaded machine) does not decide the median.
    requests = max(3, concurrency)
    with fake_server(RATE=rate, BURST=burst, FIRST_DELAY=0.2) as server:
        output = tmp_path / "r.jsonl"
        outcome = run(RunConfig(url=server.url, output=output, concurrencies=[concurrency], requests=requests,
                                warmup=1, max_tokens=tokens_for(rate)))  # fmt: skip
        records = [r for r in report.load(output) if r["type"] == "request"]
        sent = {r["prompt_id"]: server.delivered_rate_bounds(r["prompt_id"]) for r in records}
    assert outcome.finished == requests and outcome.failed == 0
    errors = [outside(r["decode_tok_s"], *sent[r["prompt_id"]]) for r in records]
    print(f"ACCURACY rate={rate} burst={burst} concurrency={concurrency} "
          f"median_error={statistics.median(errors):.5f} worst_error={max(errors):.5f}")  # fmt: skip
    assert statistics.median(errors) < 0.01, [(r["decode_tok_s"], *sent[r["prompt_id"]]) for r in records]
    for r in records:
        slowest, fastest = sent[r["prompt_id"]]
        assert math.isfinite(slowest) and 0 < slowest <= fastest
        assert r["ttft_s"] >= 0.2  # the server waits 0.2 s before the first token: never less
        assert r["output_tokens"] == tokens_for(rate)
        if burst > 1:
            assert max(r["chunk_tokens"]) == burst  # bursts were seen and counted exactly


def test_openai_api_within_one_percent(tmp_path):
    with fake_server(RATE=300, BURST=3) as server:
        output = tmp_path / "r.jsonl"
        run(RunConfig(url=server.url, output=output, api="openai", requests=2, warmup=0, max_tokens=300))
        requests = [r for r in report.load(output) if r["type"] == "request"]
        sent = [server.delivered_rate(r["prompt_id"]) for r in requests]
    assert all(abs(r["decode_tok_s"] / t - 1) < 0.01 for r, t in zip(requests, sent, strict=True))


def test_compare_against_live_urls_within_one_percent(tmp_path):
    with (
        fake_server(RATE=400) as baseline,
        fake_server("--speculative-algorithm", "EAGLE3", RATE=400) as eagle3,
    ):
        result = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", "bench", "compare", baseline.url, eagle3.url],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
        sent = {}  # label -> median rate the server sent for the measured requests
        for records in map(report.load, sorted((tmp_path / "results").glob("*.jsonl"))):
            requests = [r for r in records if r["type"] == "request"]
            server = eagle3 if requests[0]["label"] == "eagle3" else baseline
            sent[requests[0]["label"]] = statistics.median(server.delivered_rate(r["prompt_id"]) for r in requests)
    measured = {k: float(v) for k, v in re.findall(r"^  (baseline|EAGLE-3)\s+([0-9.]+)", result.stdout, re.M)}
    assert abs(measured["baseline"] / sent["baseline"] - 1) < 0.01
    assert abs(measured["EAGLE-3"] / sent["eagle3"] - 1) < 0.01
