#!/usr/bin/env python3
"""How well does `sglang-eagle3 bench` measure? Prints the client's overhead and the largest
decode rate it measures within 1% of the truth on this machine, at concurrency 1 and 8.

The server is the stand-in SGLang server of the tests (tests/stand_ins/fake_sglang), on
loopback, streaming at a known rate in SGLang's /generate format. Each request decodes
for about one second. The truth is the rate the server actually sent, from its send log;
the "sent" column shows when the stand-in itself falls behind the rate asked of it.

    python benchmarks/bench_accuracy.py [--rates 500,1000,2000,4000,8000,16000] [--burst 1]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sglang_eagle3.bench import report  # noqa: E402
from sglang_eagle3.bench.runner import RunConfig, run  # noqa: E402
from support.bench_fixtures import fake_server  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(rate: float, concurrency: int, burst: int, tmp: Path) -> tuple[float, float, float]:
    """(worst relative error over the requests, client CPU microseconds per chunk, rate the server sent).

    The error is against what the server actually sent (its send log), so a server that
    falls behind its schedule at high rates is not counted as the client's error.
    """
    tokens = int(min(20000, max(64, rate)))
    output = tmp / f"r-{rate}-{concurrency}.jsonl"
    with fake_server(RATE=rate, BURST=burst, FIRST_DELAY=0.05) as server:
        before = cpu_seconds()
        run(RunConfig(url=server.url, output=output, concurrencies=[concurrency], requests=concurrency, warmup=0,
                      max_tokens=tokens))  # fmt: skip
        cpu = cpu_seconds() - before
        requests = [r for r in report.load(output) if r["type"] == "request"]
        if not all(r["ok"] for r in requests):
            return float("inf"), float("nan"), float("nan")
        sent = {r["prompt_id"]: server.delivered_rate(r["prompt_id"]) for r in requests}
    chunks = sum(len(r["chunk_tokens"]) for r in requests)
    worst = max(abs(r["decode_tok_s"] / sent[r["prompt_id"]] - 1) for r in requests)
    return worst, cpu / chunks * 1e6, statistics.median(sent.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="20,200,1000,2000,4000,8000,16000")
    parser.add_argument("--burst", type=int, default=1, help="tokens per streamed chunk")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'rate tok/s':>10} {'sent tok/s':>10} {'conc':>5} {'worst error':>12} {'client us/chunk':>16}")
        largest = {}
        for concurrency in (1, 8):
            for rate in rates:
                error, overhead, sent = measure(rate, concurrency, args.burst, Path(tmp))
                print(f"{rate:>10.0f} {sent:>10.0f} {concurrency:>5} {error * 100:>11.2f}% {overhead:>16.1f}",
                      flush=True)  # fmt: skip
                if error < 0.01:  # the largest rate actually streamed that was measured within 1%
                    largest[concurrency] = max(largest.get(concurrency, 0.0), sent)
        for concurrency in (1, 8):
            value = largest.get(concurrency)
            found = f"{value:.0f} tok/s per request ({value * concurrency:.0f} in all)" if value else "none"
            print(f"largest rate within 1% at concurrency {concurrency}: {found}")
        print("(where 'sent' is below the rate asked, the stand-in server, not the client, was the limit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
