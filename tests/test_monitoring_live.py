"""A real Prometheus (Debian's package) on loopback scrapes stand-in SGLang servers (an
EAGLE-3 one, a baseline, one that never becomes ready) and the real router (smg), with
the shipped rules loaded; `sglang-eagle3 bench run` sends requests; every dashboard query
must then return data, and the data must be what the servers served."""

from __future__ import annotations

import json
import math
import sys
import urllib.parse

import pytest
from conftest import REPO
from sglang_eagle3.bench import report
from sglang_eagle3.bench.runner import RunConfig, run
from support.bench_fixtures import FAKE_SGLANG, fake_server, free_port
from support.monitoring_queries import substitute
from support.monitoring_stack import PROMETHEUS, get, process, prometheus, query, router, wait_for

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="needs prometheus (Debian: apt-get install prometheus)")
MONITORING = REPO / "modules" / "monitoring"
RULE_FILES = [MONITORING / "sglang-eagle3-alerts.yml", MONITORING / "sglang-eagle3-thresholds.yml"]
DASHBOARD = json.loads((MONITORING / "sglang-eagle3-dashboard.json").read_text())


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    pytest.importorskip("smg", reason="needs the smg wheel (pip install 'sglang-eagle3[router]')")
    tmp = tmp_path_factory.mktemp("monitoring")
    unready_port = free_port()
    unready = [sys.executable, "-m", "sglang.launch_server", "--port", str(unready_port),
               "--speculative-algorithm", "EAGLE3"]  # fmt: skip
    env_unready = {"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_NEVER_READY": "1"}
    # A second worker behind the router that is healthy at first, then dies.
    dying_port = free_port()
    dying = [sys.executable, "-m", "sglang.launch_server", "--port", str(dying_port)]
    env_dying = {"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_EXIT_AFTER": "10"}
    with (
        fake_server("--speculative-algorithm", "EAGLE3", RATE="150") as eagle3,
        fake_server(RATE="100") as baseline,
        process(unready, tmp / "unready.log", env=env_unready),
        process(dying, tmp / "dying.log", env=env_dying),
    ):
        unready_url, dying_url = f"http://127.0.0.1:{unready_port}", f"http://127.0.0.1:{dying_port}"
        wait_for(lambda: get(f"{unready_url}/model_info"), "the never-ready stand-in to listen")
        wait_for(lambda: get(f"{dying_url}/model_info"), "the dying stand-in to listen")
        with router([eagle3.url, dying_url], tmp) as router_metrics:
            servers = [hostport(eagle3.url), hostport(unready_url)]
            jobs = {"sglang-eagle3": ("/metrics", servers), "sglang-eagle3-health": ("/health_generate", servers),
                    "sglang-baseline": ("/metrics", [hostport(baseline.url)]),
                    "sglang-router": ("/metrics", [hostport(router_metrics)])}  # fmt: skip
            with prometheus(jobs, RULE_FILES, tmp) as api:
                # Counters must be seen at zero first, or Prometheus sees no increase to compute rates from.
                wait_for(lambda: query(api, "count(sglang:inter_token_latency_seconds_count) == 3"), "first scrapes")
                results, outputs = {}, {}
                for label, server in (("eagle3", eagle3), ("baseline", baseline)):
                    output = tmp / f"{label}.jsonl"
                    config = RunConfig(url=server.url, output=output, label=label, concurrencies=[1, 2],
                                       requests=4, warmup=0, max_tokens=96)  # fmt: skip
                    assert run(config).finished == 8
                    results[label], outputs[label] = report.load(output), output
                for job in ("sglang-eagle3", "sglang-baseline"):
                    wait_for(lambda job=job: query(api, f'sum(sglang:num_requests_total{{job="{job}"}}) == 8'),
                             f"Prometheus to scrape the 8 finished requests of {job}")  # fmt: skip
                wait_for(lambda: query(api, "sglang_eagle3:accept_length_min"), "the threshold rules")
                yield {"api": api, "results": results, "outputs": outputs, "eagle3": eagle3,
                       "unready": hostport(unready_url), "dying_url": dying_url}  # fmt: skip


PANEL_QUERIES = [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in DASHBOARD["panels"] for t in p["targets"]]


@pytest.mark.parametrize("name, expr", PANEL_QUERIES, ids=[n for n, _ in PANEL_QUERIES])
def test_every_panel_query_returns_data(name, expr, stack):
    result = query(stack["api"], substitute(expr))
    assert result, f"{name}: no data for {substitute(expr)}"
    # Idle instances give NaN (no tokens to divide), as Grafana shows gaps; the served ones give numbers.
    assert any(math.isfinite(float(r["value"][1])) for r in result), result


def panel_value(stack, title: str, ref: str = "A", **labels) -> float:
    panel = next(p for p in DASHBOARD["panels"] if p["title"] == title)
    expr = next(t["expr"] for t in panel["targets"] if t["refId"] == ref)
    result = [r for r in query(stack["api"], substitute(expr)) if labels.items() <= r["metric"].items()]
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def server_record(stack, label: str) -> dict:
    return next(r for r in stack["results"][label] if r["type"] == "server_metrics")


def test_panels_show_what_the_servers_served(stack):
    eagle3 = hostport(stack["eagle3"].url)
    burst = json.loads(get(f"{stack['eagle3'].url}/server_info"))["fake_burst"]
    # Accept length = tokens per verification step: the stand-in's burst (a stream's last chunk may be
    # shorter); accept rate = that over the 4 draft tokens.
    accept_length = panel_value(stack, "Accept length", instance=eagle3)
    assert burst - 1 < accept_length <= burst
    assert panel_value(stack, "Accept rate", instance=eagle3) == pytest.approx(accept_length / 4)
    # Decode tok/s per request as Prometheus computes it = the same counters bench read before and after.
    decode = panel_value(stack, "Decode tok/s per request", instance=eagle3)
    assert decode == pytest.approx(server_record(stack, "eagle3")["decode_tok_s_per_request"], rel=0.02)
    baseline = panel_value(stack, "EAGLE-3 against the baseline: decode tok/s per request", job="sglang-baseline")
    assert panel_value(stack, "EAGLE-3 speed-up over the baseline") == pytest.approx(decode / baseline, rel=0.02)
    assert panel_value(stack, "Decode tok/s per request", "B") == pytest.approx(0.9 * 92.6)  # the floor line


def test_bench_records_the_servers_acceptance_and_compare_prints_it(stack, run_cli):
    eagle3 = server_record(stack, "eagle3")
    assert eagle3["delta"]["sglang:num_requests_total"] == 8
    assert eagle3["delta"]["sglang:generation_tokens_total"] == 8 * 96
    burst = json.loads(get(f"{stack['eagle3'].url}/server_info"))["fake_burst"]
    assert burst - 1 < eagle3["spec_accept_length"] <= burst
    client = report.summarize(stack["results"]["eagle3"])[0].stats["decode_tok_s"][1]
    assert eagle3["decode_tok_s_per_request"] == pytest.approx(client, rel=0.15)  # server vs client view
    assert server_record(stack, "baseline")["spec_accept_length"] == 0  # SGLang reports 0 without speculation
    compared = run_cli("bench", "compare", str(stack["outputs"]["baseline"]), str(stack["outputs"]["eagle3"]))
    assert compared.returncode == 0, compared.stdout + compared.stderr
    lines = compared.stdout.splitlines()
    assert any(line.startswith("Acceptance") for line in lines), compared.stdout
    row = next(line.split() for line in lines if line.strip().startswith("EAGLE-3 ") and "(" not in line)
    assert float(row[2]) == pytest.approx(eagle3["spec_accept_length"], abs=0.005) and float(row[5]) == 8 * 96, row


def test_rules_evaluate_and_catch_the_server_that_is_not_ready(stack):
    api = stack["api"]
    rules = json.loads(get(f"{api}/rules"))["data"]["groups"]
    assert {g["name"] for g in rules} == {
        "sglang-eagle3-process",
        "sglang-eagle3",
        "sglang-router",
        "sglang-eagle3-thresholds",
    }
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    pending = wait_for(lambda: query(api, 'ALERTS{alertname="SGLangServerNotReady"}'), "SGLangServerNotReady")
    assert [a["metric"]["instance"] for a in pending] == [stack["unready"]]
    unhealthy = wait_for(lambda: query(api, 'ALERTS{alertname="SGLangRouterWorkerUnhealthy"}'),
                         "SGLangRouterWorkerUnhealthy")  # fmt: skip
    assert [a["metric"]["worker"] for a in unhealthy] == [stack["dying_url"]]
    assert not query(api, 'ALERTS{alertname=~"SGLangServerDown|EagleAcceptLengthLow|SGLangThresholdsMissing"}')
