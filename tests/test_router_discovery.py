"""The router of the Kubernetes manifests keeps up with a cluster: the real smg binary (through sglang-eagle3-router),
started with the manifests' own arguments and bound by their own Role and RoleBinding, against a stand-in Kubernetes
API on loopback that answers as an API server does (tests/support/k8s_api.py: list and watch with resourceVersions,
label selectors, bookmarks, watches it closes, 410 Expired, RBAC, an outage), and stand-in SGLang servers
(tests/support/router_fixtures.py), each on its own loopback address as each pod has its own IP, all on the one port
the discovery uses.

The events are not a list of the ones we expect: they are every watch event type the Kubernetes API defines
(WATCH_EVENT_TYPES, cross-checked with the API's own OpenAPI schema), every value the schema gives the two pod fields
the router reads (the phase, the Ready condition's status), a deletionTimestamp, labels leaving and joining the
selector, and what a server does to a watch (closes it, expires it, goes away). The test fails when one is not sent.
After each event, within the bound docs/kubernetes.md states (BOUNDS), the router routes to exactly the pods that
are present, Running and Ready; no request reaches another pod after that bound, and no request fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from support import k8s_api
from support.bench_fixtures import FAKE_SGLANG, free_port
from support.own_resources import refused_port
from support.router_fixtures import SOURCE, StandIn, get_json, wait_until

KEY = "rk-" + os.urandom(12).hex()
MANIFEST = REPO / "kubernetes" / "one-node" / "router.yaml"
DOCS = REPO / "docs" / "kubernetes.md"
# The watch event types of the Kubernetes API: kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/watch/watch.go
# (commit 04791b49), `const ( Added EventType = "ADDED" ... )`. The OpenAPI schema names four of them in WatchEvent's
# description (test_the_event_types_are_the_apis); BOOKMARK is sent only to a watch that asks (allowWatchBookmarks).
WATCH_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")
# What a server does to a watch besides sending events: ends it (timeoutSeconds, its own request timeout), answers
# 410 Expired for a resourceVersion it no longer has (an ERROR event: the client must list again), goes away.
SERVER_BEHAVIOURS = ("close", "expire", "cut")
# Seconds from an event to the router's new state, the bounds docs/kubernetes.md states ("How the router follows the
# cluster"): a pod that leaves (not Ready, not Running, terminating, gone, no longer selected) gets no new request
# after `out`; a pod that becomes Running and Ready is routed within `in`; one Ready again inside the router's drain
# of it (5 s) within `periodic` (smg's periodic reconcile, every 60 s); after an outage of the API, within
# `reconnect` of its return (the client's backoff between retries grows to 30 s, with jitter, and a first answer of
# 410 Expired costs one more).
BOUNDS = {"out": 10, "in": 10, "periodic": 75, "reconnect": 90}


def schema_definitions() -> dict:
    import kubernetes_validate

    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    newest = max((p for p in schemas.glob("v*-local")), key=lambda p: tuple(int(x) for x in p.name[1:-6].split(".")))
    return json.loads((newest / "_definitions.json").read_text())["$defs"]


def pod_phases() -> list[str]:
    """The pod phases the Kubernetes API defines (PodStatus.phase's description names each: 'Pending: ...')."""
    text = schema_definitions()["io.k8s.api.core.v1.PodStatus"]["properties"]["phase"]["description"]
    return re.findall(r"(?:^|\s)([A-Z][a-z]+): (?:The|All|For)", text)


def condition_statuses() -> list[str]:
    """A pod condition's statuses ('Can be True, False, Unknown.')."""
    text = schema_definitions()["io.k8s.api.core.v1.PodCondition"]["properties"]["status"]["description"]
    return re.search(r"Can be ([A-Za-z, ]+)\.", text).group(1).replace(" ", "").split(",")


def test_the_event_types_are_the_apis():
    """The definition above holds every event type the API's schema names, and the schema gives the values the test
    walks through."""
    described = schema_definitions()["io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"]["properties"]["object"]
    named = {t.upper() for t in re.findall(r"Type is (\w+)(?: or (\w+))?", described["description"]) for t in t if t}
    assert named and named <= set(WATCH_EVENT_TYPES), named
    assert pod_phases() == ["Pending", "Running", "Succeeded", "Failed", "Unknown"]
    assert condition_statuses() == ["True", "False", "Unknown"]


# -- the pieces -----------------------------------------------------------------------------------------------------


def manifest_objects(kind: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d["kind"] == kind]


def manifest_router() -> dict:
    (deployment,) = manifest_objects("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def with_values(args: list[str], **values: str) -> list[str]:
    """The manifest's args with some flags' values replaced (`policy="round_robin"` for --policy)."""
    args = list(args)
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        args[args.index(flag) + 1] = value
    return args


def selector_of(args: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in args[args.index("--selector") + 1 : args.index("--service-discovery-port")])


class PodServer(StandIn):
    """A stand-in SGLang server on a pod's own address (127.0.0.x) and the port every pod serves on."""

    def __init__(self, directory: Path, name: str, ip: str, port: int, **env: str):
        super().__init__(directory, name, **env)
        self.ip, self.port, self.url = ip, port, f"http://{ip}:{port}"

    def start(self) -> PodServer:
        self.lives += 1
        env = {**os.environ, "PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_SEND_LOG": str(self.log(self.lives)),
               **{f"FAKE_SGLANG_{k}": str(v) for k, v in self.env.items()}}  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--host", self.ip, "--port", str(self.port),
             "--model-path", "fake/kimi"], env=env, start_new_session=True,
        )  # fmt: skip
        wait_until(self._healthy, 20, f"stand-in {self.name} on {self.url}")
        return self

    def received(self) -> list[float]:
        """When each request it answered arrived (CLOCK_MONOTONIC, the clock of this process's time.monotonic)."""
        return [row["received"] for row in self.served()]


class Traffic:
    """One client sending /generate requests through the router one after another, without pause."""

    def __init__(self, url: str):
        self.url, self.results, self.stopping = url, [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            n += 1
            body = json.dumps({"text": f"prompt {n}", "sampling_params": {"max_new_tokens": 4}}).encode()
            request = urllib.request.Request(f"{self.url}/generate", body, method="POST", headers={
                "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    self.results.append((time.monotonic(), response.status, f"prompt {n}"))
            except urllib.error.HTTPError as err:
                self.results.append((time.monotonic(), err.code, err.read()[:200]))
            except OSError as err:
                self.results.append((time.monotonic(), 0, repr(err)))

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(90)


# Where a pod's service account is (kube-rs's in-cluster configuration reads these, with KUBERNETES_SERVICE_HOST
# and KUBERNETES_SERVICE_PORT); /var/run is /run.
SERVICE_ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"


def in_a_pod(account: Path, argv: list[str]) -> list[str]:
    """argv run as in a pod: in a mount namespace of its own whose /run holds the service account's token, CA and
    namespace at the fixed paths Kubernetes mounts them, and with no name server (an empty /etc/resolv.conf): the
    router's NetworkPolicy lets it reach no DNS."""
    (account.parent / "resolv.conf").write_text("")
    script = (
        f"mount -t tmpfs pod-run /run && mkdir -p {SERVICE_ACCOUNT} && cp {account}/* {SERVICE_ACCOUNT}/"
        f' && mount --bind {account.parent}/resolv.conf /etc/resolv.conf && exec "$@"'
    )
    return ["unshare", "-rm", "sh", "-c", script, "sh", *argv]


def needs_tools(*tools: str) -> None:
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (.ci/run installs it): the router's discovery was NOT run")


@dataclass
class Setup:
    """The stand-in API with the manifests' RBAC objects in `namespace`, and the router in front of it."""

    tmp: Path
    namespace: str
    rbac: list[dict]
    client: str = "kubeconfig"  # or "in-cluster": the pod's service-account files
    router_args: dict = field(default_factory=dict)
    account: str = "sglang-router"

    def __post_init__(self):
        self.token = "sa-token-" + os.urandom(8).hex()
        self.ca, cert, key = k8s_api.make_certificates(self.tmp)
        user = f"system:serviceaccount:{self.namespace}:{self.account}"
        self.api = k8s_api.Cluster(namespace=self.namespace, tokens={self.token: user}, rbac=self.rbac,
                                   max_watch_seconds=20, bookmark_every=5)  # fmt: skip
        self.server = k8s_api.Server(self.api, cert, key)
        args = manifest_router()["args"]
        self.selector = selector_of(args)
        self.port, router_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{router_port}"
        # The manifest's arguments; loopback addresses, and round robin (not cache-aware) so that every server
        # provably gets requests. Health checks, retries and the rest as in production.
        values = dict(host="127.0.0.1", port=str(router_port), prometheus_host="127.0.0.1",
                      prometheus_port=str(free_port()), service_discovery_port=str(self.port),
                      service_discovery_namespace=self.namespace, policy="round_robin",
                      shutdown_grace_period_secs="5", **self.router_args)  # fmt: skip
        argv = with_values(args, **values)
        assert "$(POD_NAMESPACE)" not in argv and "--worker-urls" not in argv
        (self.tmp / "key").write_text(KEY)
        (self.tmp / "key").chmod(0o400)
        credentials = self.tmp / "credentials"
        credentials.mkdir()
        (credentials / "api-key").write_text(KEY)
        (credentials / "api-key").chmod(0o400)
        account = self.tmp / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(self.token)
        (account / "ca.crt").write_bytes(self.ca.read_bytes())
        (account / "namespace").write_text(self.namespace)
        # The pod's environment (the key by CREDENTIALS_DIRECTORY, as the manifest's init container leaves it), no
        # proxy, the hub unreachable.
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "KUBECONFIG"}
        # The hub: a port this harness holds and never listens on, refused for as long as the router runs.
        self.hub = contextlib.ExitStack()
        hub_port = self.hub.enter_context(refused_port())
        env.update(PYTHONPATH=str(SOURCE), CREDENTIALS_DIRECTORY=str(credentials),
                   HF_ENDPOINT=f"http://127.0.0.1:{hub_port}", HOME=str(self.tmp))  # fmt: skip
        self.command = [sys.executable, "-m", "sglang_eagle3.serving.router_main", *argv]
        if self.client == "in-cluster":
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.server.port))
            self.command = in_a_pod(account, self.command)
        else:
            env["KUBECONFIG"] = str(
                k8s_api.kubeconfig(self.tmp / "kubeconfig", self.server.port, self.ca, account / "token",
                                   self.namespace))  # fmt: skip
        self.env = env
        self.log = self.tmp / "router.log"
        self.router: subprocess.Popen | None = None
        self.servers: dict[str, PodServer] = {}

    def pod_server(self, name: str, ip: str) -> PodServer:
        self.servers[name] = PodServer(self.tmp, name, ip, self.port, API_KEY_FILE=str(self.tmp / "key"), RATE="400")
        return self.servers[name]

    def start(self) -> None:
        self.router = subprocess.Popen(self.command, env=self.env, stdout=self.log.open("w"),
                                       stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        wait_until(lambda: any(r[2].get("watch") in ("true", "1") for r in self.api.requests) or self.forbidden(),
                   60, "the router's pod watch")  # fmt: skip

    def forbidden(self) -> bool:
        return any(status == 403 for *_, status in self.api.requests)

    def workers(self) -> dict[str, bool]:
        """{pod IP: healthy} as the router sees them (GET /workers); a worker it drains is listed unhealthy."""
        assert self.router.poll() is None, f"the router exited:\n{self.log.read_text()[-3000:]}"
        try:
            listed = get_json(f"{self.url}/workers", {"Authorization": f"Bearer {KEY}"})["workers"]
        except (urllib.error.URLError, OSError):
            return {}
        return {re.sub(r"^\w+://|:\d+$", "", w["url"]): w["is_healthy"] for w in listed}

    def routed(self) -> set[str]:
        return {ip for ip, healthy in self.workers().items() if healthy}

    def stop(self) -> None:
        if self.router is not None and self.router.poll() is None:
            self.router.terminate()
            self.router.wait(30)
        for s in self.servers.values():
            s.stop()
        self.server.stop()
        self.hub.close()


def rbac_applied_in(namespace: str, objects: list[dict]) -> list[dict]:
    """The Roles and RoleBindings as `kubectl apply -n NAMESPACE` (and an Argo CD destination) puts them: a namespaced
    object without a namespace goes to NAMESPACE; one with another namespace is refused by kubectl."""
    out = []
    for o in objects:
        if o["kind"] in ("Role", "RoleBinding"):
            o = json.loads(json.dumps(o))
            given = o["metadata"].setdefault("namespace", namespace)
            assert given == namespace, f"kubectl apply -n {namespace} refuses {o['kind']} in {given}"
            out.append(o)
    return out


# -- every event -----------------------------------------------------------------------------------------------------


class Timeline:
    """What the test did and when, and when the router got there: the table docs/kubernetes.md shows."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.rows: list[tuple[str, str, float]] = []  # (event, bound name, seconds the router took)
        self.unroutable: dict[str, list[list[float]]] = {}  # pod IP -> [from, until] it must get no new request

    def expect(self, event: str, routed: set[str], bound: str, since: float) -> float:
        """Wait until the router routes to exactly `routed`; fail past the bound. Returns the seconds it took."""
        deadline = since + BOUNDS[bound]
        while (now := time.monotonic()) < deadline + 0.5:
            if self.setup.routed() == routed:
                took = now - since
                assert took <= BOUNDS[bound], f"{event}: {took:.1f} s, over the bound of {BOUNDS[bound]} s"
                self.rows.append((event, bound, took))
                return took
            time.sleep(0.05)
        raise AssertionError(f"{event}: the router routes to {self.setup.routed()}, not {routed}, after "
                             f"{BOUNDS[bound]} s ({bound})")  # fmt: skip

    def leaves(self, ip: str, at: float) -> None:
        self.unroutable.setdefault(ip, []).append([at + BOUNDS["out"], float("inf")])

    def returns(self, ip: str, at: float) -> None:
        self.unroutable[ip][-1][1] = at

    def fully_removed(self, ip: str) -> None:
        """Wait until the router has removed the pod's worker (its 5 s drain over), and 2 s more: a pod Ready again
        no sooner, as the manifests' readiness probe allows (one period, 15 s, after it failed) and a reloaded server
        does after minutes or hours, is an addition. (Sooner, inside the drain: the last step, `periodic`.)"""
        wait_until(lambda: ip not in self.setup.workers(), BOUNDS["out"] + 10, f"{ip}'s worker removed")
        time.sleep(2)


def test_the_router_follows_every_kind_of_cluster_event_and_no_request_fails(tmp_path):
    needs_tools("openssl")
    namespace = "inference"
    setup = Setup(tmp_path, namespace, rbac_applied_in(namespace, [*manifest_objects("Role"),
                                                                  *manifest_objects("RoleBinding")]))  # fmt: skip
    api, selector = setup.api, setup.selector
    t = Timeline(setup)
    ips = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4", "d": "127.0.0.5"}
    for name, ip in ips.items():
        setup.pod_server(name, ip).start()
    others = {"app.kubernetes.io/name": "sglang-eagle3", "app.kubernetes.io/component": "server"}
    try:
        # Pods the selector does not take: a LeaderWorkerSet worker (rank 1) and another application's pod.
        api.start("sglang-eagle3-1-1", "127.0.0.9", {**others, "sglang-eagle3/rank": "1"}, ready=True)
        api.start("other", "127.0.0.8", {"app.kubernetes.io/name": "other"}, ready=True)
        setup.start()

        # a: created (ADDED, Pending, no IP), scheduled (Pending with its IP: the init containers fetch the weights),
        # Running but not Ready (loading), then Ready
        api.create("sglang-eagle3-0", selector)
        api.update("sglang-eagle3-0", phase="Pending", ip=ips["a"])
        api.update("sglang-eagle3-0", phase="Running", ready="False")
        time.sleep(2)
        assert setup.workers() == {}, "a pod that is not Ready is not a worker"
        now = time.monotonic()
        api.update("sglang-eagle3-0", ready="True")
        t.expect("a pod becomes Ready (MODIFIED)", {ips["a"]}, "in", now)

        with Traffic(setup.url) as traffic:
            now = time.monotonic()
            api.start("sglang-eagle3-1", ips["b"], selector, ready=True)
            t.expect("a new pod, Running and Ready (ADDED, MODIFIED)", {ips["a"], ips["b"]}, "in", now)
            api.start("sglang-eagle3-2", ips["c"], selector, ready=True)
            t.expect("a third pod", {ips["a"], ips["b"], ips["c"]}, "in", now)
            all3 = {ips["a"], ips["b"], ips["c"]}

            def away_and_back(event: str, leave, back, name: str = "sglang-eagle3-1", ip: str = ips["b"]) -> None:
                now = time.monotonic()
                leave()
                t.leaves(ip, now)
                t.expect(event, all3 - {ip}, "out", now)
                t.fully_removed(ip)
                now = time.monotonic()
                back()
                t.returns(ip, now)
                t.expect(f"{event}, then Running and Ready again", all3, "in", now)

            # every Ready status the schema defines but True, and every phase but Running (Ready left True: the
            # phase alone must take the pod out)
            for status in condition_statuses():
                if status != "True":
                    away_and_back(f"Ready {status} (MODIFIED)", lambda s=status: api.update("sglang-eagle3-1", ready=s),
                                  lambda: api.update("sglang-eagle3-1", ready="True"))  # fmt: skip
            for phase in pod_phases():
                if phase != "Running":
                    away_and_back(f"phase {phase} (MODIFIED)", lambda p=phase: api.update("sglang-eagle3-1", phase=p),
                                  lambda: api.update("sglang-eagle3-1", phase="Running"))  # fmt: skip
            # labels: out of the selector (the watch sends DELETED), back in (ADDED)
            away_and_back("labels leave the selector (DELETED for the watch)",
                          lambda: api.update("sglang-eagle3-1", labels=others),
                          lambda: api.update("sglang-eagle3-1", labels=selector))  # fmt: skip

            # a graceful delete: deletionTimestamp (MODIFIED), the server stops, DELETED; the StatefulSet's new pod
            # (a new uid, the same name and here the same address) loads and becomes Ready
            def graceful():
                api.update("sglang-eagle3-1", terminating=True)
                t.expect("deletionTimestamp (MODIFIED: a graceful delete)", all3 - {ips["b"]}, "out", now0[0])
                setup.servers["b"].stop()
                api.delete("sglang-eagle3-1")

            def recreated(name: str, server: str):
                def back():
                    setup.servers[server].start()
                    api.start(name, ips[server], selector, ready=True)

                return back

            now0 = [time.monotonic()]
            away_and_back("DELETED after the graceful delete", graceful, recreated("sglang-eagle3-1", "b"))
            # no warning: DELETED with no MODIFIED before it (kubectl delete --force, node lost, pod GC), the server
            # killed with it
            away_and_back("DELETED with no warning (a force delete)",
                          lambda: (setup.servers["c"].kill(), api.delete("sglang-eagle3-2")),
                          recreated("sglang-eagle3-2", "c"), "sglang-eagle3-2", ips["c"])  # fmt: skip

            # what a server does to the watch: a BOOKMARK, the watch closed, 410 Expired; the next change still
            # arrives (without a new list after a bookmark or a close; with one after 410)
            next_request = {}
            for event, happen in (("after a BOOKMARK", api.bookmark), ("after the server closed the watch",
                                                                       api.close_watches),
                                  ("after 410 Expired (a new list)", api.expire_watches)):  # fmt: skip
                before = len(api.requests)
                happen()
                time.sleep(1)
                away_and_back(f"Ready False {event}", lambda: api.update("sglang-eagle3-1", ready="False"),
                              lambda: api.update("sglang-eagle3-1", ready="True"))  # fmt: skip
                next_request[happen.__name__] = api.requests[before][2] if len(api.requests) > before else None

            # the API unreachable for 15 s: meanwhile c's pod is lost (its server killed, the pod deleted without
            # warning) and d's appears Ready; what it missed is compacted away (410 when it comes back: a new list)
            with setup.server.down():
                down = time.monotonic()
                setup.servers["c"].kill()
                api.delete("sglang-eagle3-2")
                api.start("sglang-eagle3-3", ips["d"], selector, ready=True)
                t.leaves(ips["c"], float("inf"))  # the router cannot know: requests to c fail and are retried
                time.sleep(15)
                during = setup.routed()
                api.compact()
            back = time.monotonic()
            t.expect(f"the API back after {back - down:.0f} s: the lost pod out, the new one in",
                     {ips["a"], ips["b"], ips["d"]}, "reconnect", back)  # fmt: skip
            all3 = {ips["a"], ips["b"], ips["d"]}

            # Ready again inside the router's drain of it (a flap shorter than the readiness probe's period can make)
            now = time.monotonic()
            api.update("sglang-eagle3-1", ready="False")
            t.leaves(ips["b"], now)
            time.sleep(1)
            now = time.monotonic()
            api.update("sglang-eagle3-1", ready="True")
            t.returns(ips["b"], now)
            t.expect("Ready False, then True again 1 s later (inside the drain)", all3, "periodic", now)
            readiness = urllib.request.urlopen(f"{setup.url}/readiness", timeout=5).status
        log = setup.log.read_text()
    finally:
        setup.stop()

    print("\n" + "\n".join(f"{took:6.1f} s  (bound {BOUNDS[bound]:>2} s)  {event}" for event, bound, took in t.rows))
    assert during == {ips["a"], ips["b"], ips["c"]}, "while the API is away the router keeps what it knew"
    # a closed watch is resumed from its resourceVersion; after 410 the router lists again
    assert next_request["close_watches"]["watch"] == "true" and next_request["close_watches"]["resourceVersion"]
    assert "watch" not in next_request["expire_watches"], next_request
    # every kind of event was sent, and every way a server ends a watch happened
    sent = Counter(kind for _, kind in api.sent)
    assert set(sent) == set(WATCH_EVENT_TYPES), sent
    assert all(api.endings_seen[how] for how in SERVER_BEHAVIOURS), api.endings_seen
    # no request failed, each was answered by a server that had it (with the key), and none reached a pod after
    # the bound once it left
    failed = [r for r in traffic.results if r[1] != 200]
    assert not failed, f"{len(failed)} of {len(traffic.results)} requests failed: {failed[:5]}"
    assert len(traffic.results) >= 200 and readiness == 200
    answered = {row["prompt"] for s in setup.servers.values() for row in s.served()}
    assert {r[2] for r in traffic.results} <= answered
    for name, server in setup.servers.items():
        for start, end in t.unroutable.get(server.ip, []):
            late = [r for r in server.received() if start < r < end]
            assert not late, f"{name} got {len(late)} request(s) more than {BOUNDS['out']} s after it left"
    # what it asked the API: the pods of its own namespace with its selector, listed and watched, nothing else; a
    # new list after 410
    paths = {(method, path, status) for method, path, _, status in api.requests}
    assert paths == {("GET", f"/api/v1/namespaces/{namespace}/pods", 200)}, paths
    wanted = ",".join(sorted(f"{k}={v}" for k, v in selector.items()))
    assert {",".join(sorted(q["labelSelector"].split(","))) for _, _, q, _ in api.requests} == {wanted}
    assert all(q.get("allowWatchBookmarks") == "true" for _, _, q, _ in api.requests if q.get("watch") == "true")
    assert "127.0.0.9" not in log and "127.0.0.8" not in log, "the rank-1 worker and the other pod are not added"
    assert KEY not in log and setup.token not in log
    # docs/kubernetes.md states these bounds and lists each event
    documented(t)


def documented(t: Timeline) -> None:
    """docs/kubernetes.md's table "How the router follows the cluster" states BOUNDS and each event type."""
    text = DOCS.read_text()
    table = text[text.index("<!-- router-events -->") : text.index("<!-- /router-events -->")]
    for name, seconds in BOUNDS.items():
        assert f"`{name}` {seconds} s" in table, f"docs/kubernetes.md does not state the bound {name} = {seconds} s"
    for kind in (*WATCH_EVENT_TYPES, *pod_phases(), *condition_statuses()):
        assert kind in table, f"docs/kubernetes.md's table has no row for {kind}"


# -- the namespace the objects are applied in --------------------------------------------------------------------


def kustomize(folder: Path) -> list[dict]:
    result = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("how", ["kustomization namespace", "kubectl apply -n", "a subject in default"])
def test_the_router_may_read_the_pods_of_the_namespace_it_is_applied_in(tmp_path, how):
    """Both ways of choosing the namespace: a kustomization's `namespace:` (also Flux's targetNamespace and Argo CD's
    kustomize.namespace, which run the same transformer), and `kubectl apply -k ... -n X` (also an Argo CD or Flux
    destination that leaves the objects' namespace unset). The router, in a pod of that namespace with its service
    account, finds its server; the binding as it was (its subject in `default`) gets 403s and finds none."""
    needs_tools("openssl", "unshare", "kubectl")
    namespace = "team-" + os.urandom(3).hex()
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    resources = [os.path.relpath(REPO / "kubernetes" / "one-node", overlay)]  # kustomize loads only below a root
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources,
        **({"namespace": namespace} if how == "kustomization namespace" else {})}))  # fmt: skip
    objects = kustomize(overlay)
    if how == "kustomization namespace":
        rbac = [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
        assert {o["metadata"]["namespace"] for o in rbac} == {namespace}
    else:
        rbac = rbac_applied_in(namespace, objects)
        if how == "a subject in default":  # the manifests before: the subject's namespace written as default
            for o in rbac:
                for subject in o.get("subjects", []):
                    subject["namespace"] = "default"
    (tmp_path / "run").mkdir()
    setup = Setup(tmp_path / "run", namespace, rbac, client="in-cluster")
    try:
        setup.pod_server("a", "127.0.0.2").start()
        setup.api.start("sglang-eagle3-0", "127.0.0.2", setup.selector, ready=True)
        setup.start()
        if how == "a subject in default":
            time.sleep(3)
            assert setup.workers() == {} and setup.forbidden()
            statuses = {status for *_, status in setup.api.requests}
            assert statuses == {403}, statuses
            return
        wait_until(lambda: setup.routed() == {"127.0.0.2"}, 30, "the pod added")
        request = urllib.request.Request(f"{setup.url}/generate", json.dumps({"text": "hi"}).encode(), headers={
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        assert {status for *_, status in setup.api.requests} == {200}
    finally:
        setup.stop()
