"""/metrics of the stand-in server: SGLang 0.5.9's metric names, types and labels.

Only the metrics the alert rules and the dashboard use, exported with prometheus_client
(as SGLang does) and fed from what the stand-in actually serves: each streamed chunk is
a decode step, its tokens are "accepted" tokens, and the time between chunks is the
inter-token latency, accounted the way SGLang's TokenizerMetricsCollector does it.
Scheduler gauges are set every --decode-log-interval decode steps from what those steps
did, as SGLang's scheduler logs its decode stats (scheduler_output_processor_mixin.py:534,
scheduler_metrics_mixin.py log_decode_stats): no timer, so the last window of a run is a
whole one, never only its streams' short last chunks. tests/test_monitoring_*.py check
these names against the catalog read from SGLang's source, so they cannot drift from 0.5.9.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# SGLang serves /metrics through the multiprocess collector, which has no _created samples.
disable_created_metrics()

# SGLang's default buckets (srt/metrics/collector.py, TokenizerMetricsCollector)
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]  # fmt: skip
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800]


class Metrics:
    def __init__(self, model_name: str, num_draft_tokens: int | None, kv_pool_tokens: int, log_interval: int):
        self.registry = CollectorRegistry()
        self.log_interval = log_interval  # decode steps between two logs of the scheduler's stats
        self.num_draft_tokens = num_draft_tokens  # None without speculation
        self.kv_pool_tokens = kv_pool_tokens
        tokenizer = {"model_name": model_name}
        scheduler = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                     "moe_ep_rank": "0"}  # fmt: skip

        def make(kind, name, doc, labels, **kw):
            return kind(name, doc, labelnames=list(labels), registry=self.registry, **kw).labels(**labels)

        self.prompt_tokens = make(Counter, "sglang:prompt_tokens_total", "Prompt tokens.", tokenizer)
        self.generation_tokens = make(Counter, "sglang:generation_tokens_total", "Generated tokens.", tokenizer)
        self.requests = make(Counter, "sglang:num_requests_total", "Finished requests.", tokenizer)
        self.ttft = make(Histogram, "sglang:time_to_first_token_seconds", "TTFT.", tokenizer, buckets=TTFT_BUCKETS)
        self.itl = make(Histogram, "sglang:inter_token_latency_seconds", "ITL.", tokenizer, buckets=ITL_BUCKETS)
        self.e2e = make(Histogram, "sglang:e2e_request_latency_seconds", "E2E.", tokenizer, buckets=E2E_BUCKETS)
        gauge = {n: make(Gauge, f"sglang:{n}", n, scheduler, multiprocess_mode="mostrecent")
                 for n in ("num_running_reqs", "num_queue_reqs", "token_usage", "num_used_tokens", "gen_throughput",
                           "max_total_num_tokens", "spec_accept_length", "spec_accept_rate")}  # fmt: skip
        self.gauge = gauge
        gauge["max_total_num_tokens"].set(kv_pool_tokens)
        # What the scheduler accumulates between two logs of its decode stats.
        self.running: dict[int, int] = {}  # request id -> tokens held in the KV cache
        self.queued = 0
        self.interval_tokens = 0
        self.interval_steps = 0
        self.last_log = time.monotonic()

    # -- tokenizer side: per request ------------------------------------------------------

    def first_token(self, started: float, now: float) -> None:
        self.ttft.observe(now - started)

    def chunk(self, interval: float, tokens: int) -> None:
        """A chunk of ``tokens`` tokens ``interval`` seconds after the previous one (one decode step)."""
        # SGLang adds the interval to the sum once and counts each token in the bucket of interval / tokens.
        for _ in range(tokens):
            self.itl.observe(interval / tokens)
        self.interval_tokens += tokens
        self.interval_steps += 1
        if self.interval_steps >= self.log_interval:
            self.log_decode_stats()

    def finished(self, prompt_tokens: int, generated: int, started: float, now: float) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.generation_tokens.inc(generated)
        self.requests.inc()
        self.e2e.observe(now - started)

    # -- scheduler side: gauges set when the decode stats are logged --------------------------

    def log_decode_stats(self) -> None:
        now = time.monotonic()
        elapsed, self.last_log = now - self.last_log, now
        running, used, queued = len(self.running), sum(self.running.values()), self.queued
        self.gauge["num_running_reqs"].set(running)
        self.gauge["num_queue_reqs"].set(queued)
        self.gauge["num_used_tokens"].set(used)
        self.gauge["token_usage"].set(used / self.kv_pool_tokens)
        self.gauge["gen_throughput"].set(self.interval_tokens / elapsed)
        if self.num_draft_tokens:  # accept length = tokens per verify step; rate = that / draft tokens
            accept_length = self.interval_tokens / self.interval_steps
            self.gauge["spec_accept_length"].set(accept_length)
            self.gauge["spec_accept_rate"].set(accept_length / self.num_draft_tokens)
        self.interval_tokens = self.interval_steps = 0

    def page(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
