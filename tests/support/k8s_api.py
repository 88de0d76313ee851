"""A stand-in Kubernetes API server on loopback, enough for sglang-router's service discovery.

The router (Rust, kube-rs) builds its client with `kube::Client::try_default()`: a kubeconfig, else the
in-cluster service account (sgl-project/sglang sgl-router/src/service_discovery.rs). It then runs a pod
watcher on one namespace: a LIST of the pods, then a WATCH from the list's resourceVersion, and filters the
pods by its selector itself. This stand-in serves exactly that, over TLS with a certificate made here and a
bearer token, as the real API server does for a pod's service account:

- GET /api/v1/namespaces/<ns>/pods            a PodList of the pods now (limit/continue: one page)
- GET /api/v1/namespaces/<ns>/pods?watch=...  the events after the given resourceVersion, one JSON per line,
                                              as they happen, until timeoutSeconds or shutdown
- anything else, or another namespace         403, as a Role that grants get/list/watch on pods there does;
- no or a wrong token                         401.

Every request is recorded (method, path, query, status), so a test can check what the router asked for.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (rustls refuses a CA used as a server's
    certificate). Returns (ca.crt, server.crt, server.key)."""
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=stand-in-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    run("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=kube-apiserver")
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                          "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "1", "-extfile", str(extensions))  # fmt: skip
    return ca, cert, key


@dataclass
class Cluster:
    namespace: str
    token: str
    version: int = 1
    pods: dict[str, dict] = field(default_factory=dict)
    events: list[tuple[int, str, dict]] = field(default_factory=list)  # (resourceVersion, type, pod)
    requests: list[tuple[str, str, dict, int]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    stopping: bool = False

    def _emit(self, kind: str, pod: dict) -> None:
        with self.changed:
            self.version += 1
            pod = json.loads(json.dumps(pod))
            pod["metadata"]["resourceVersion"] = str(self.version)
            if kind == "DELETED":
                self.pods.pop(pod["metadata"]["name"], None)
            else:
                self.pods[pod["metadata"]["name"]] = pod
            self.events.append((self.version, kind, pod))
            self.changed.notify_all()

    def add_pod(self, name: str, ip: str, labels: dict[str, str], ready: bool = False) -> None:
        """A pod that is scheduled and running (its containers started), ready or not yet."""
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "uid": f"uid-{name}-{self.version}",
                         "labels": labels},
            "spec": {"containers": [{"name": "server", "image": "stand-in"}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }  # fmt: skip
        self._emit("ADDED", pod)

    def set_ready(self, name: str, ready: bool = True) -> None:
        pod = json.loads(json.dumps(self.pods[name]))
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        self._emit("MODIFIED", pod)

    def delete_pod(self, name: str) -> None:
        """A graceful delete, as the API server reports it: the pod gets a deletionTimestamp (MODIFIED) while its
        containers stop; DELETED once they have (finish_delete)."""
        pod = json.loads(json.dumps(self.pods[name]))
        pod["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._emit("MODIFIED", pod)

    def finish_delete(self, name: str) -> None:
        self._emit("DELETED", self.pods[name])


def serve(cluster: Cluster, cert: Path, key: Path) -> tuple[ThreadingHTTPServer, int]:
    """Start the stand-in on 127.0.0.1 (a free port) in a thread; returns the server and its port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the test reads cluster.requests
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if self.headers.get("Authorization") != f"Bearer {cluster.token}":
                status = 401
            elif url.path != f"/api/v1/namespaces/{cluster.namespace}/pods":
                status = 403  # a namespaced Role: pods of this namespace only
            else:
                status = 200
            cluster.requests.append(("GET", url.path, query, status))
            if status != 200:
                return self._answer(status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                             "code": status, "reason": "Forbidden" if status == 403 else "Unauthorized",
                                             "message": f"stand-in API: {status}"})  # fmt: skip
            if query.get("watch") in ("true", "1"):
                return self._watch(int(query.get("resourceVersion") or 0), float(query.get("timeoutSeconds", 290)))
            with cluster.changed:
                items = list(cluster.pods.values())
                version = cluster.version
            self._answer(200, {"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(version)}, "items": items})  # fmt: skip

        def _watch(self, since: int, timeout: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + timeout
            sent = since
            try:
                while time.monotonic() < deadline:
                    with cluster.changed:
                        cluster.changed.wait_for(
                            lambda since=sent: cluster.stopping or cluster.version > since, timeout=1
                        )
                        if cluster.stopping:
                            break
                        due = [e for e in cluster.events if e[0] > sent]
                    for version, kind, pod in due:
                        line = json.dumps({"type": kind, "object": pod}).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                        sent = version
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def stop(cluster: Cluster, server: ThreadingHTTPServer) -> None:
    with cluster.changed:
        cluster.stopping = True
        cluster.changed.notify_all()
    server.shutdown()
    server.server_close()


def kubeconfig(path: Path, port: int, ca: Path, token_file: Path, namespace: str) -> Path:
    """A kubeconfig as a pod's service account gives the client: the API's address, its CA, the token file."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "stand-in", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                      "certificate-authority": str(ca)}}],
        "users": [{"name": "router", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "pod", "context": {"cluster": "stand-in", "user": "router", "namespace": namespace}}],
    }))  # fmt: skip
    return path
