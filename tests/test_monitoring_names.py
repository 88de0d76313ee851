"""Every metric and label the alert rules and the dashboard name is one SGLang 0.5.9 (read
from its source), the router (smg 1.13.0, its real binary's /metrics) or an exporter of the
server's process state (node_exporter's systemd collector, kube-state-metrics: their own
definitions, support/monitoring_queries.py) exports."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from sglang_eagle3.bench import server_metrics
from sglang_eagle3.source.tree import locate
from support import metrics_catalog
from support.bench_fixtures import fake_server
from support.monitoring_queries import EXPORTER_SERIES, PROMETHEUS_SERIES, problems, recorded_series, substitute

MONITORING = REPO / "modules" / "monitoring"
RULE_FILES = [MONITORING / "sglang-eagle3-alerts.yml", MONITORING / "sglang-eagle3-thresholds.yml"]
DASHBOARD = json.loads((MONITORING / "sglang-eagle3-dashboard.json").read_text())


def rule_queries() -> list[tuple[str, str]]:
    return [(r.get("alert") or r["record"], r["expr"]) for path in RULE_FILES
            for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]  # fmt: skip


def panel_queries() -> list[tuple[str, str]]:
    return [(f"{p['title']} [{t['refId']}]", substitute(t["expr"])) for p in DASHBOARD["panels"] for t in p["targets"]]


QUERIES = rule_queries() + panel_queries()


@pytest.fixture(scope="session")
def sglang_catalog(pristine_tree) -> metrics_catalog.Catalog:
    return metrics_catalog.read(locate(pristine_tree))


@pytest.fixture(scope="session")
def router_catalog() -> metrics_catalog.Catalog:
    pytest.importorskip("smg", reason="needs the smg wheel (pip install 'sglang-eagle3[router]')")
    from support.monitoring_stack import get, router

    with fake_server() as server, tempfile.TemporaryDirectory() as tmp, router([server.url], Path(tmp)) as url:
        return metrics_catalog.from_exposition(get(url))


def known_series(*catalogs: metrics_catalog.Catalog) -> dict[str, frozenset[str]]:
    known = {**PROMETHEUS_SERIES, **EXPORTER_SERIES}
    for catalog in catalogs:
        known.update({name: catalog.labels_of(name) for name in catalog.series})
    return {**known, **recorded_series(RULE_FILES, known)}


def test_catalog_reads_the_metrics_the_rules_rely_on(sglang_catalog):
    accept = sglang_catalog.metrics["sglang:spec_accept_length"]
    assert accept.kind == "Gauge" and accept.source.startswith("srt/metrics/collector.py:")
    assert accept.labels == {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}
    itl = sglang_catalog.metrics["sglang:inter_token_latency_seconds"]
    assert itl.kind == "Histogram" and itl.labels == {"model_name"}
    assert set(itl.samples()) == {f"sglang:inter_token_latency_seconds_{s}" for s in ("bucket", "sum", "count")}
    assert sglang_catalog.metrics["sglang:generation_tokens_total"].samples() == {
        "sglang:generation_tokens_total": frozenset({"model_name"})
    }
    # A gauge without a multiprocess mode gets prometheus_client's pid label.
    assert "pid" in sglang_catalog.metrics["sglang:num_retracted_reqs"].labels
    assert len(sglang_catalog.metrics) >= 90


@pytest.mark.parametrize("name, query", QUERIES, ids=[name for name, _ in QUERIES])
def test_query_names_only_exported_metrics_and_labels(name, query, sglang_catalog, request):
    catalogs = [sglang_catalog]
    if "smg_" in query:
        catalogs.append(request.getfixturevalue("router_catalog"))
    assert problems(query, known_series(*catalogs)) == []


@pytest.mark.parametrize(
    "query, complaint",
    [
        (
            "sglang:spec_accept_len > 1",
            "'sglang:spec_accept_len' is not exported (did you mean 'sglang:spec_accept_length'",
        ),
        ('sglang:spec_accept_length{worker="a"}', "has no label 'worker'"),
        ("rate(sglang:num_running_reqs_total[5m])", "'sglang:num_running_reqs_total' is not exported"),  # gauge
        ("rate(sglang:generation_tokens[5m])", "'sglang:generation_tokens' is not exported"),  # counter: _total
        ("sglang:time_to_first_token_seconds", "'sglang:time_to_first_token_seconds' is not exported"),  # histogram
        ("rate(sglang:time_to_first_token_seconds_total[1m])", "is not exported"),
        ("sum by (tp_rank) (rate(sglang:generation_tokens_total[1m]))", "by (tp_rank)"),
        ("sglang:token_usage > on (worker) sglang:num_queue_reqs", "on (worker)"),
        ('{__name__="sglang:spec_acceptance"}', "'sglang:spec_acceptance' is not exported"),
    ],
)
def test_a_wrong_name_or_label_is_reported(query, complaint, sglang_catalog):
    found = problems(query, known_series(sglang_catalog))
    assert any(complaint in p for p in found), found


@pytest.mark.parametrize(
    "query",
    [
        'histogram_quantile(0.9, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket{job="x"}[5m])))',
        "sum by (instance) (sglang:num_queue_reqs) > on (instance) sum by (instance) (sglang:num_running_reqs)",
        'sglang:num_retracted_reqs{pid="1"}',
    ],
)
def test_valid_queries_pass(query, sglang_catalog):
    assert problems(query, known_series(sglang_catalog)) == []


def test_stand_in_exports_sglang_names_types_and_labels(sglang_catalog):
    """The stand-in server's /metrics is a subset of 0.5.9's catalog, so tests against it mean something."""
    with fake_server("--speculative-algorithm", "EAGLE3", RATE="400") as server:
        body = json.dumps({"text": "one two", "sampling_params": {"max_new_tokens": 20}, "stream": True}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/generate", body), timeout=10).read()
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
            exported = metrics_catalog.from_exposition(response.read().decode())
    assert {"sglang:spec_accept_length", "sglang:inter_token_latency_seconds", "sglang:num_queue_reqs"} <= set(
        exported.metrics
    )
    for name, metric in exported.metrics.items():
        real = sglang_catalog.metrics.get(name)
        assert real is not None, f"the stand-in exports {name}, which SGLang 0.5.9 does not"
        assert metric.kind == real.kind, name
        assert metric.labels <= real.labels, f"{name}: {sorted(metric.labels - real.labels)} not in 0.5.9"


def test_stand_in_sets_its_gauges_from_whole_decode_log_windows():
    """As SGLang's scheduler, the stand-in sets its gauges when it logs decode stats, every
    --decode-log-interval steps: a run's short last chunk never makes up a window of its own."""
    with fake_server("--speculative-algorithm", "EAGLE3", "--decode-log-interval", "5", RATE="400") as server:
        burst = json.loads(urllib.request.urlopen(f"{server.url}/server_info", timeout=5).read())["fake_burst"]
        # 20 tokens: 1, then chunks of `burst` and a shorter last one; the log after 5 chunks is the last.
        body = json.dumps({"text": "one two", "sampling_params": {"max_new_tokens": 20}, "stream": True}).encode()
        urllib.request.urlopen(urllib.request.Request(f"{server.url}/generate", body), timeout=10).read()
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
            page = server_metrics.parse(response.read().decode())
    assert 19 % burst and (19 // burst) > 5, burst  # the request has a short last chunk after the logged window
    assert page["sglang:spec_accept_length"] == burst
    assert page["sglang:generation_tokens_total"] == 20
