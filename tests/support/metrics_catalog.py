"""The Prometheus metrics an SGLang install exports, read from its source (no import).

Alert rules and dashboards name metrics and labels; a name SGLang does not export makes
a rule that never fires and a panel that stays empty, silently. This module reads every
``prometheus_client`` metric SGLang constructs (``Counter``/``Gauge``/``Histogram``/
``Summary`` and SGLang's own ``GaugeHistogram``) with its name, type and label names,
and knows which sample names each exports (``_total``, ``_bucket``/``_sum``/``_count``),
so a query can be checked against the install it will run on.

Labels given as ``labels.keys()`` come from the ``labels`` dict the collector class is
constructed with; that dict is read where SGLang builds it (``{"model_name": ...}`` plus
``labels["dp_rank"] = ...``). Labels users add at run time (``--extra-metric-labels``,
``--tokenizer-metrics-allowed-custom-labels``) cannot be known from the source and are
not listed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle3.source.index import SourceIndex
from sglang_eagle3.source.tree import SGLangTree

KINDS = ("Counter", "Gauge", "Histogram", "Summary")
# Labels Prometheus attaches to every scraped series (target labels).
TARGET_LABELS = frozenset({"job", "instance"})
# prometheus_client's multiprocess collector adds a "pid" label to gauges in these modes.
PID_GAUGE_MODES = {"all", "liveall"}


@dataclass(frozen=True)
class Metric:
    name: str  # as constructed, e.g. "sglang:num_requests_total"
    kind: str  # Counter, Gauge, Histogram or Summary
    labels: frozenset[str]  # label names on its samples (without le / quantile)
    source: str  # where it is constructed, e.g. "srt/metrics/collector.py:1173"

    def samples(self) -> dict[str, frozenset[str]]:
        """Sample names it exports, each with its label names.

        SGLang serves /metrics through prometheus_client's multiprocess collector, which
        exports no ``_created`` samples.
        """
        if self.kind == "Counter":
            return {self.name.removesuffix("_total") + "_total": self.labels}
        if self.kind == "Histogram":
            return {self.name + "_bucket": self.labels | {"le"}, self.name + "_sum": self.labels,
                    self.name + "_count": self.labels}  # fmt: skip
        if self.kind == "Summary":
            return {self.name + "_sum": self.labels, self.name + "_count": self.labels}
        return {self.name: self.labels}


class Catalog:
    """Metrics by name, and the sample names they export."""

    def __init__(self, metrics: list[Metric]):
        self.metrics = {m.name: m for m in metrics}
        self.series: dict[str, tuple[Metric, frozenset[str]]] = {}
        for metric in metrics:
            for sample, labels in metric.samples().items():
                self.series[sample] = (metric, labels)

    def __contains__(self, sample: str) -> bool:
        return sample in self.series

    def labels_of(self, sample: str) -> frozenset[str]:
        """Label names a scraped sample carries: its own plus Prometheus' target labels."""
        return self.series[sample][1] | TARGET_LABELS


# -- reading SGLang's source ------------------------------------------------------------


def _string(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _label_names(node: ast.expr | None, base: frozenset[str]) -> frozenset[str] | None:
    """Label names of a ``labelnames=`` expression; ``labels.keys()`` stands for ``base``."""
    if node is None:
        return frozenset()
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        names: set[str] = set()
        for element in node.elts:
            inner = element.value if isinstance(element, ast.Starred) else element
            value = _string(inner)
            part = frozenset({value}) if value is not None else _label_names(inner, base)
            if part is None:
                return None
            names |= part
        return frozenset(names)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "keys":  # labels.keys()
            return base
        if isinstance(func, ast.Name) and func.id in ("list", "tuple", "set") and len(node.args) == 1:
            return _label_names(node.args[0], base)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _label_names(node.left, base), _label_names(node.right, base)
        return None if left is None or right is None else left | right
    return None


def _labels_built_for(index: SourceIndex, class_name: str) -> frozenset[str]:
    """Keys of the ``labels`` dict passed where ``class_name(labels=...)`` is constructed."""
    keys: set[str] = set()
    needle = f"{class_name}("
    for path in sorted(index.tree.srt.rglob("*.py")):
        if needle not in path.read_text():
            continue
        for func in ast.walk(index.module(path)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                     and n.func.id == class_name]  # fmt: skip
            for call in calls:
                given = _keyword(call, "labels")
                if not isinstance(given, ast.Name):
                    continue
                keys |= _dict_keys_assigned(func, given.id)
    return frozenset(keys)


def _dict_keys_assigned(func: ast.AST, variable: str) -> set[str]:
    """Constant keys of ``variable = {...}`` and ``variable["key"] = ...`` inside ``func``."""
    keys: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == variable and isinstance(node.value, ast.Dict):
                keys |= {k for k in map(_string, node.value.keys) if k is not None}
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                    and target.value.id == variable and _string(target.slice) is not None):  # fmt: skip
                keys.add(_string(target.slice))
    return keys


def _prometheus_names(module: ast.Module) -> dict[str, str]:
    """Local name -> prometheus_client class, for every ``from prometheus_client import ...`` in a file."""
    names = {}
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module == "prometheus_client":
            for alias in node.names:
                if alias.name in KINDS:
                    names[alias.asname or alias.name] = alias.name
    return names


def _enclosing_classes(module: ast.Module) -> dict[ast.Call, ast.ClassDef | None]:
    owners: dict[ast.Call, ast.ClassDef | None] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            owners.setdefault(node, None)
        if isinstance(node, ast.ClassDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    owners[inner] = node
    return owners


def read(tree: SGLangTree) -> Catalog:
    """Every metric SGLang constructs, read from the source of ``tree``."""
    index = SourceIndex(tree)
    metrics: list[Metric] = []
    base_labels: dict[str, frozenset[str]] = {}
    for path in sorted(tree.srt.rglob("*.py")):
        text = path.read_text()
        if "prometheus_client" not in text and "GaugeHistogram(" not in text:
            continue
        module = index.module(path)
        kinds = _prometheus_names(module)
        for call, owner in _enclosing_classes(module).items():
            if not isinstance(call.func, ast.Name):
                continue
            # SGLang's GaugeHistogram is a Gauge with "gt"/"le" bucket labels added.
            kind = "GaugeHistogram" if call.func.id == "GaugeHistogram" else kinds.get(call.func.id)
            if kind is None or (kind == "GaugeHistogram" and path.name == "gauge_histogram.py"):
                continue
            name = _string(_keyword(call, "name")) or (_string(call.args[0]) if call.args else None)
            if name is None:
                continue
            if owner is not None and owner.name not in base_labels:
                base_labels[owner.name] = _labels_built_for(index, owner.name)
            base = base_labels.get(owner.name, frozenset()) if owner is not None else frozenset()
            labels = _label_names(_keyword(call, "labelnames"), base)
            if labels is None:
                raise ValueError(f"{index.rel(path)}:{call.lineno}: cannot read the label names of {name}")
            if kind == "GaugeHistogram":
                kind, labels = "Gauge", labels | {"gt", "le"}
            mode = _string(_keyword(call, "multiprocess_mode")) or "all"
            if kind == "Gauge" and call.func.id != "GaugeHistogram" and mode in PID_GAUGE_MODES:
                labels = labels | {"pid"}
            metrics.append(Metric(name, kind, labels, f"{index.rel(path)}:{call.lineno}"))
    return Catalog(metrics)


def from_exposition(text: str) -> Catalog:
    """The metrics in a /metrics page (e.g. of the router binary, smg), parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    kinds = {"counter": "Counter", "gauge": "Gauge", "histogram": "Histogram", "summary": "Summary"}
    metrics = []
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels} - {"le", "quantile"}
        name = family.name + "_total" if family.type == "counter" else family.name
        metrics.append(Metric(name, kinds.get(family.type, "Gauge"), frozenset(labels), "exposition"))
    return Catalog(metrics)


def render(catalog: Catalog) -> str:
    """A table of the catalog, one metric a line."""
    lines = []
    for metric in sorted(catalog.metrics.values(), key=lambda m: m.name):
        lines.append(f"{metric.name:<55} {metric.kind:<10} {','.join(sorted(metric.labels)):<60} {metric.source}")
    return "\n".join(lines)


def load(target: str | Path | None = None) -> Catalog:
    from sglang_eagle3.source.tree import locate

    return read(locate(target))
