"""The router of the Kubernetes manifests finds its servers itself: the real sglang-router 0.3.2 binary, started
with the manifests' own arguments, against a stand-in Kubernetes API on loopback (TLS, a service account's bearer
token and CA where a pod has them, or a kubeconfig naming them; tests/support/k8s_api.py) and stand-in SGLang
servers (tests/support/router_fixtures.py), each on its own loopback address as each pod has its own IP, all on
the one port the discovery uses.

Pods appear, become ready, go away and come back while a client sends requests without pause: once a server is
ready, no request fails, and the router asks the API for nothing but the pods of its namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from support import k8s_api
from support.bench_fixtures import FAKE_SGLANG, free_port
from support.router_fixtures import SOURCE, StandIn, get_json, wait_until

NAMESPACE = "inference"
TOKEN = "sa-token-" + os.urandom(8).hex()
KEY = "rk-" + os.urandom(12).hex()
MANIFEST = REPO / "kubernetes" / "one-node" / "router.yaml"


def manifest_router() -> dict:
    (deployment,) = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def with_values(args: list[str], **values: str) -> list[str]:
    """The manifest's args with some flags' values replaced (`policy="round_robin"` for --policy)."""
    args = list(args)
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        args[args.index(flag) + 1] = value
    return args


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
                with urllib.request.urlopen(request, timeout=30) as response:
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
        self.thread.join(60)


# Where a pod's service account is (kube-rs's in-cluster configuration reads these, with KUBERNETES_SERVICE_HOST
# and KUBERNETES_SERVICE_PORT); /var/run is /run.
SERVICE_ACCOUNT = "/run/secrets/kubernetes.io/serviceaccount"


def in_a_pod(account: Path, argv: list[str]) -> list[str]:
    """argv run as in a pod: in a mount namespace of its own whose /run holds the service account's token, CA and
    namespace at the fixed paths Kubernetes mounts them."""
    script = (
        f'mount -t tmpfs pod-run /run && mkdir -p {SERVICE_ACCOUNT} && cp {account}/* {SERVICE_ACCOUNT}/ && exec "$@"'
    )
    return ["unshare", "-rm", "sh", "-c", script, "sh", *argv]


@pytest.mark.parametrize("client", ["in-cluster", "kubeconfig"])
def test_the_router_adds_ready_pods_drops_deleted_ones_and_no_request_fails(tmp_path, client):
    """client: how kube::Client::try_default() finds the API: the pod's service account (in-cluster), or a
    kubeconfig naming the same CA and token file."""
    for tool in ("openssl", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (.ci/run installs it): the router's discovery was NOT run")
    ca, cert, key = k8s_api.make_certificates(tmp_path)
    api = k8s_api.Cluster(namespace=NAMESPACE, token=TOKEN)
    server, api_port = k8s_api.serve(api, cert, key)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    (account / "ca.crt").write_bytes(ca.read_bytes())
    (account / "namespace").write_text(NAMESPACE)
    (tmp_path / "key").write_text(KEY)
    (tmp_path / "key").chmod(0o400)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "api-key").write_text(KEY)
    (credentials / "api-key").chmod(0o400)

    container = manifest_router()
    args = container["args"]
    selector = dict(
        a.split("=", 1) for a in args[args.index("--selector") + 1 : args.index("--service-discovery-port")]
    )
    port, router_port = free_port(), free_port()
    router_url = f"http://127.0.0.1:{router_port}"
    # The manifest's arguments; loopback addresses, and round robin (not cache-aware) so that every server
    # provably gets requests; health checked every second (production: a minute) so the test takes seconds.
    argv = with_values(
        args, host="127.0.0.1", port=str(router_port), prometheus_host="127.0.0.1", prometheus_port=str(free_port()),
        service_discovery_port=str(port), service_discovery_namespace=NAMESPACE, policy="round_robin",
        health_check_interval_secs="1", health_failure_threshold="1", health_success_threshold="1",
        cb_timeout_duration_secs="1", shutdown_grace_period_secs="5",
    )  # fmt: skip
    assert "$(POD_NAMESPACE)" not in argv and "--worker-urls" not in argv
    # The pod's environment (the key by CREDENTIALS_DIRECTORY, as the manifest's init container leaves it), no
    # proxy (sglang-router's Kubernetes client refuses one, docs/kubernetes.md), the hub unreachable.
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(PYTHONPATH=str(SOURCE), CREDENTIALS_DIRECTORY=str(credentials),
               HF_ENDPOINT=f"http://127.0.0.1:{free_port()}", HOME=str(tmp_path))  # fmt: skip
    env.pop("KUBECONFIG", None)
    command = [sys.executable, "-m", "sglang_eagle3.serving.router_main", *argv]
    if client == "in-cluster":
        env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(api_port))
        command = in_a_pod(account, command)
    else:
        env["KUBECONFIG"] = str(k8s_api.kubeconfig(tmp_path / "kubeconfig", api_port, ca, account / "token", NAMESPACE))
    log = tmp_path / "router.log"
    servers = {
        "a": PodServer(tmp_path, "a", "127.0.0.2", port, API_KEY_FILE=str(tmp_path / "key"), RATE="400"),
        "b": PodServer(tmp_path, "b", "127.0.0.3", port, API_KEY_FILE=str(tmp_path / "key"), RATE="400"),
    }
    router = None

    def workers() -> dict[str, bool]:
        assert router.poll() is None, f"the router exited:\n{log.read_text()[-3000:]}"
        try:
            listed = get_json(f"{router_url}/workers", {"Authorization": f"Bearer {KEY}"})["workers"]
        except (urllib.error.URLError, OSError):
            return {}
        return {w["url"]: w["is_healthy"] for w in listed}

    def served(name: str) -> int:
        return len(servers[name].served())

    try:
        # A server pod that is running but not ready (loading), a LeaderWorkerSet worker (rank 1: not selected),
        # and a pod of something else.
        api.add_pod("sglang-eagle3-0", "127.0.0.2", selector, ready=False)
        api.add_pod("sglang-eagle3-1-1", "127.0.0.9", {**selector, "sglang-eagle3/rank": "1"}, ready=True)
        api.add_pod("other", "127.0.0.8", {"app.kubernetes.io/name": "other"}, ready=True)
        router = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
        wait_until(lambda: any(r[2].get("watch") == "true" for r in api.requests), 30, "the router's pod watch")
        time.sleep(1)
        assert workers() == {}, "a pod that is not ready is not a worker"

        # a: the server comes up, its pod becomes ready -> added; from here on no request may fail
        servers["a"].start()
        api.set_ready("sglang-eagle3-0")
        wait_until(lambda: workers() == {servers["a"].url: True}, 30, "a's pod added")
        with Traffic(router_url) as traffic:
            wait_until(lambda: served("a") >= 3, 30, "requests served by a")
            # b: appears not ready (nothing changes), then ready -> added and used
            servers["b"].start()
            api.add_pod("sglang-eagle3-1", "127.0.0.3", selector, ready=False)
            time.sleep(2)
            assert set(workers()) == {servers["a"].url}
            api.set_ready("sglang-eagle3-1")
            wait_until(lambda: set(workers()) == {servers["a"].url, servers["b"].url}, 30, "b's pod added")
            wait_until(lambda: served("b") >= 3, 30, "requests served by b")
            # a goes away: deleted (the router drops it), then its server stops and the pod is gone
            api.delete_pod("sglang-eagle3-0")
            wait_until(lambda: set(workers()) == {servers["b"].url}, 30, "a's pod dropped")
            servers["a"].stop()
            api.finish_delete("sglang-eagle3-0")
            during = served("b")
            wait_until(lambda: served("b") >= during + 3, 30, "requests served by b alone")
            # and comes back: a new pod on the same address, loading, then ready -> added again
            servers["a"].start()
            api.add_pod("sglang-eagle3-0", "127.0.0.2", selector, ready=False)
            time.sleep(2)
            assert set(workers()) == {servers["b"].url}
            api.set_ready("sglang-eagle3-0")
            wait_until(lambda: set(workers()) == {servers["a"].url, servers["b"].url}, 30, "a's new pod added")
            wait_until(lambda: len(servers["a"].served(2)) >= 3, 30, "requests served by a's new server")
            readiness = urllib.request.urlopen(f"{router_url}/readiness", timeout=5).status
    finally:
        if router is not None and router.poll() is None:
            router.terminate()
            router.wait(30)
        for s in servers.values():
            s.stop()
        k8s_api.stop(api, server)

    failed = [r for r in traffic.results if r[1] != 200]
    assert not failed, f"{len(failed)} of {len(traffic.results)} requests failed: {failed[:5]}"
    assert len(traffic.results) >= 12 and readiness == 200
    # every request answered by a server that had it (the key reached them: they answer 401 without it)
    answered = {row["prompt"] for s in servers.values() for row in s.served()}
    assert {r[2] for r in traffic.results} <= answered
    # what it asked the API: the pods of its own namespace, listed and watched, with its token, nothing else
    assert api.requests and {(method, path, status) for method, path, _, status in api.requests} == {
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", 200)}  # fmt: skip
    assert {"watch" if query.get("watch") == "true" else "list" for _, _, query, _ in api.requests} == {"list", "watch"}
    text = log.read_text()
    assert "127.0.0.9" not in text and "127.0.0.8" not in text, "the rank-1 worker and the other pod are not added"
    assert KEY not in text and TOKEN not in text
