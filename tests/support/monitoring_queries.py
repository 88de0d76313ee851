"""Check PromQL against the metrics a target exports: every metric name, label matcher,
`by (...)` and `on (...)` label must exist. Parsed with promql-parser (Python bindings of
GreptimeDB's Rust PromQL parser), so expressions are read as Prometheus reads them.
"""

from __future__ import annotations

import difflib
import re

import promql_parser as pp
import yaml

# Dashboard variables, replaced the way Grafana does before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "${job_eagle3}": "sglang-eagle3", "${job_baseline}": "sglang-baseline"}
# Prometheus' own, one per target; a target the Prometheus Operator found from a ServiceMonitor also carries
# namespace, service, pod, container and endpoint (prometheus-operator pkg/prometheus/promcfg.go, its relabelings).
PROMETHEUS_SERIES = {"up": frozenset({"job", "instance", "namespace", "service", "pod", "container", "endpoint"})}
# What the exporters of the server's process state export (docs/monitoring.md, "Loading or down"), as their own
# definitions name them; Prometheus adds job and instance:
# - node_exporter's systemd collector: prometheus/node_exporter collector/systemd_linux.go (commit 019f5ffa),
#   unit_state {name, state, type}; service_restart_total {name} with --collector.systemd.enable-restarts-metrics;
# - kube-state-metrics: kubernetes/kube-state-metrics docs/metrics/workload/pod-metrics.md (commit 04ee634c).
_SCRAPED = frozenset({"job", "instance"})
_CONTAINER = _SCRAPED | {"namespace", "pod", "uid", "container"}
EXPORTER_SERIES = {
    "node_systemd_unit_state": _SCRAPED | {"name", "state", "type"},
    "node_systemd_service_restart_total": _SCRAPED | {"name"},
    "kube_pod_status_phase": _SCRAPED | {"namespace", "pod", "uid", "phase"},
    "kube_pod_container_status_running": _CONTAINER,
    "kube_pod_container_status_ready": _CONTAINER,
    "kube_pod_container_status_restarts_total": _CONTAINER,
    "kube_pod_container_status_waiting_reason": _CONTAINER | {"reason"},
}


def substitute(query: str, variables: dict[str, str] = GRAFANA_VARIABLES) -> str:
    for name, value in variables.items():
        query = query.replace(name, value)
    left = re.findall(r"\$\{?\w+", query)
    assert not left, f"unknown dashboard variable {left} in {query}"
    return query


def _selector_name(vs) -> str | None:
    if vs.name:
        return vs.name
    return next((m.value for m in vs.matchers.matchers if m.name == "__name__" and m.op == pp.MatchOp.Equal), None)


def problems(query: str, known: dict[str, frozenset[str]]) -> list[str]:
    """What in ``query`` names a series or label that ``known`` (name -> label names) lacks."""
    return analyse(query, known)[1]


def analyse(query: str, known: dict[str, frozenset[str]]) -> tuple[frozenset[str], list[str]]:
    """(the label names of ``query``'s result, what in it names a series or label that ``known`` lacks)."""
    found: list[str] = []

    def labels(node) -> frozenset[str]:
        """Label names the series of ``node`` carry, checking the node on the way."""
        if isinstance(node, pp.VectorSelector):
            name = _selector_name(node)
            if name not in known:
                hint = difflib.get_close_matches(name or "", known, n=1)
                found.append(f"{name!r} is not exported" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
                return frozenset()
            for matcher in node.matchers.matchers:
                if matcher.name != "__name__" and matcher.name not in known[name]:
                    found.append(f"{name} has no label {matcher.name!r} (it has {sorted(known[name])})")
            return known[name]
        if isinstance(node, pp.MatrixSelector):
            return labels(node.vector_selector)
        if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
            return labels(node.expr)
        if isinstance(node, pp.Call):
            inner = frozenset().union(*(labels(a) for a in node.args))
            if node.func.name in ("label_replace", "label_join"):
                inner |= {node.args[1].val}
            if node.func.name == "histogram_quantile":
                inner -= {"le"}
            return inner
        if isinstance(node, pp.AggregateExpr):
            inner = labels(node.expr)
            if node.param is not None:
                labels(node.param)
            if node.modifier is None:
                return frozenset()
            named = frozenset(node.modifier.labels)
            if node.modifier.type == pp.AggModifierType.By:
                for label in named - inner:
                    found.append(f"by ({label}): no series under it has that label")
                return named
            return inner - named
        if isinstance(node, pp.BinaryExpr):
            lhs, rhs = labels(node.lhs), labels(node.rhs)
            matching = node.modifier.matching if node.modifier else None
            if matching is not None and matching.type == pp.LabelModifierType.Include:
                for label in matching.labels:
                    for side, side_labels in (("left", lhs), ("right", rhs)):
                        if side_labels and label not in side_labels:
                            found.append(f"on ({label}): the {side} side has no such label")
            return lhs | rhs
        return frozenset()  # number and string literals

    return labels(pp.parse(query)), found


def recorded_series(rule_files, known: dict[str, frozenset[str]] | None = None) -> dict[str, frozenset[str]]:
    """Series that recording rules in these files create, with the labels their expressions leave (read against
    ``known``; without it, none)."""
    names: dict[str, frozenset[str]] = {}
    for path in rule_files:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    names[rule["record"]] = analyse(rule["expr"], {**known, **names})[0] if known else frozenset()
    return names
