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


# The CRDs of given releases (kubernetes/generate.py MINIMUM_VERSIONS: the oldest release the manifests need and the
# one before it), taken from each project's git tags, staged under DIRECTORY/releases/<owner>+<name>/<tag>/ by
#   python3 tests/support/k8s_crds.py --stage MIRRORS OWNER/NAME TAG...
# (MIRRORS holds OWNER+NAME/repo git directories, as ../shared/k8s/stage-crds.sh reads them).
RELEASE_FILES = {
    "kubernetes-sigs/lws": ["config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"],
    "prometheus-operator/prometheus-operator": [
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ],
}


def release_directory(repo: str, tag: str) -> Path:
    return DIRECTORY / "releases" / repo.replace("/", "+") / tag


def how_to_stage_release(repo: str, *tags: str) -> str:
    """The one command that stages every release of ``repo`` named."""
    return (
        f"python3 tests/support/k8s_crds.py --stage MIRRORS {repo} {' '.join(tags)} "
        f"(MIRRORS: {HOW_TO_STAGE.split(', then')[0]})"
    )


def stage_release(mirrors: Path, repo: str, tag: str) -> Path:
    """Write the CRDs of ``repo`` at ``tag`` from its git mirror, with SOURCES naming the commit and paths."""
    import subprocess

    git = mirrors / repo.replace("/", "+") / "repo"
    if not git.is_dir():
        raise SystemExit(f"k8s_crds: no mirror of {repo} in {mirrors} (fetch github:{repo})")
    commit = subprocess.run(["git", "--git-dir", str(git), "rev-parse", f"{tag}^{{commit}}"],
                            capture_output=True, text=True)  # fmt: skip
    if commit.returncode != 0:
        raise SystemExit(f"k8s_crds: {repo} has no tag {tag}: {commit.stderr.strip()}")
    dest = release_directory(repo, tag)
    dest.mkdir(parents=True, exist_ok=True)
    sources = []
    for path in RELEASE_FILES[repo]:
        text = subprocess.run(["git", "--git-dir", str(git), "show", f"{tag}:{path}"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        (dest / Path(path).name).write_text(text)
        sources.append(f"{Path(path).name} {repo} {tag} {commit.stdout.strip()} {path}\n")
    (dest / "SOURCES").write_text("".join(sources))
    return dest


def release_schemas(repo: str, tag: str) -> dict[tuple[str, str], dict] | None:
    """(apiVersion, kind) -> strict JSON Schema of ``repo``'s CRDs at ``tag``, or None where they are not staged."""
    directory = release_directory(repo, tag)
    names = [Path(path).name for path in RELEASE_FILES[repo]]
    if not all((directory / name).is_file() for name in names):
        return None
    return _schemas(directory, names)


def unavailable() -> str | None:
    """Why the CRD validation cannot run here, or None."""
    missing = [name for name in FILES if not (DIRECTORY / name).is_file()]
    if missing:
        return f"the CRD schemas are not staged in {DIRECTORY} (missing {', '.join(missing)}): {HOW_TO_STAGE}"
    return None


def schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> its strict JSON Schema, for every served version of the staged CRDs."""
    return _schemas(DIRECTORY, FILES)


def _schemas(directory: Path, names) -> dict[tuple[str, str], dict]:
    import yaml  # here: .ci/run runs this file with the system's Python, before the test environment exists

    found = {}
    for name in names:
        crd = yaml.safe_load((directory / name).read_text())
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
    if sys.argv[1:2] == ["--stage"]:
        if len(sys.argv) < 5 or sys.argv[3] not in RELEASE_FILES:
            sys.exit(f"usage: k8s_crds.py --stage MIRRORS {{{','.join(RELEASE_FILES)}}} TAG...")
        for tag in sys.argv[4:]:
            print(f"staged {stage_release(Path(sys.argv[2]), sys.argv[3], tag)}")
        sys.exit(0)
    # .ci/run asks whether the schemas are staged: exit 0, or print why not and exit 1.
    why = unavailable()
    if why:
        print(f"NOTE: {why}")
    sys.exit(1 if why else 0)
