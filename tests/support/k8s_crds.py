"""The CustomResourceDefinition schemas the Kubernetes tests validate LeaderWorkerSet, ServiceMonitor and
PrometheusRule objects against: third-party files, staged on the machine that runs the tests by
../shared/k8s/stage-crds.sh (never committed), in $EAGLE3_TESTS_K8S_CRDS (or its former name
$SGLANG_EAGLE3_K8S_CRDS, which stage-crds.sh reads) or ~/.cache/sglang-eagle3/k8s-crds.

Each served version's openAPIV3Schema becomes a JSON Schema for check-jsonschema, made as strict as the API
server's field validation (`kubectl apply --validate=strict`): an object schema with properties accepts no
other field unless it says x-kubernetes-preserve-unknown-fields.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from support import harness_env
except ImportError:  # run as a script by .ci/run: tests/support is sys.path[0]
    import harness_env

DIRECTORY = Path(harness_env.get(harness_env.K8S_CRDS) or Path.home() / ".cache" / "sglang-eagle3" / "k8s-crds")
FILES = (
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
# .ci/run sets this where they are staged: there, a missing schema is a failure, not a skip.
REQUIRED = harness_env.get(harness_env.REQUIRE_K8S_CRDS) == "1"
HOW_TO_STAGE = (
    "fetch the mirrors of kubernetes-sigs/lws and prometheus-operator/prometheus-operator, then run "
    "../shared/k8s/stage-crds.sh MIRRORS (../shared/k8s/README.md)"
)


def unavailable() -> str | None:
    """Why the CRD validation cannot run here, or None."""
    missing = [name for name in FILES if not (DIRECTORY / name).is_file()]
    if missing:
        return f"the CRD schemas are not staged in {DIRECTORY} (missing {', '.join(missing)}): {HOW_TO_STAGE}"
    return None


def schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> its strict JSON Schema, for every served version of the staged CRDs."""
    import yaml  # here: .ci/run runs this file with the system's Python, before the test environment exists

    found = {}
    for name in FILES:
        crd = yaml.safe_load((DIRECTORY / name).read_text())
        for version in crd["spec"]["versions"]:
            if version.get("served", True):
                key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                found[key] = strict(version["schema"]["openAPIV3Schema"])
    return found


def strict(schema):
    """No unknown fields where the API server would warn of them; Go's leading inline flags (``^(?i)``, RE2)
    moved to where Python's re accepts them (check-jsonschema runs with --regex-variant python)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    if isinstance(schema, str) and schema.startswith("^(?i)"):
        return "(?i)^" + schema[len("^(?i)") :]
    return schema


if __name__ == "__main__":
    # .ci/run asks whether the schemas are staged: exit 0, or print why not and exit 1.
    why = unavailable()
    if why:
        print(f"NOTE: {why}")
    sys.exit(1 if why else 0)
