#!/usr/bin/env python3
"""What does the router add per request? Router vs direct, in one run, at concurrency 16.

Three stand-in SGLang servers (tests/stand_ins/fake_sglang) on loopback answer every
request in the same fixed time (first token after --first-delay, then --tokens at --rate).
The same requests are sent straight to the servers (the client spreads them round robin)
and through the real router (smg 1.13.0 via sglang-eagle3-router), in
alternating rounds so that a busy machine slows both alike. Printed: per-request latency
percentiles of each path and the difference, for non-streamed requests (end to end) and
streamed ones (time to first token), the latter over kept-alive connections (as HTTP client
libraries do) and over a new connection per request (like for like: the stand-ins close every
connection, so direct clients always pay a new connection).

Also printed: the router process's peak resident memory and the CPU it used over the run (what the
Kubernetes manifests request and limit for the router pod, docs/router.md).

    python benchmarks/router_overhead.py [--concurrency 16] [--requests 400] [--rounds 3] [--policy cache_aware]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import aiohttp  # noqa: E402
from support.router_fixtures import cluster  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def measure(urls: list[str], concurrency: int, requests: int, tokens: int, stream: bool,
                  keep_alive: bool = True) -> list[float]:  # fmt: skip
    """Latency in ms of each request (end to end, or to the first streamed chunk), `concurrency` in flight."""
    targets = itertools.cycle(urls)
    counter = iter(range(requests))
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency * 2, force_close=not keep_alive)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client():
            for i in counter:
                body = {"text": f"request {i}: " + "some shared context " * 20,
                        "sampling_params": {"max_new_tokens": tokens}, "stream": stream}  # fmt: skip
                start = time.perf_counter()
                async with session.post(f"{next(targets)}/generate", json=body) as response:
                    if stream:
                        await response.content.readline()  # the first event's first line
                        latencies.append((time.perf_counter() - start) * 1000)
                        await response.read()
                    else:
                        await response.read()
                        latencies.append((time.perf_counter() - start) * 1000)
                    assert response.status == 200, response.status

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=400, help="per path and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--rate", type=float, default=400, help="stand-in decode rate, tok/s per request")
    parser.add_argument("--first-delay", type=float, default=0.02, help="stand-in time to first token, s")
    parser.add_argument("--policy", default="cache_aware", choices=["cache_aware", "round_robin", "power_of_two"])
    args = parser.parse_args()

    env = {"RATE": str(args.rate), "FIRST_DELAY": str(args.first_delay)}
    router_args = ("--policy", args.policy, "--log-level", "warn")
    with tempfile.TemporaryDirectory() as tmp, cluster(Path(tmp), 3, *router_args, worker_env=env) as (router, workers):
        started = time.monotonic()
        direct_urls = [w.url for w in workers]
        print(f"3 stand-in servers ({args.tokens} tokens at {args.rate:g} tok/s after {args.first_delay * 1000:g} ms), "
              f"router policy {args.policy}, concurrency {args.concurrency}, "
              f"{args.rounds} x {args.requests} requests per path and mode")  # fmt: skip
        rows = []
        # The stand-ins close every connection (SGLang keeps them alive): the "new conn." rows, one
        # client connection per request on both paths, are the like-for-like cost of the extra hop.
        modes = [("end to end, non-streamed", False, True), ("end to end, new conn.", False, False),
                 ("first token, streamed", True, True), ("first token, new conn.", True, False)]  # fmt: skip
        for what, stream, keep_alive in modes:
            direct: list[float] = []
            routed: list[float] = []
            for urls in (direct_urls, [router.url]):  # warm-up
                asyncio.run(measure(urls, args.concurrency, args.concurrency * 2, args.tokens, stream, keep_alive))
            for _ in range(args.rounds):
                for urls, into in ((direct_urls, direct), ([router.url], routed)):
                    into += asyncio.run(measure(urls, args.concurrency, args.requests, args.tokens, stream, keep_alive))
            rows.append((what, direct, routed))
        peak_mib, cpu = usage(router.process.pid)
        wall = time.monotonic() - started
    print(f"\n{'latency (ms)':<26} {'direct p50':>10} {'router p50':>10} {'added p50':>10}   "
          f"{'direct p99':>10} {'router p99':>10} {'added p99':>10}")  # fmt: skip
    for what, direct, routed in rows:
        d50, r50 = statistics.median(direct), statistics.median(routed)
        d99, r99 = percentile(direct, 99), percentile(routed, 99)
        print(
            f"{what:<26} {d50:>10.2f} {r50:>10.2f} {r50 - d50:>+10.2f}   {d99:>10.2f} {r99:>10.2f} {r99 - d99:>+10.2f}"
        )
    print("\nadded = router minus direct, per request; the stand-ins' own time is the same on both paths.")
    print(f"router process: peak resident memory {peak_mib:.0f} MiB, CPU {cpu:.1f} s over {wall:.0f} s "
          f"({cpu / wall:.2f} cores on average)")  # fmt: skip
    return 0


def usage(pid: int) -> tuple[float, float]:
    """(peak resident memory in MiB, CPU seconds used) of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return peak_kib / 1024, (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


if __name__ == "__main__":
    sys.exit(main())
