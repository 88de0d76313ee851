"""The Kubernetes manifests (kubernetes/, written by kubernetes/generate.py), without a cluster:

- the committed files are what the generator writes from the definitions (settings, server-process.json,
  the model locks, the alert rules, hardening.json);
- every object validates against the Kubernetes API schemas (kubernetes-validate, strict: no unknown field),
  the LeaderWorkerSet, ServiceMonitor and PrometheusRule objects against their CRD schemas (check-jsonschema,
  as strict), where those are staged (tests/support/k8s_crds.py; else one NOTE line says they were not);
- they agree with the NixOS unit on argv, environment and probes: the module (tests/nix/module-harness.nix)
  is evaluated with the same choices, one rank at a time, and the router's unit too;
- the leader's and a worker's SGLang command lines, as the launcher renders them from the settings and the
  LeaderWorkerSet's variables, are parsed by each stack's own SGLang (0.5.9, 0.5.23);
- securityContext: every setting of modules/hardening.nix is mapped (kubernetes/hardening.json) and what the
  map expresses is in every pod and container; the API key only ever comes from a Secret volume.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from conftest import REPO
from sglang_eagle3.serving import credentials, launch_plan, settings
from support import harness_env, k8s_crds, nix_harness
from support.scripts import load_script

FOLDER = REPO / "kubernetes"
generate = load_script(FOLDER / "generate.py")

FILES = sorted(p for p in FOLDER.rglob("*.yaml") if p.name != "kustomization.yaml")
OBJECTS = [(path, doc) for path in FILES for doc in yaml.safe_load_all(path.read_text())]
CRD_KINDS = {"LeaderWorkerSet", "ServiceMonitor", "PrometheusRule"}
# The oldest Kubernetes LeaderWorkerSet's current releases support, and the newest kubernetes-validate knows.
VERSIONS = ["1.30.0", kubernetes_validate.utils.latest_version()]
# What a LeaderWorkerSet gives each pod of group 0 (its leader is <name>-0, behind its headless Service).
LWS_LEADER = f"{generate.NAME}-0.{generate.NAME}.default"


def objects(folder: str, kind: str) -> list[dict]:
    return [doc for path, doc in OBJECTS if path.parent.name == folder and doc["kind"] == kind]


def one(folder: str, kind: str) -> dict:
    (found,) = objects(folder, kind)
    return found


def pod_templates(folder: str) -> dict[str, dict]:
    """rank 0's pod template (the StatefulSet's, or the leader's), and a worker's for several nodes."""
    if folder == "one-node":
        return {"leader": one(folder, "StatefulSet")["spec"]["template"]}
    template = one(folder, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return {"leader": template["leaderTemplate"], "worker": template["workerTemplate"]}


def container(template: dict, name: str = "server") -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def env_of(c: dict) -> dict[str, str]:
    """The container's plain variables (not those the Downward API fills)."""
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def lws_values(rank: int) -> dict[str, str]:
    return {"LWS_LEADER_ADDRESS": LWS_LEADER, "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": str(rank)}


def expand(args: list[str], values: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of container args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: values.get(m.group(1), m.group(0)), a) for a in args]


def container_settings(folder: str, rank: int, tmp_path: Path) -> settings.ServerSettings:
    """What the launcher in that pod loads: the ConfigMap's file, the container's env and --set args."""
    configmap = one(folder, "ConfigMap") if folder != "base" else None
    path = tmp_path / f"{folder}-{rank}-settings.json"
    path.write_text(configmap["data"]["settings.json"])
    template = pod_templates(folder)["leader" if rank == 0 else "worker"]
    args = expand(container(template)["args"], lws_values(rank))
    assert args[:2] == ["--config", generate.SETTINGS_FILE], args
    assignments = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    return settings.load(path, assignments, environ=env_of(container(template)))


# -- the files ---------------------------------------------------------------------------------------------


def test_the_committed_manifests_are_what_the_generator_writes(tmp_path):
    assert generate.main(["--check"]) == 0, "run: .venv/bin/python kubernetes/generate.py"
    # and the generator does write what --check compares against
    assert generate.main(["--output", str(tmp_path)]) == 0
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.yaml")}
    assert written == {str(p.relative_to(FOLDER)) for p in FOLDER.rglob("*.yaml")}


def test_each_kustomization_lists_its_folders_files_over_the_base():
    rdma = yaml.safe_load((FOLDER / "rdma" / "kustomization.yaml").read_text())
    assert rdma["kind"] == "Component" and rdma["resources"] == [] and len(rdma["patches"]) == 2
    for folder in ("base", "one-node", "multi-node", "monitoring"):
        kustomization = yaml.safe_load((FOLDER / folder / "kustomization.yaml").read_text())
        own = sorted(p.name for p in (FOLDER / folder).glob("*.yaml") if p.name != "kustomization.yaml")
        assert kustomization["resources"] == ([] if folder in ("base", "monitoring") else ["../base"]) + own
        assert kustomization["kind"] == ("Component" if folder == "monitoring" else "Kustomization")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_built_in_object_validates_against_the_kubernetes_schemas(version):
    checked = 0
    for _, doc in OBJECTS:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, version, strict=True)
        checked += 1
    # The LeaderWorkerSet's pod templates are Kubernetes PodTemplateSpecs: validated as such too.
    for role, template in pod_templates("multi-node").items():
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role}, "template": template},
            version, strict=True,
        )  # fmt: skip
    assert checked == len([o for _, o in OBJECTS if o["kind"] not in CRD_KINDS]) >= 9


def test_an_unknown_field_fails_the_validation():
    """The validation is strict: a misspelt field is refused, not ignored."""
    statefulset = json.loads(json.dumps(one("one-node", "StatefulSet")))
    container(statefulset["spec"]["template"])["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, VERSIONS[-1], strict=True)


@pytest.fixture(scope="module")
def crd_schemas():
    why = k8s_crds.unavailable()
    if why and k8s_crds.REQUIRED:
        raise RuntimeError(f"{harness_env.REQUIRE_K8S_CRDS} is set, but {why}")
    if why:
        pytest.skip(why)
    return k8s_crds.schemas()


def check_jsonschema(schema: dict, doc: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    (tmp_path / "object.json").write_text(json.dumps(doc))
    command = [str(Path(sys.executable).parent / "check-jsonschema"), "--regex-variant", "python"]
    return subprocess.run([*command, "--schemafile", str(tmp_path / "schema.json"), str(tmp_path / "object.json")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_custom_resources_validate_against_their_crd_schemas(crd_schemas, kind, tmp_path):
    found = [doc for _, doc in OBJECTS if doc["kind"] == kind]
    assert found
    for doc in found:
        result = check_jsonschema(crd_schemas[(doc["apiVersion"], kind)], doc, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
    # strict: a field the CRD does not know is refused
    wrong = {**found[0], "spec": {**found[0]["spec"], "restartPolicyy": "Never"}}
    result = check_jsonschema(crd_schemas[(found[0]["apiVersion"], kind)], wrong, tmp_path)
    assert result.returncode == 1 and "restartPolicyy" in result.stdout


@pytest.mark.parametrize("project", sorted(generate.MINIMUM_VERSIONS))
def test_the_stated_minimum_releases_take_the_manifests_and_the_release_before_refuses_them(project, tmp_path):
    """docs/kubernetes.md states the oldest LeaderWorkerSet and Prometheus Operator releases the manifests need: their
    CRDs, read from the projects' tags, take every object; the release before refuses the field that needs it."""
    release = generate.MINIMUM_VERSIONS[project]
    found = {tag: k8s_crds.release_schemas(release["repo"], release[tag]) for tag in ("minimum", "before")}
    missing = [release[tag] for tag, schemas in found.items() if schemas is None]
    if missing:
        pytest.skip(f"{release['repo']} {' and '.join(missing)}: CRDs not staged: "
                    f"{k8s_crds.how_to_stage_release(release['repo'], *missing)}")  # fmt: skip
    docs = [doc for _, doc in OBJECTS if doc["kind"] in release["kinds"]]
    assert {doc["kind"] for doc in docs} == set(release["kinds"])
    for doc in docs:
        result = check_jsonschema(found["minimum"][(doc["apiVersion"], doc["kind"])], doc, tmp_path)
        assert result.returncode == 0, f"{release['minimum']}: " + result.stdout + result.stderr
    refused = [check_jsonschema(found["before"][(d["apiVersion"], d["kind"])], d, tmp_path) for d in docs]
    assert any(r.returncode == 1 and repr(release["field"]) in r.stdout for r in refused), [r.stdout for r in refused]
    assert release["minimum"] in (REPO / "docs" / "kubernetes.md").read_text()


# -- what `kubectl apply -k` gets ------------------------------------------------------------------------------


def kustomize(folder: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (.ci/run installs it): the overlays were NOT rendered")
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


def needs_a_crd(doc: dict) -> bool:
    try:
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)
    except kubernetes_validate.utils.SchemaNotFoundError:
        return True
    return False


@pytest.mark.parametrize("overlay", ["one-node", "multi-node"])
def test_each_overlay_without_the_monitoring_component_needs_no_crd_but_leaderworkersets(overlay, tmp_path):
    rendered = kustomize(FOLDER / overlay)
    custom = {doc["kind"] for doc in rendered if needs_a_crd(doc)}
    assert custom == ({"LeaderWorkerSet"} if overlay == "multi-node" else set())
    workload = "StatefulSet" if overlay == "one-node" else "LeaderWorkerSet"
    assert {workload, "Deployment", "NetworkPolicy"} <= {d["kind"] for d in rendered}
    # the component, added as an operator adds it, brings the monitors with kube-prometheus-stack's label
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(FOLDER / overlay, tmp_path)],
        "components": [os.path.relpath(FOLDER / "monitoring", tmp_path)],
    }))  # fmt: skip
    monitored = kustomize(tmp_path)
    added = [doc for doc in monitored if doc not in rendered]
    assert sorted(doc["kind"] for doc in added) == ["PrometheusRule", "ServiceMonitor", "ServiceMonitor"]
    assert all(doc["metadata"]["labels"]["release"] == generate.Cluster().prometheus_release for doc in added)
    (rule,) = [doc for doc in added if doc["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["app"] == "kube-prometheus-stack"  # older charts' ruleSelector asks for it


def test_images_are_set_by_kustomize_and_a_tag_is_pulled_once(tmp_path):
    """The manifests name no image anybody built (nix/image.nix tags each by its content): kustomize `images:`
    points every container at the registry and the built tag; each tag is one content, so IfNotPresent."""
    containers = [c for spec in every_pod_spec() for c in spec["containers"] + spec.get("initContainers", [])]
    assert {c["imagePullPolicy"] for c in containers} == {"IfNotPresent"}
    assert {c["image"] for c in containers} == {generate.IMAGE_UNSET.format(sglang="0.5.9"),
                                               generate.ROUTER_IMAGE_UNSET}  # fmt: skip
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(FOLDER / "multi-node", tmp_path)],
        "images": [{"name": "sglang-eagle3", "newName": "registry.example.org/sglang-eagle3", "newTag": "0123abc"},
                   {"name": "sglang-eagle3-router", "newName": "registry.example.org/router",
                    "digest": "sha256:" + "0" * 64}],
    }))  # fmt: skip
    rendered = kustomize(tmp_path)
    lws = next(d for d in rendered if d["kind"] == "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    router = next(d for d in rendered if d["kind"] == "Deployment")["spec"]["template"]
    set_images = {
        c["image"]
        for template in (lws["leaderTemplate"], lws["workerTemplate"], router)
        for c in template["spec"]["containers"] + template["spec"]["initContainers"]
    }
    assert set_images == {
        "registry.example.org/sglang-eagle3:0123abc",
        "registry.example.org/router@sha256:" + "0" * 64,
    }
    # or generate.py writes them; a reference without a tag or digest (:latest) is refused
    assert generate.main(["--output", str(tmp_path / "out"), "--image", "r.example/sglang-eagle3:0123abc"]) == 0
    assert "image: r.example/sglang-eagle3:0123abc" in (tmp_path / "out/one-node/server.yaml").read_text()
    with pytest.raises(SystemExit, match="names no tag or digest"):
        generate.main(["--output", str(tmp_path / "bad"), "--image", "registry.example.org:5000/sglang-eagle3"])


# -- a LeaderWorkerSet group starts together -----------------------------------------------------------------


def run_group_gate(tmp_path: Path, hosts: dict[str, str], listen_after: float | None, wait_s: float):
    """Run the worker template's wait-for-group script as a pod would, in a network namespace of its own whose
    /etc/hosts names the group's members; `weights-verified`'s own command starts listening after `listen_after`
    seconds (never if None). Returns (the waiter's exit status, or None if it still waits after wait_s; its log)."""
    for tool in ("bash", "gawk", "unshare", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (.ci/run installs it): the group gate was NOT run")
    init = {c["name"]: c for c in pod_templates("multi-node")["worker"]["spec"]["initContainers"]}
    (tmp_path / "hosts").write_text("".join(f"{address} {name}\n" for name, address in hosts.items()))
    listen = "" if listen_after is None else f'sleep {listen_after}; gawk "$LISTEN" & listener=$!'
    driver = f"""
        ip link set lo up && mount --bind {tmp_path}/hosts /etc/hosts || exit 99
        bash -c "$WAIT" > {tmp_path}/wait.log 2>&1 & waiter=$!
        {listen}
        for _ in $(seq {int(wait_s * 10)}); do kill -0 $waiter 2>/dev/null || break; sleep 0.1; done
        if kill -0 $waiter 2>/dev/null; then status=waiting; kill $waiter; else wait $waiter; status=$?; fi
        [ -n "$listener" ] && kill $listener 2>/dev/null; echo "$status"
    """
    env = {**os.environ, "WAIT": init["wait-for-group"]["command"][2], "LISTEN": init["weights-verified"]["command"][1],
           **lws_values(1)}  # fmt: skip
    result = subprocess.run(["unshare", "-rmn", "bash", "-c", driver], capture_output=True, text=True, env=env,
                            timeout=wait_s + 30)  # fmt: skip
    assert result.stdout.strip(), result.stderr
    status = result.stdout.strip().splitlines()[-1]
    return (None if status == "waiting" else int(status)), (tmp_path / "wait.log").read_text()


def test_a_leaderworkerset_pod_starts_sglang_only_once_every_members_weights_are_verified(tmp_path):
    spec = pod_templates("multi-node")["worker"]["spec"]
    init = spec["initContainers"]
    # the order Kubernetes runs them in: the key, both fetches (each file hashed against its lock), then the
    # sidecar that says so (started only after the fetches succeeded, kept running), then the wait for the others
    assert [c["name"] for c in init] == ["credentials", "fetch-target", "fetch-draft", "weights-verified",
                                         "wait-for-group"]  # fmt: skip
    assert init[3]["restartPolicy"] == "Always" and "restartPolicy" not in init[4]
    assert [p["containerPort"] for p in init[3]["ports"]] == [generate.GROUP_GATE_PORT]
    assert pod_templates("multi-node")["leader"]["spec"]["initContainers"] == init
    one_node = {c["name"] for c in one("one-node", "StatefulSet")["spec"]["template"]["spec"]["initContainers"]}
    assert not {"weights-verified", "wait-for-group"} & one_node, "one node: nothing to wait for"
    leader = LWS_LEADER
    worker = f"{generate.NAME}-0-1.{generate.NAME}.default"  # LeaderWorkerSet's name for worker 1 of group 0
    # the leader's weights are verified, the worker's are not (nothing answers for it): the pod keeps waiting
    status, log = run_group_gate(tmp_path, {leader: "127.0.0.1", worker: "192.0.2.1"}, listen_after=0, wait_s=8)
    assert status is None, log
    assert f"{leader}: weights verified" in log and f"waiting for {worker}'s weights" in log
    assert f"{worker}: weights verified" not in log
    # no member verified yet: it waits; once every member's sidecar answers, it ends and SGLang may start
    status, log = run_group_gate(tmp_path, {leader: "127.0.0.1", worker: "127.0.0.1"}, listen_after=2, wait_s=20)
    assert status == 0, log
    assert log.index(f"{leader}: weights verified") < log.index(f"{worker}: weights verified")


# -- agreement with the NixOS unit ---------------------------------------------------------------------------


def module_host(folder: str, rank: int = 0) -> str:
    layout = generate.ONE_NODE if folder == "one-node" else generate.MULTI_NODE
    values = json.loads(one(folder, "ConfigMap")["data"]["settings.json"])
    multi = ""
    if layout.nnodes > 1:
        env = " ".join(f'{k} = "{v}";' for k, v in generate.MULTI_NODE_ENV.items())
        extra = " ".join(json.dumps(a) for a in values["extra_args"])
        leader = f"{LWS_LEADER}:{generate.RENDEZVOUS_PORT}"
        multi = (f'nnodes = {layout.nnodes}; nodeRank = {rank}; distInitAddr = "{leader}";'
                 f" environment = {{ {env} }}; extraArgs = [ {extra} ];")  # fmt: skip
    return f"""{{ services.sglang-eagle3 = {{
        enable = true; settings = {{ host = "0.0.0.0"; tp_size = {layout.tp_size}; }};
        apiKeyFile = "/run/secrets/sglang-api-key"; {multi}
        models.target.lockFile = {generate.EXAMPLE_LOCKS["target"]};
        models.draft.lockFile = {generate.EXAMPLE_LOCKS["draft"]};
      }}; }}"""


@pytest.fixture(scope="module")
def units():
    if not (nix_harness.NIX and nix_harness.NIXPKGS_LIB):
        pytest.skip(f"needs nixpkgs' lib/: {nix_harness.flake_eval.HOW_TO_STAGE}")
    hosts = {
        ("one-node", 0): module_host("one-node"),
        **{("multi-node", r): module_host("multi-node", r) for r in (0, 1)},
    }
    return {key: nix_harness.evaluate_module(config) for key, config in hosts.items()}


CASES = [("one-node", 0), ("multi-node", 0), ("multi-node", 1)]


@pytest.mark.parametrize(("folder", "rank"), CASES)
def test_the_pods_settings_are_the_units(units, folder, rank, tmp_path):
    unit = units[(folder, rank)]
    assert unit["failedAssertions"] == []
    unit_file = tmp_path / "unit-settings.json"
    unit_file.write_text(json.dumps(unit["settings"]))
    expected = settings.load(unit_file, environ={})
    assert container_settings(folder, rank, tmp_path) == expected
    if rank == 0:  # the file itself, before the LeaderWorkerSet's variables: the unit's, but for the rendezvous
        configmap = json.loads(one(folder, "ConfigMap")["data"]["settings.json"])
        assert {**configmap, "dist_init_addr": unit["settings"]["dist_init_addr"]} == unit["settings"]


@pytest.mark.parametrize(("folder", "rank"), CASES)
def test_the_pods_command_line_and_environment_are_the_units(units, folder, rank, tmp_path):
    service = units[(folder, rank)]["services"]["sglang-eagle3"]
    exe, *unit_argv = service["serviceConfig"]["ExecStart"].split()
    assert exe.endswith("/bin/sglang-eagle3") and unit_argv[:2] == ["serve", "--config"]
    pod = container(pod_templates(folder)["leader" if rank == 0 else "worker"])
    # the image's entrypoint is `sglang-eagle3 serve` (tests/test_image.py); the args are the unit's, with the
    # settings file where the ConfigMap is mounted, and the LeaderWorkerSet's rank and leader
    assert "command" not in pod
    assert pod["args"][:2] == ["--config", generate.SETTINGS_FILE] and len(unit_argv) == 3
    mounts = {m["mountPath"]: m["name"] for m in pod["volumeMounts"]}
    assert mounts[str(Path(generate.SETTINGS_FILE).parent)] == "settings"
    env = env_of(pod)
    unit_env = {k: v for k, v in service["environment"].items() if k != "PATH"}  # PATH: the unit's programs
    assert {k: v for k, v in env.items() if k != "CREDENTIALS_DIRECTORY"} == unit_env
    # the key: systemd's credential api-key, in the directory CREDENTIALS_DIRECTORY names
    assert service["serviceConfig"]["LoadCredential"] == [
        f"{credentials.API_KEY.credential}:/run/secrets/sglang-api-key"
    ]
    key_dir = tmp_path / "credentials"
    key_dir.mkdir()
    (key_dir / credentials.API_KEY.credential).write_text("k8s-test-key")
    (key_dir / credentials.API_KEY.credential).chmod(0o400)
    pod_env = {**env, "CREDENTIALS_DIRECTORY": str(key_dir)}
    unit_plan = launch_plan.build(
        container_settings(folder, rank, tmp_path), "python", {"CREDENTIALS_DIRECTORY": str(key_dir)}
    )
    pod_plan = launch_plan.build(container_settings(folder, rank, tmp_path), "python", pod_env)
    assert pod_plan.argv == unit_plan.argv and pod_plan.env == unit_plan.env
    assert "k8s-test-key" not in json.dumps([pod_plan.argv, pod_plan.env])


@pytest.mark.parametrize("folder", ["one-node", "multi-node"])
def test_the_probes_and_grace_periods_are_the_units_timeouts(units, folder):
    unit = units[(folder, 0)]
    config = unit["services"]["sglang-eagle3"]["serviceConfig"]
    for role, template in pod_templates(folder).items():
        assert template["spec"]["terminationGracePeriodSeconds"] == config["TimeoutStopSec"]
        pod = container(template)
        if role == "worker":
            assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(pod), "workers get no HTTP probe"
            continue
        ready = urlparse_path(launch_plan.health_url(settings.ServerSettings(host="0.0.0.0")))
        assert ready == "/health_generate"
        startup, readiness, liveness = pod["startupProbe"], pod["readinessProbe"], pod["livenessProbe"]
        assert startup["httpGet"]["path"] == readiness["httpGet"]["path"] == ready
        # a ~600 GB load: the startup probe waits as long as systemd does (the launcher's ready_timeout + grace)
        budget = startup["failureThreshold"] * startup["periodSeconds"]
        assert config["TimeoutStartSec"] <= budget < config["TimeoutStartSec"] + startup["periodSeconds"]
        assert config["TimeoutStartSec"] >= 7200
        assert readiness["timeoutSeconds"] >= 5 and liveness["httpGet"]["path"] == "/health"
        assert liveness["timeoutSeconds"] >= 5 and liveness["failureThreshold"] * liveness["periodSeconds"] >= 120


def urlparse_path(url: str) -> str:
    from urllib.parse import urlparse

    return urlparse(url).path


def test_the_router_is_the_router_units(tmp_path):
    """The router's command line is services.sglang-router's at its defaults, but for where the workers come from:
    the unit is given their URLs, the pod finds them itself (smg's Kubernetes service discovery)."""
    if not (nix_harness.NIX and nix_harness.NIXPKGS_LIB):
        pytest.skip(f"needs nixpkgs' lib/: {nix_harness.flake_eval.HOW_TO_STAGE}")
    unit = nix_harness.evaluate_module(
        '{ services.sglang-router = { enable = true; host = "0.0.0.0"; metrics.host = "0.0.0.0"; '
        'workers = [ "http://gpu-host:30000" ]; apiKeyFile = "/run/secrets/sglang-api-key"; }; }'
    )["services"]["sglang-router"]
    exe, *argv = unit["serviceConfig"]["ExecStart"].split()
    assert exe.endswith("/bin/sglang-eagle3-router")
    assert argv[argv.index("--worker-urls") :] == ["--worker-urls", "http://gpu-host:30000"]
    for folder in ("one-node", "multi-node"):
        deployment = one(folder, "Deployment")
        pod = container(deployment["spec"]["template"], "router")
        assert pod["args"] == argv[: argv.index("--worker-urls")] + generate.ROUTER_DISCOVERY
        unit_env = {k: v for k, v in unit["environment"].items() if k != "PATH"}  # PATH: the unit's programs
        assert {k: v for k, v in env_of(pod).items() if k != "CREDENTIALS_DIRECTORY"} == unit_env
        assert (
            deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            == unit["serviceConfig"]["TimeoutStopSec"]
        )


def test_the_router_may_read_pods_in_its_namespace_and_nothing_more():
    for folder in ("one-node", "multi-node"):
        role, binding = one(folder, "Role"), one(folder, "RoleBinding")
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sglang-router"}
        account = one(folder, "ServiceAccount")["metadata"]["name"]
        # no namespace: the binding's own, wherever the objects are applied (tests/test_router_discovery.py)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
        spec = one(folder, "Deployment")["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == account
        router = container({"spec": spec}, "router")
        args = router["args"]
        # the selector picks each replica's rank 0 (the one-node pods, the LeaderWorkerSet's leaders), not workers
        selector = dict(
            a.split("=", 1) for a in args[args.index("--selector") + 1 : args.index("--service-discovery-port")]
        )
        leaders = [t for role_, t in pod_templates(folder).items() if role_ == "leader"]
        workers = [t for role_, t in pod_templates(folder).items() if role_ == "worker"]
        assert all(selector.items() <= t["metadata"]["labels"].items() for t in leaders)
        assert not any(selector.items() <= t["metadata"]["labels"].items() for t in workers)
        assert args[args.index("--service-discovery-port") + 1] == str(generate.HTTP_PORT)
        # its own namespace, or it would watch the whole cluster, which a Role does not allow
        assert args[args.index("--service-discovery-namespace") + 1] == "$(POD_NAMESPACE)"
        assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in router[
            "env"
        ]
    policy = next(d for _, d in OBJECTS if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "sglang-router")
    assert {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]} in policy["spec"]["egress"]


# -- each stack's SGLang parses the leader's and a worker's command line -------------------------------------

MAIN_DRIVER = REPO / "tests" / "support" / "drivers" / "sglang_main_driver.py"


@pytest.fixture(params=["0.5.9", "0.5.23"])
def tree(request):
    from sglang_eagle3.source.tree import locate

    found = locate(request.getfixturevalue("pristine_tree" if request.param == "0.5.9" else "newest_tree"))
    assert found.version == request.param
    return found


def test_each_stacks_sglang_parses_the_leaders_and_a_workers_argv(tree, tmp_path):
    """The leader's (rank 0) and a worker's (rank 1) command lines, parsed by one run of the tree."""
    pods = [container_settings("multi-node", rank, tmp_path) for rank in (0, 1)]
    given = [{"argv": launch_plan.sglang_args(s), "environ": {}} for s in pods]
    env = {**os.environ, "PYTHONPATH": str(REPO / "python" / "src")}
    result = subprocess.run([sys.executable, str(MAIN_DRIVER), str(tree.root)], input=json.dumps(given),
                            capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(runs) == len(pods)
    for rank, (s, run) in enumerate(zip(pods, runs, strict=True)):
        parsed = run["fields"]
        assert parsed["nnodes"] == "2" and parsed["node_rank"] == str(rank) and parsed["tp_size"] == "16"
        assert parsed["dist_init_addr"] == repr(f"{LWS_LEADER}:{generate.RENDEZVOUS_PORT}")
        assert parsed["dist_timeout"] == str(generate.DIST_TIMEOUT)
        assert parsed["host"] == "'0.0.0.0'" and parsed["model_path"] == repr(s.model_path)


def cited_lines(root: Path, cite: str) -> list[str]:
    """The lines a citation `path:first-last` (or `path:line`) names, in the tree's sglang package."""
    path, _, span = cite.partition(":")
    first, _, last = span.partition("-")
    lines = (root / "sglang" / path).read_text().splitlines()
    return lines[int(first) - 1 : int(last or first)]


def test_the_probes_are_chosen_from_each_stacks_own_health_handler(tree, tmp_path):
    """Both stacks: /health and /health_generate are one handler that generates a token and waits
    SGLANG_HEALTH_CHECK_TIMEOUT for it; the probes wait longer than SGLang does, and liveness longer than SGLang's own
    watchdog, each read from that stack's source at the lines generate.py cites."""
    stack = generate.STACKS[tree.version]
    handler = cited_lines(tree.root, stack["health_handler"])
    assert handler[:3] == ['@app.get("/health")', '@app.get("/health_generate")',
                           "async def health_generate(request: Request) -> Response:"]  # fmt: skip
    body = "\n".join(handler)
    assert "max_new_tokens" in body and "HEALTH_CHECK_TIMEOUT" in body and "status_code=503" in body
    assert handler[-1].strip() == "return Response(status_code=503)"  # the whole handler, up to its last answer
    cite, wait = stack["health_check_timeout"]
    assert cited_lines(tree.root, cite) == [
        f'HEALTH_CHECK_TIMEOUT = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", {wait}))'
    ]
    cite, watchdog = stack["watchdog_timeout"]
    field = cited_lines(tree.root, cite)  # a dataclass field with its default: one line, or an Annotated block
    assert field[0].strip().startswith("watchdog_timeout:") and field[-1].endswith(f"= {watchdog}"), field
    assert generate.main(["--output", str(tmp_path), "--sglang", tree.version]) == 0
    (statefulset,) = [d for d in yaml.safe_load_all((tmp_path / "one-node/server.yaml").read_text())
                      if d["kind"] == "StatefulSet"]  # fmt: skip
    server = container(statefulset["spec"]["template"])
    assert server["image"] == f"sglang-eagle3:unset-sglang-{tree.version}-set-by-kustomize-images"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["timeoutSeconds"] > wait, f"{probe} gives up before SGLang answers"
    liveness = server["livenessProbe"]
    assert liveness["httpGet"]["path"] == "/health"
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > watchdog
    # a wait set in the settings' environment moves the probes with it
    values = {"environment": {"SGLANG_HEALTH_CHECK_TIMEOUT": "60"}, "ready_timeout": 7200}
    moved = generate.probes(generate.Cluster(sglang=tree.version), values, "/health_generate")
    assert all(moved[p]["timeoutSeconds"] > 60 for p in moved)


@pytest.mark.parametrize("folder", ["one-node", "multi-node"])
def test_a_disruption_budget_lets_one_server_pod_go_at_a_time(folder):
    (budget,) = [b["spec"] for b in objects(folder, "PodDisruptionBudget") if b["metadata"]["name"] == generate.NAME]
    assert budget["maxUnavailable"] == 1, "one at a time, and never 0, which would block every drain"
    assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow", "a crash-looping pod must not hold a drain up"
    for template in pod_templates(folder).values():
        assert budget["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    router = one(folder, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not budget["selector"]["matchLabels"].items() <= router.items()


def groups_hit(groups: int, size: int, max_unavailable: int, parallel: bool) -> int:
    """How many LeaderWorkerSet groups a drain of every node takes down at once, under a PodDisruptionBudget of
    `max_unavailable` over all the groups' pods (each pod on a node of its own). The eviction API accepts an eviction
    while the budget allows one (disruptionsAllowed = healthy pods - (expected - maxUnavailable)), counting each it
    accepts at once (policy/v1 Eviction; the disruption controller's arithmetic), and always one of a pod that is not
    Ready (unhealthyPodEvictionPolicy AlwaysAllow). LeaderWorkerSet then recreates the evicted pod's whole group
    (RecreateGroupOnPodRestart): its pods are unready until it has loaded again, which a drain does not wait for.
    `parallel`: one eviction for a pod of every group arrives before the controller has acted (several nodes drained
    at once, the autoscaler); else one node after the other, a refused eviction left for later (kubectl drain retries
    it once the group is back)."""
    ready = {(g, i): True for g in range(groups) for i in range(size)}
    desired = groups * size - max_unavailable
    down: set[int] = set()
    batches = [[(g, 0) for g in range(groups)]] if parallel else [[pod] for pod in ready]
    for batch in batches:
        allowed = sum(ready.values()) - desired
        evicted = []
        for pod in batch:
            if not ready[pod] or allowed > 0:
                allowed -= ready[pod]
                evicted.append(pod)
        for g, _ in evicted:  # the group controller recreates each hit group: all its pods unready
            down.add(g)
            for i in range(size):
                ready[(g, i)] = False
    return len(down)  # none comes back during the drain: the most down at once


def test_the_multi_node_budget_lets_one_group_go_at_a_time():
    """docs/kubernetes.md, "A drain of a multi-node replica is its outage": the budget the manifests give the
    LeaderWorkerSet's pods lets a drain take one group at a time, even when evictions come at once; a budget of the
    group size would let two go; and with one group any drain is a full outage."""
    (budget,) = [
        b["spec"] for b in objects("multi-node", "PodDisruptionBudget") if b["metadata"]["name"] == generate.NAME
    ]
    size = one("multi-node", "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["size"]
    ours = budget["maxUnavailable"]
    for groups in (2, 3):
        assert groups_hit(groups, size, ours, parallel=True) == 1
        assert groups_hit(groups, size, ours, parallel=False) == 1
        assert groups_hit(groups, size, size, parallel=True) == 2, "a budget of the group size lets two groups go"
    assert groups_hit(1, size, ours, parallel=False) == 1, "one group: any drain takes the only replica"
    assert one("multi-node", "LeaderWorkerSet")["spec"]["replicas"] == 1
    text = (REPO / "docs" / "kubernetes.md").read_text()
    assert "A drain of a multi-node replica is its outage" in text and "`maxUnavailable: 1`" in text


def test_the_multi_node_manifests_turn_the_fusion_off_and_preflight_passes_them(tree, tmp_path):
    """FlashInfer's all-reduce fusion works within one node only (preflight's fusion-multi-node rule, quoting each
    stack's source): the LeaderWorkerSet's leader and worker load it off, the multi-node default the NixOS module
    applies too (test_the_pods_settings_are_the_units), while the one-node replicas keep the tuned default (on).
    Each stack's preflight passes the pods' settings; the same settings with the fusion on fail that rule."""
    from sglang_eagle3.judging import settings_rules
    from sglang_eagle3.judging.findings import Report, Status

    fusion = "enable_flashinfer_allreduce_fusion"
    assert settings.multi_node_defaults() == {fusion: False} and settings.default(fusion) is True
    files = {f: json.loads(one(f, "ConfigMap")["data"]["settings.json"]) for f in ("one-node", "multi-node")}
    assert files["multi-node"][fusion] is False and files["one-node"][fusion] is True
    for rank in (0, 1):
        pod = container_settings("multi-node", rank, tmp_path)
        assert pod.nnodes == 2 and getattr(pod, fusion) is False
        for value, status in ((False, Status.OK), (True, Status.FAIL)):
            report = Report()
            judged = pod.model_copy(update={fusion: value})
            settings_rules.check_settings_version(report, judged, launch_plan.sglang_args(judged), tree)
            (found,) = report.findings
            assert found.status is status, found.message
        assert found.message.startswith(f"{fusion}: FlashInfer's all-reduce fusion ")
        assert found.message.endswith(f"set {fusion}=false for a multi-node group"), found.message


# -- security ------------------------------------------------------------------------------------------------


def every_pod_spec() -> list[dict]:
    specs = []
    for _, doc in OBJECTS:
        if doc["kind"] in ("StatefulSet", "Deployment"):
            specs.append(doc["spec"]["template"]["spec"])
        elif doc["kind"] == "LeaderWorkerSet":
            specs += [t["spec"] for t in pod_templates("multi-node").values()]
    return specs


def test_every_hardening_setting_is_mapped_and_what_is_expressed_is_everywhere():
    if nix_harness.NIX is None:
        pytest.skip("needs nix-instantiate")
    layers = nix_harness.nix_eval(f"builtins.attrNames (builtins.foldl' (a: b: a // b) {{ }} "
                                  f"(builtins.attrValues (import {REPO}/modules/hardening.nix)))")  # fmt: skip
    mapping = generate.HARDENING["systemd"]
    assert sorted(mapping) == sorted(layers), "kubernetes/hardening.json maps exactly modules/hardening.nix's settings"
    for name, entry in mapping.items():
        assert entry["why"] and set(entry) <= {"pod", "container", "why"}, name
    specs = every_pod_spec()
    assert len(specs) == 5  # the StatefulSet, the leader, the worker, two routers
    for spec in specs:
        for field, value in generate.pod_security().items():
            assert spec["securityContext"][field] == value
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "readOnlyRootFilesystem": True}, c["name"]  # fmt: skip
        # only the router talks to the API (its service discovery); no server pod gets a token
        assert spec["automountServiceAccountToken"] is ("serviceAccountName" in spec)


def test_the_api_key_comes_from_a_secret_volume_only():
    for spec in every_pod_spec():
        secrets = [v for v in spec["volumes"] if "secret" in v]
        assert [v["secret"]["secretName"] for v in secrets] == [f"{generate.NAME}-api-key"]
        for c in spec["containers"] + spec.get("initContainers", []):
            assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in c.get("env", [])), "none from a Secret"
            assert not [e for e in c.get("env", []) if any(w in e["name"] for w in credentials.SECRET_WORDS)]
            mounted = {m["name"] for m in c.get("volumeMounts", [])}
            assert ("api-key" in mounted) == (c["name"] == "credentials"), c["name"]
        copy = next(c for c in spec["initContainers"] if c["name"] == "credentials")
        # the Secret is group-readable (fsGroup); the copy is the user's alone, as the launcher requires
        assert copy["command"][:3] == ["install", "-m", "0400"]
        assert copy["command"][-1] == f"{generate.CREDENTIALS_DIR}/{credentials.API_KEY.credential}"
        memory = next(v for v in spec["volumes"] if v["name"] == "credentials")
        assert memory["emptyDir"]["medium"] == "Memory"
    assert not [doc for _, doc in OBJECTS if doc["kind"] == "Secret"], "no Secret is committed"


def test_weights_are_fetched_by_one_init_container_per_model_and_mounted_read_only():
    for spec in every_pod_spec():
        fetches = [c for c in spec.get("initContainers", []) if c["name"].startswith("fetch-")]
        if not fetches:
            continue  # the router
        assert [c["name"] for c in fetches] == ["fetch-target", "fetch-draft"]
        for c in fetches:
            role = c["name"].removeprefix("fetch-")
            assert c["command"] == ["sglang-eagle3"] and c["args"][:2] == ["models", "fetch"]
            assert c["args"][c["args"].index("--lock") + 1] == f"{generate.LOCKS_DIR}/{role}.lock.json"
            assert c["args"][c["args"].index("--dir") + 1] == generate.model_dir(generate.EXAMPLE_LOCKS[role])
        weights = [m for m in container({"spec": spec})["volumeMounts"] if m["name"] == "weights"]
        assert weights == [{"name": "weights", "mountPath": generate.PROCESS["modelsDirectory"], "readOnly": True}]
    locks = one("base", "ConfigMap")["data"]
    for role, path in generate.EXAMPLE_LOCKS.items():
        assert json.loads(locks[f"{role}.lock.json"]) == json.loads(path.read_text())


def server_pod_specs() -> list[dict]:
    specs = [s for s in every_pod_spec() if any(c["name"] == "server" for c in s["containers"])]
    assert len(specs) == 3  # the StatefulSet's, the leader's, the worker's
    return specs


def gib(quantity: str) -> int:
    assert quantity.endswith("Gi"), quantity
    return int(quantity.removesuffix("Gi"))


def test_the_server_gets_eight_gpus_a_memory_backed_shm_and_requests_for_what_it_uses():
    cluster = generate.Cluster()
    for spec in server_pod_specs():
        resources = container({"spec": spec})["resources"]
        assert resources["limits"] == {"nvidia.com/gpu": 8}, "no CPU or memory limit: none may stop a 2-hour load"
        shm = next(v for v in spec["volumes"] if v["name"] == "shm")
        assert shm["emptyDir"]["medium"] == "Memory"
        # memory: the tmpfs (charged to the pod) plus each GPU's scheduler process; CPU: a core per scheduler
        # process, the tokenizer and the detokenizer
        requests = resources["requests"]
        assert gib(requests["memory"]) == gib(shm["emptyDir"]["sizeLimit"]) + 8 * cluster.host_memory_per_gpu_gib
        assert requests["cpu"] == "10"
        for fetch in [c for c in spec["initContainers"] if c["name"].startswith("fetch-")]:
            jobs = fetch["args"][fetch["args"].index("--jobs") + 1]
            assert fetch["resources"]["requests"]["cpu"] == jobs == str(generate.FETCH_JOBS)
        # not BestEffort: every container of the pod asks for CPU and memory, or the pod's QoS is Burstable anyway
        assert all("requests" in c.get("resources", {}) for c in spec["containers"])
    lws = one("multi-node", "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert lws["restartPolicy"] == "RecreateGroupOnPodRestart" and lws["size"] == 2


def test_server_pods_land_only_on_nodes_with_the_gpus_they_are_tuned_for():
    cluster = generate.Cluster()
    for spec in server_pod_specs():
        (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        by_key = {e["key"]: e for e in term["matchExpressions"]}
        assert by_key["nvidia.com/gpu.product"] == {
            "key": "nvidia.com/gpu.product", "operator": "In", "values": list(cluster.gpu_products)}  # fmt: skip
        assert by_key["nvidia.com/gpu.memory"]["operator"] == "Gt"
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["runtimeClassName"] == "nvidia"
    # an 80 GB-class GPU fails the memory term (80 GiB or 80 GB, in MiB), a 96 GB card passes (96 GB or 96 GiB)
    assert 80 * 1024 < cluster.min_gpu_memory_mib < 96 * 10**9 // 2**20 < 96 * 1024
    router = one("one-node", "Deployment")["spec"]["template"]["spec"]
    assert not {"tolerations", "runtimeClassName"} & set(router), "the router needs no GPU node"
    assert set(router["affinity"]) == {"podAntiAffinity"}, "no node affinity: any node"


def test_every_placement_default_is_an_option_and_bad_values_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--output", str(out), "--gpu-product", "NVIDIA-H200", "--min-gpu-memory-mib", "140000",
            "--runtime-class", "", "--gpu-taint", "gpu", "--host-memory-per-gpu-gib", "20",
            "--prometheus-release", "monitoring"]  # fmt: skip
    assert generate.main(argv) == 0
    (statefulset,) = [d for d in yaml.safe_load_all((out / "one-node/server.yaml").read_text())
                      if d["kind"] == "StatefulSet"]  # fmt: skip
    spec = statefulset["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["NVIDIA-H200"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][1]["values"] == ["140000"]
    assert "runtimeClassName" not in spec and spec["tolerations"][0]["key"] == "gpu"
    assert container({"spec": spec})["resources"]["requests"]["memory"] == f"{32 + 8 * 20}Gi"
    for doc in yaml.safe_load_all((out / "monitoring/monitoring.yaml").read_text()):
        assert doc["metadata"]["labels"]["release"] == "monitoring"
    for bad, why in ((["--runtime-class", "Not_A_Name"], "--runtime-class"),
                     (["--gpu-product", "RTX PRO 6000"], "--gpu-product"),
                     (["--min-gpu-memory-mib", "0"], "must be positive")):  # fmt: skip
        with pytest.raises(SystemExit) as refused:
            generate.main(["--output", str(tmp_path / "bad"), *bad])
        assert why in str(refused.value) and not (tmp_path / "bad").exists()
    lws = one("multi-node", "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    assert lws["restartPolicy"] == "RecreateGroupOnPodRestart" and lws["size"] == 2


# -- monitoring ---------------------------------------------------------------------------------------------


def test_the_prometheus_rule_holds_the_monitoring_modules_rules():
    rule = one("monitoring", "PrometheusRule")
    files = ("sglang-eagle3-alerts.yml", "sglang-eagle3-thresholds.yml")
    expected = [g for f in files for g in yaml.safe_load((REPO / "modules/monitoring" / f).read_text())["groups"]]
    assert rule["spec"]["groups"] == expected


def test_the_service_monitors_produce_every_job_the_alerts_select():
    alerts = (REPO / "modules/monitoring/sglang-eagle3-alerts.yml").read_text()
    selected = set(re.findall(r'job="([\w-]+)"', alerts))
    produced = {
        r["replacement"]
        for monitor in objects("monitoring", "ServiceMonitor")
        for endpoint in monitor["spec"]["endpoints"]
        for r in endpoint["relabelings"]
        if r["targetLabel"] == "job"
    }
    # sglang-eagle3-node is the NixOS module's (node_exporter's systemd collector); in a cluster the process state
    # comes from kube-state-metrics, which kube-prometheus-stack scrapes itself (docs/monitoring.md)
    assert selected - {"sglang-eagle3-node"} == produced == {"sglang-eagle3", "sglang-eagle3-health", "sglang-router"}
    assert "kube_pod_container_status_ready" in alerts
    # each monitor selects a Service that exists, on a port that Service has
    services = [doc for _, doc in OBJECTS if doc["kind"] == "Service"]
    for monitor in objects("monitoring", "ServiceMonitor"):
        chosen = [
            s for s in services if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert chosen
        for s in chosen:
            ports = {p["name"] for p in s["spec"]["ports"]}
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def test_the_servers_reach_every_kind_of_cluster_dns_and_the_router_only_what_it_uses(tmp_path):
    """The servers: the cluster's DNS pods, on the port a policy sees (53; 5353 where the pods listen there behind the
    Service, as OpenShift's do), and NodeLocal DNSCache, which answers on the node's link-local address: no pod selector
    matches it, only an ipBlock. The router: its servers' HTTP port and the API server, nothing else (no DNS: it
    reaches both by address; tests/test_router_discovery.py runs it with no name server), and only the API server's
    addresses with --api-server-cidr."""
    policies = {
        p["metadata"]["name"]: p for p in yaml.safe_load_all((FOLDER / "base" / "network-policy.yaml").read_text())
    }
    assert set(policies) == {generate.NAME, generate.ROUTER}
    (dns,) = [
        r for r in policies[generate.NAME]["spec"]["egress"] if {"protocol": "UDP", "port": 53} in r.get("ports", [])
    ]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {(u, n) for u in ("UDP", "TCP") for n in (53, 5353)}
    assert {"namespaceSelector": {}} in dns["to"], "every namespace's DNS pods"
    assert {"ipBlock": {"cidr": "169.254.20.10/32"}} in dns["to"], "NodeLocal DNSCache"
    api = {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    servers = {"to": [{"podSelector": {"matchLabels": generate.labels("server")}}],
               "ports": [{"protocol": "TCP", "port": generate.HTTP_PORT}]}  # fmt: skip
    assert policies[generate.ROUTER]["spec"]["egress"] == [servers, api]
    assert generate.main(["--output", str(tmp_path), "--api-server-cidr", "10.0.0.10/32",
                          "--api-server-cidr", "fd00::1/128"]) == 0  # fmt: skip
    narrowed = {
        p["metadata"]["name"]: p for p in yaml.safe_load_all((tmp_path / "base/network-policy.yaml").read_text())
    }
    assert narrowed[generate.ROUTER]["spec"]["egress"][1] == {
        "to": [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}],
        **api,
    }
    with pytest.raises(SystemExit, match="--api-server-cidr '10.0.0.300/32' is not a CIDR"):
        generate.main(["--output", str(tmp_path / "bad"), "--api-server-cidr", "10.0.0.300/32"])


def test_the_router_pod_has_two_replicas_a_budget_and_requests_and_limits():
    for folder in ("one-node", "multi-node"):
        deployment = one(folder, "Deployment")["spec"]
        assert deployment["replicas"] == 2 and deployment["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        spec = deployment["template"]["spec"]
        term = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        router = container(deployment["template"], "router")
        resources = router["resources"]
        assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
        assert "HF_HOME" not in env_of(router) and "--disable-tokenizer-autoload" in router["args"]
        (budget,) = [
            b["spec"] for b in objects(folder, "PodDisruptionBudget") if b["metadata"]["name"] == "sglang-router"
        ]
        assert budget["minAvailable"] == 1 and budget["selector"]["matchLabels"] == generate.labels("router")
        service = next(s for s in objects(folder, "Service") if s["metadata"]["name"] == "sglang-router")
        assert service["spec"]["sessionAffinity"] == "ClientIP"


QUANTITY = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(text) -> float:
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text))
    return float(match.group(1)) * QUANTITY.get(match.group(2), 1)


def qos_class(spec: dict) -> str:
    """The pod's QoS class as Kubernetes computes it (kubernetes/kubernetes pkg/apis/core/helper/qos/qos.go
    GetPodQOS): over every container, init containers included, and only CPU and memory; a request left unset
    defaults to its limit."""
    requests_seen = limits_seen = False
    guaranteed = True
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        resources = c.get("resources", {})
        limits = {k: quantity(v) for k, v in resources.get("limits", {}).items() if k in ("cpu", "memory")}
        requests = {k: quantity(v) for k, v in resources.get("requests", {}).items() if k in ("cpu", "memory")}
        requests = {**limits, **requests}
        requests_seen |= bool(requests)
        limits_seen |= bool(limits)
        guaranteed &= set(limits) == {"cpu", "memory"} and requests == limits
    if not requests_seen and not limits_seen:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@pytest.mark.parametrize("qos", generate.QOS_CLASSES)
def test_the_server_pods_qos_class_is_the_one_asked_for(qos, tmp_path):
    """docs/kubernetes.md, "Guaranteed QoS": --qos guaranteed gives every server pod limits equal to its requests,
    in whole CPUs for the server container (the static CPU manager's exclusive cores); the default is Burstable."""
    assert generate.main(["--output", str(tmp_path), "--qos", qos]) == 0
    rendered = [d for path in tmp_path.rglob("server.yaml") for d in yaml.safe_load_all(path.read_text())]
    specs = [d["spec"]["template"]["spec"] for d in rendered if d["kind"] == "StatefulSet"]
    for d in rendered:
        if d["kind"] == "LeaderWorkerSet":
            specs += [d["spec"]["leaderWorkerTemplate"][r]["spec"] for r in ("leaderTemplate", "workerTemplate")]
    assert len(specs) == 3
    for spec in specs:
        assert qos_class(spec) == qos.capitalize()
        server = next(c for c in spec["containers"] if c["name"] == "server")["resources"]
        assert server["limits"]["nvidia.com/gpu"] == 8 and server["requests"]["cpu"] == "10"
        if qos == "guaranteed":
            assert {k: v for k, v in server["limits"].items() if k != "nvidia.com/gpu"} == server["requests"]
            assert quantity(server["limits"]["cpu"]).is_integer(), "whole CPUs, or no exclusive cores"
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec},
                                     VERSIONS[-1], strict=True)  # fmt: skip
    with pytest.raises(SystemExit):
        generate.main(["--output", str(tmp_path / "bad"), "--qos", "besteffort"])


# -- the RDMA component ------------------------------------------------------------------------------------------


def every_template(rendered: list[dict]) -> list[dict]:
    specs = []
    for d in rendered:
        if d["kind"] in ("StatefulSet", "Deployment"):
            specs.append(d["spec"]["template"]["spec"])
        if d["kind"] == "LeaderWorkerSet":
            specs += [d["spec"]["leaderWorkerTemplate"][r]["spec"] for r in ("leaderTemplate", "workerTemplate")]
    return specs


def test_every_pod_meets_pod_security_restricted():
    from support.pod_security import strictest_level, violations

    specs = every_template([d for _, d in OBJECTS])
    assert len(specs) == 5  # one-node's server, multi-node's leader and worker, both overlays' router
    for spec in specs:
        assert violations(spec, "restricted") == [] and strictest_level(spec) == "restricted"


def test_the_rdma_component_gives_each_group_pod_the_device_and_ipc_lock_and_needs_privileged(crd_schemas, tmp_path):
    """kubernetes/rdma/ over the multi-node overlay, rendered by kustomize as an operator adds it: every pod of a group
    gets the RDMA device and IPC_LOCK and NCCL's InfiniBand transport, the rest as it was; the objects validate; and
    what it costs: Pod Security "privileged" (IPC_LOCK is in neither "restricted" nor "baseline")."""
    from support.pod_security import strictest_level, violations

    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(FOLDER / "multi-node", tmp_path)],
        "components": [os.path.relpath(FOLDER / "rdma", tmp_path)],
    }))  # fmt: skip
    rendered = [d for d in kustomize(tmp_path) if d]
    plain = [d for d in kustomize(FOLDER / "multi-node") if d]
    (lws,) = [d for d in rendered if d["kind"] == "LeaderWorkerSet"]
    result = check_jsonschema(crd_schemas[(lws["apiVersion"], "LeaderWorkerSet")], lws, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for d in rendered:
        if d["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(d, VERSIONS[-1], strict=True)
    (before,) = [d for d in plain if d["kind"] == "LeaderWorkerSet"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        server = next(c for c in spec["containers"] if c["name"] == "server")
        assert server["resources"]["limits"][generate.Cluster().rdma_resource] == 1
        assert server["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert violations(spec, "baseline") == ["capabilities_baseline: server adds ['IPC_LOCK']"]
        assert violations(spec, "restricted") == ["capabilities_baseline: server adds ['IPC_LOCK']",
                                                  "capabilities_restricted: server adds ['IPC_LOCK']"]  # fmt: skip
        assert strictest_level(spec) == "privileged"
        # the rest of the pod as it was
        old = before["spec"]["leaderWorkerTemplate"][role]["spec"]
        del (
            server["resources"]["limits"][generate.Cluster().rdma_resource],
            server["securityContext"]["capabilities"]["add"],
        )
        assert spec == old
    # NCCL over InfiniBand/RoCE in the settings the launcher loads, which are valid, the rest unchanged
    (configmap,) = [d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings")]
    (plain_map,) = [d for d in plain if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings")]
    values, old_values = json.loads(configmap["data"]["settings.json"]), json.loads(plain_map["data"]["settings.json"])
    assert values["environment"] == {**old_values["environment"], "NCCL_IB_DISABLE": "0"}
    assert {k: v for k, v in values.items() if k != "environment"} == {
        k: v for k, v in old_values.items() if k != "environment"
    }
    settings.ServerSettings(**{**values, "dist_init_addr": "leader:20000"})
    assert [d for d in rendered if d["kind"] not in ("LeaderWorkerSet", "ConfigMap")] == [
        d for d in plain if d["kind"] not in ("LeaderWorkerSet", "ConfigMap")
    ]
    with pytest.raises(SystemExit, match="--rdma-resource 'rdma' is not an extended resource name"):
        generate.main(["--output", str(tmp_path / "bad"), "--rdma-resource", "rdma"])


# -- NUMA memory policy under the runtime's default seccomp profile ------------------------------------------

# A stand-in for RuntimeDefault as it treats these pods: mbind, set_mempolicy and get_mempolicy refused with EPERM
# (containerd's default profile has no rule for them, contrib/seccomp/seccomp_default.go at 96929a5d; Docker's
# admits them only with CAP_SYS_NICE, which the pods do not get). A classic-BPF filter, then exec.
DENY_MEMPOLICY_C = r"""
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1), \
                 BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)
int main(int argc, char **argv) {
  struct sock_filter filter[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    DENY(SYS_mbind), DENY(SYS_set_mempolicy), DENY(SYS_get_mempolicy),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
  if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
    return 125;
  execv(argv[1], argv + 1);
  return 126;
}
"""
# 0.5.23's own functions, compiled from its numa_utils.py, with the real ctypes and libnuma.
NUMA_DRIVER = r"""
import ast, ctypes, json, logging, sys
source = open(sys.argv[1]).read()
wanted = {"get_libnuma", "_can_set_mempolicy", "_strip_memory_args"}
functions = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in wanted]
namespace = {"ctypes": ctypes, "logger": logging.getLogger("numa")}
exec(compile(ast.Module(functions, []), sys.argv[1], "exec"), namespace)
can = namespace["_can_set_mempolicy"]()
args = "--cpunodebind=0 --membind=0"  # what _numactl_cpu_mem_args gives for node 0
print(json.dumps({"can_set_mempolicy": can, "numactl": args if can else namespace["_strip_memory_args"](args)}))
"""


def test_no_memory_binding_in_containers_sglang_keeps_only_the_cpu_binding(newest_tree, tmp_path):
    """The pods get no CAP_SYS_NICE, so the runtime's default seccomp profile refuses the NUMA memory-policy calls
    the NixOS unit allows (@resources). Decided: no --membind in containers. SGLang 0.5.23 binds by default
    (SGLANG_AUTO_NUMA_BIND) and asks get_mempolicy first; its own code, run under such a filter, drops --membind
    and keeps the CPU binding (sched_setaffinity, which the profile allows). 0.5.9 binds only with --numa-node,
    which the settings leave unset."""
    for tool in ("cc",):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (.ci/run installs it): the seccomp filter was NOT built")
    if not Path("/usr/lib/x86_64-linux-gnu/libnuma.so.1").is_file():
        pytest.skip("needs a real libnuma to load (Debian's libnuma1)")
    for spec in server_pod_specs():
        for c in spec["containers"] + spec["initContainers"]:
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}, c["name"]
    for folder in ("one-node", "multi-node"):
        values = json.loads(one(folder, "ConfigMap")["data"]["settings.json"])
        assert "--numa-node" not in values.get("extra_args", []) and "numa_node" not in values
    (tmp_path / "deny.c").write_text(DENY_MEMPOLICY_C)
    subprocess.run(["cc", "-O", "-o", str(tmp_path / "deny"), str(tmp_path / "deny.c")], check=True)
    numa_utils = newest_tree / "sglang" / "srt" / "utils" / "numa_utils.py"
    command = [sys.executable, "-c", NUMA_DRIVER, str(numa_utils)]
    free = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    denied = json.loads(subprocess.run([str(tmp_path / "deny"), *command], capture_output=True, text=True,
                                       check=True).stdout)  # fmt: skip
    if not free["can_set_mempolicy"]:
        pytest.skip("this machine refuses get_mempolicy already: the filter's effect cannot be told apart")
    assert free == {"can_set_mempolicy": True, "numactl": "--cpunodebind=0 --membind=0"}
    assert denied == {"can_set_mempolicy": False, "numactl": "--cpunodebind=0"}
    # the decision is written where the unit's sandbox is mapped
    assert "--membind" in generate.HARDENING["systemd"]["SystemCallFilter"]["why"]
