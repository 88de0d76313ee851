"""services.sglang-eagle3.monitoring, evaluated with nixpkgs' lib (see tests/nix/module-harness.nix)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import REPO
from support.nix_harness import evaluate_module, needs_lib
from support.thresholds import render_thresholds

HOST = REPO / "modules" / "examples" / "8-gpu-host.nix"
# nixpkgs' Grafana module has no default secret key any more (2026): every host sets one.
GRAFANA_SECRET = 'services.grafana.settings.security.secret_key = "$__file{/var/lib/grafana/secret_key}";'


def monitoring(extra: str = "", prometheus: bool = True, grafana: bool = True) -> dict:
    config = (f"({{ lib, ... }}: {{ imports = [ {HOST} ]; services.prometheus.enable = {str(prometheus).lower()}; "
              f"services.grafana.enable = {str(grafana).lower()}; {GRAFANA_SECRET} {extra} }})")  # fmt: skip
    return evaluate_module(config)["monitoring"]


@needs_lib
def test_prometheus_scrapes_the_server_and_its_health_and_loads_the_rules(tmp_path):
    out = monitoring('services.sglang-eagle3.monitoring.baselineTargets = [ "gpu-b:30001" ];'
                     "services.sglang-eagle3.monitoring.thresholds.draftAcceptLength = 3.0;")  # fmt: skip
    jobs = {j["job_name"]: j for j in out["scrapeConfigs"]}
    # no router on this host
    assert set(jobs) == {"sglang-eagle3", "sglang-eagle3-health", "sglang-eagle3-node", "sglang-baseline"}
    # settings.host is 0.0.0.0 on this host: scraped on loopback, at settings.port
    assert jobs["sglang-eagle3"]["static_configs"] == [{"targets": ["127.0.0.1:30000"], "labels": {}}]
    assert jobs["sglang-eagle3-health"]["metrics_path"] == "/health_generate"
    assert jobs["sglang-eagle3-health"]["fallback_scrape_protocol"] == "PrometheusText0.0.4"
    assert jobs["sglang-baseline"]["static_configs"] == [{"targets": ["gpu-b:30001"], "labels": {}}]
    alerts, thresholds = out["ruleFiles"]
    assert alerts == str(REPO / "modules" / "monitoring" / "sglang-eagle3-alerts.yml")
    rendered = json.loads(thresholds["text"])
    assert rendered == render_thresholds(draftAcceptLength=3.0)
    assert rendered["groups"][0]["rules"][0] == {
        "record": "sglang_eagle3:accept_length_min",
        "expr": "vector(2.4000000000000004)",
    }
    if shutil.which("promtool"):  # what nixpkgs runs on rule files when it builds the configuration
        path = tmp_path / "thresholds.yml"
        path.write_text(thresholds["text"])
        check = subprocess.run(["promtool", "check", "rules", alerts, str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    assert out["grafana"] == {
        "enable": True,
        "providers": [{"name": "sglang-eagle3", "type": "file",  # nixpkgs' dashboardConfig default type
                       "options": {"path": str(REPO / "modules" / "monitoring" / "sglang-eagle3-dashboard.json")}}],
    }  # fmt: skip


@needs_lib
def test_nothing_is_added_without_prometheus_and_grafana_or_when_turned_off():
    out = monitoring(prometheus=False, grafana=False)
    assert out["scrapeConfigs"] == [] and out["ruleFiles"] == [] and out["grafana"]["providers"] == []
    off = monitoring("services.sglang-eagle3.monitoring.enable = false;")
    assert off["scrapeConfigs"] == [] and off["grafana"]["providers"] == []


@needs_lib
@pytest.mark.parametrize("router_on, expected", [(True, ["127.0.0.1:29100"]), (False, None)])
def test_the_router_is_scraped_when_its_module_is_enabled(router_on, expected):
    # The router's own module (modules/sglang-router.nix, imported by the server's module).
    config = (f"({{ lib, ... }}: {{ imports = [ {HOST} ]; config = {{ services.prometheus.enable = true; "
              f"services.sglang-router.enable = {str(router_on).lower()}; "
              'services.sglang-router.workers = [ "http://10.0.0.11:30000" ]; '
              "services.sglang-router.metrics.port = 29100; }; })")  # fmt: skip
    jobs = {j["job_name"]: j for j in evaluate_module(config)["monitoring"]["scrapeConfigs"]}
    assert (jobs["sglang-router"]["static_configs"][0]["targets"] if "sglang-router" in jobs else None) == expected


@needs_lib
def test_the_server_units_state_is_scraped_with_the_servers_instance():
    """What tells a load from an outage (docs/monitoring.md, "Loading or down"): node_exporter's systemd collector with
    restart counts, scraped as job sglang-eagle3-node with the server's instance, only the server unit's series."""
    host = evaluate_module(f"({{ lib, ... }}: {{ imports = [ {HOST} ]; services.prometheus.enable = true; }})")
    jobs = {j["job_name"]: j for j in host["monitoring"]["scrapeConfigs"]}
    node = jobs["sglang-eagle3-node"]
    assert node["static_configs"] == [{"targets": ["127.0.0.1:9100"], "labels": {"instance": "127.0.0.1:30000"}}]
    assert jobs["sglang-eagle3"]["static_configs"][0]["targets"] == ["127.0.0.1:30000"]
    kept = {(r["source_labels"][0], r["regex"]) for r in node["metric_relabel_configs"] if r["action"] == "keep"}
    assert kept == {("__name__", "node_systemd_unit_state|node_systemd_service_restart_total"),
                    ("name", "sglang-eagle3\\.service")}  # fmt: skip
    exporter = host["services"]["prometheus-node-exporter"]["serviceConfig"]
    assert "--collector.systemd " in exporter["ExecStart"] and exporter["ExecStart"].endswith(
        "--collector.systemd.enable-restarts-metrics"
    )
    assert "AF_UNIX" in exporter["RestrictAddressFamilies"]  # the collector reads systemd over D-Bus
    off = evaluate_module(f"({{ lib, ... }}: {{ imports = [ {HOST} ]; services.prometheus.enable = true; "
                          "services.sglang-eagle3.monitoring.processState = false; })")  # fmt: skip
    assert "sglang-eagle3-node" not in {j["job_name"] for j in off["monitoring"]["scrapeConfigs"]}
    assert "prometheus-node-exporter" not in off["services"]
