"""The server's own acceptance counters (/metrics, with --enable-metrics) before and after a run.

A verdict of the A/B gate is easier to trust with the acceptance that explains it; the
server's view complements the per-request ``meta_info``: its accept length and rate
gauges (the last few decode steps) and, from counters, the tokens it generated and its
decode speed per request over exactly this run (SGLang's inter-token latency histogram
counts each decoded token and sums the time between tokens).
"""

from __future__ import annotations

import aiohttp

GAUGES = ("sglang:spec_accept_length", "sglang:spec_accept_rate")
COUNTERS = (
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:inter_token_latency_seconds_count",
    "sglang:inter_token_latency_seconds_sum",
)


def parse(text: str) -> dict[str, float]:
    """Wanted samples of a /metrics page, summed over their label sets (tensor-parallel ranks, models)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in GAUGES or sample.name in COUNTERS:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


async def snapshot(client: aiohttp.ClientSession) -> dict[str, float] | None:
    """The wanted samples now; None when the server has no /metrics (metrics off, or not SGLang)."""
    try:
        async with client.get("/metrics") as response:
            if response.status != 200:
                return None
            return parse(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


def record(label: str, before: dict[str, float] | None, after: dict[str, float] | None) -> dict:
    """A "server_metrics" results record: both snapshots and what changed during the run."""
    out: dict = {"type": "server_metrics", "label": label, "before": before, "after": after}
    if before is None or after is None:
        out["unavailable"] = "the server has no /metrics (start SGLang with --enable-metrics)"
        return out
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in COUNTERS}
    out["delta"] = delta
    out["spec_accept_length"] = after.get("sglang:spec_accept_length")
    out["spec_accept_rate"] = after.get("sglang:spec_accept_rate")
    decode_seconds = delta["sglang:inter_token_latency_seconds_sum"]
    out["decode_tok_s_per_request"] = (
        delta["sglang:inter_token_latency_seconds_count"] / decode_seconds if decode_seconds > 0 else None
    )
    return out
