"""A stand-in Kubernetes API server on loopback, for the router's service discovery (a real API server needs a
cluster: etcd, the control plane; these machines have none).

The router (smg, Rust, kube-rs) builds its client with `kube::Client::try_default()`: a kubeconfig, else the pod's
service account. Its reflector LISTs the pods of one namespace with a label selector, WATCHes from the list's
resourceVersion with bookmarks, and lists again when the watch fails. This stand-in answers as an API server does
(kubernetes/kubernetes staging/src/k8s.io/apiserver: the watch cache and its HTTP watch), over TLS with a
certificate made here and a bearer token:

- GET /api/v1/namespaces/<ns>/pods                a PodList of the pods the labelSelector matches, with the
                                                  list's resourceVersion;
- GET ...?watch=1&resourceVersion=N                one JSON event per line, chunked: every change after N as
                                                  ADDED / MODIFIED / DELETED *as the selector sees it* (a pod
                                                  whose labels stop matching is DELETED for this watch),
                                                  BOOKMARKs (allowWatchBookmarks), until timeoutSeconds, the
                                                  server's own limit, close_watches() or shutdown;
- a resourceVersion older than the last compaction  an ERROR event with a 410 Expired Status (the client must list
  (compact(), expire_watches())                   again), as the HTTP watch of a real server sends it;
- RBAC                                            a token is a service account's identity; a request is allowed
                                                  as the RBAC authorizer allows it, from the Roles and
                                                  RoleBindings given (the manifests' own), a binding's
                                                  ServiceAccount subject without a namespace meaning the
                                                  binding's (pkg/registry/rbac/validation/rule.go
                                                  appliesToUser); else 403 with the API server's message;
                                                  an unknown token: 401;
- unreachable() ... reachable()                    the listening socket closed (connection refused) and every
                                                  open watch cut, then the same port open again.

Every request is recorded (method, path, query, status) and every event sent on a watch (its type), so a test can
check what the router asked for and which kinds of events it was given.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import threading
import time
from collections import Counter
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


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """A label selector's string form (k8s.io/apimachinery pkg/labels/selector.go): requirements joined by commas,
    each `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` or `!k`. An empty selector matches everything."""
    requirements, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            requirements.append(current.strip())
            current = ""
        else:
            current += char
    requirements.append(current.strip())
    for req in filter(None, requirements):
        words = req.split(None, 1)
        if len(words) == 2 and words[1].startswith(("in ", "in(", "notin ", "notin(")):
            operator, values = words[1].split("(", 1)
            wanted = {v.strip() for v in values.rstrip(")").split(",")}
            inside = labels.get(words[0]) in wanted
            if inside != (operator.strip() == "in"):
                return False
        elif "!=" in req:
            k, v = (s.strip() for s in req.split("!=", 1))
            if labels.get(k) == v:
                return False
        elif "=" in req:
            k, v = (s.strip() for s in req.replace("==", "=").split("=", 1))
            if labels.get(k) != v:
                return False
        elif req.startswith("!"):
            if req[1:].strip() in labels:
                return False
        elif req not in labels:
            return False
    return True


@dataclass
class Cluster:
    """The API's state: one namespace's pods, the event history a watch replays, and the RBAC objects."""

    namespace: str
    tokens: dict[str, str]  # bearer token -> user ("system:serviceaccount:<ns>:<name>")
    rbac: list[dict] = field(default_factory=list)  # Roles and RoleBindings, each with metadata.namespace
    max_watch_seconds: float = 1800  # the server's own limit on a watch (kube-apiserver --min-request-timeout)
    bookmark_every: float = 60  # kube-apiserver's watch cache sends a bookmark about once a minute
    version: int = 1
    compacted: int = 0  # a watch from a resourceVersion older than this one is answered 410 Expired
    pods: dict[str, dict] = field(default_factory=dict)
    events: list[tuple[int, str, dict]] = field(default_factory=list)  # (resourceVersion, type, pod)
    requests: list[tuple[str, str, dict, int]] = field(default_factory=list)
    sent: list[tuple[float, str]] = field(default_factory=list)  # (time, event type) of every event sent on a watch
    changed: threading.Condition = field(default_factory=threading.Condition)
    generation: int = 0  # close_watches(), expire_watches() and unreachable() end the watches opened before,
    endings: dict[int, str] = field(default_factory=dict)  # each generation's way: "close", "expire" or "cut"
    endings_seen: Counter = field(default_factory=Counter)  # how watches ended: "close" (timeouts too), "expire", "cut"
    stopping: bool = False
    uids: int = 0

    # -- the objects ---------------------------------------------------------------------------------------

    def _store(self, kind: str, pod: dict) -> None:
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

    def create(self, name: str, labels: dict[str, str]) -> None:
        """A new pod, as the API server stores it: Pending, not yet scheduled, no IP (ADDED)."""
        self.uids += 1
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "uid": f"uid-{name}-{self.uids}",
                         "labels": dict(labels), "creationTimestamp": _now()},
            "spec": {"containers": [{"name": "server", "image": "stand-in"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
        }  # fmt: skip
        self._store("ADDED", pod)

    def update(self, name: str, *, phase: str | None = None, ip: str | None = None, ready: str | None = None,
               labels: dict[str, str] | None = None, terminating: bool = False) -> None:  # fmt: skip
        """A change of the pod's status or metadata (MODIFIED): its phase, IP, Ready condition ("True", "False",
        "Unknown"), labels, or a deletionTimestamp (a graceful delete has begun)."""
        pod = json.loads(json.dumps(self.pods[name]))
        status = pod["status"]
        if phase is not None:
            status["phase"] = phase
        if ip is not None:
            status.update(podIP=ip, podIPs=[{"ip": ip}], hostIP="192.0.2.1")
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        if ready is not None:
            others = [c for c in status.get("conditions", []) if c["type"] not in ("Ready", "ContainersReady")]
            status["conditions"] = others + [{"type": t, "status": ready, "lastTransitionTime": _now()}
                                             for t in ("ContainersReady", "Ready")]  # fmt: skip
        if labels is not None:
            pod["metadata"]["labels"] = dict(labels)
        if terminating:
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
        self._store("MODIFIED", pod)

    def delete(self, name: str) -> None:
        """The pod object removed (DELETED): the end of a graceful delete, or at once for `kubectl delete --force
        --grace-period=0`, the pod garbage collector and a lost node's pods."""
        self._store("DELETED", self.pods[name])

    def start(self, name: str, ip: str, labels: dict[str, str], ready: bool = False) -> None:
        """create(), then scheduled and its containers started (Running, with its IP), ready or not yet."""
        self.create(name, labels)
        self.update(name, phase="Running", ip=ip, ready="True" if ready else "False")

    # -- what a real server does to watches ----------------------------------------------------------------

    def bookmark(self) -> None:
        """A BOOKMARK on every open watch that asked for them (the watch cache sends one about every minute)."""
        with self.changed:
            self.version += 1
            self.events.append((self.version, "BOOKMARK", {}))
            self.changed.notify_all()

    def _end_watches(self, how: str) -> None:
        with self.changed:
            self.endings[self.generation] = how
            self.generation += 1
            self.changed.notify_all()

    def close_watches(self) -> None:
        """End every open watch cleanly, as the server does at timeoutSeconds or its own request timeout."""
        self._end_watches("close")

    def compact(self) -> None:
        """Forget the history (etcd compaction, a watch cache that moved on): a watch from an older
        resourceVersion is answered 410 Expired."""
        with self.changed:
            self.compacted = self.version  # a list now returns this version, from which a watch may start

    def expire_watches(self) -> None:
        """compact(), then an ERROR 410 Expired on every open watch, which ends it (a client too slow for the
        watch cache, or a restarted API server): the client must list again."""
        self.compact()
        self._end_watches("expire")

    # -- RBAC ------------------------------------------------------------------------------------------------

    def allowed(self, user: str, verb: str, namespace: str | None) -> bool:
        """The RBAC authorizer's answer for `verb` on pods (API group "") in `namespace` (None: cluster scope)."""
        if namespace is None:
            return False  # no ClusterRoleBinding is given
        roles = {o["metadata"]["name"]: o for o in self.rbac
                 if o["kind"] == "Role" and o["metadata"].get("namespace") == namespace}  # fmt: skip
        for binding in self.rbac:
            if binding["kind"] != "RoleBinding" or binding["metadata"].get("namespace") != namespace:
                continue
            if not any(_applies_to(user, subject, namespace) for subject in binding.get("subjects", [])):
                continue
            role = roles.get(binding["roleRef"]["name"]) if binding["roleRef"]["kind"] == "Role" else None
            for rule in (role or {}).get("rules", []):
                if ({"", "*"} & set(rule.get("apiGroups", []))) and ({"pods", "*"} & set(rule.get("resources", [])))\
                        and ({verb, "*"} & set(rule.get("verbs", []))):  # fmt: skip
                    return True
        return False


def _applies_to(user: str, subject: dict, binding_namespace: str) -> bool:
    """kubernetes/kubernetes pkg/registry/rbac/validation/rule.go appliesToUser: a ServiceAccount subject's namespace
    defaults to the binding's."""
    if subject.get("kind") == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user == f"system:serviceaccount:{namespace}:{subject['name']}"
    return subject.get("kind") == "User" and user == subject.get("name")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


class Server:
    """The stand-in on 127.0.0.1 over TLS; `unreachable()` closes its port, `reachable()` opens the same port."""

    def __init__(self, cluster: Cluster, cert: Path, key: Path):
        self.cluster = cluster
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.connections: set[socket.socket] = set()  # open client connections (kept alive between requests)
        self.reachable()

    def reachable(self) -> None:
        class Listener(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.httpd = Listener(("127.0.0.1", self.port), _handler(self.cluster, self.connections))
        self.httpd.socket = self.context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def unreachable(self) -> None:
        """Connection refused from now on; every open connection is cut (a watch without its last chunk), as when
        the API server or the network to it goes away."""
        self.cluster._end_watches("cut")
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd = None
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        with self.cluster.changed:
            self.cluster.stopping = True
            self.cluster.changed.notify_all()
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()

    @contextlib.contextmanager
    def down(self):
        self.unreachable()
        try:
            yield
        finally:
            self.reachable()


def _handler(cluster: Cluster, connections: set):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            connections.add(self.connection)

        def finish(self):
            connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

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
            watch = query.get("watch") in ("true", "1")
            verb = "watch" if watch else "list"
            parts = url.path.strip("/").split("/")
            # /api/v1/namespaces/<ns>/pods, or /api/v1/pods (every namespace: cluster scope)
            namespace = parts[3] if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] else None
            pods_path = parts[-1:] == ["pods"] and (namespace is not None or parts == ["api", "v1", "pods"])
            user = cluster.tokens.get(self.headers.get("Authorization", "").removeprefix("Bearer "))
            if user is None:
                status, body = 401, _status(401, "Unauthorized", "Unauthorized")
            elif not pods_path:
                status, body = 404, _status(404, "NotFound", "the server could not find the requested resource")
            elif not cluster.allowed(user, verb, namespace):
                where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
                status, body = 403, _status(403, "Forbidden", f'pods is forbidden: User "{user}" cannot {verb} '
                                                               f'resource "pods" in API group ""{where}')  # fmt: skip
            else:
                status, body = 200, None
            cluster.requests.append(("GET", url.path, query, status))
            if body is not None:
                return self._answer(status, body)
            if namespace != cluster.namespace:
                return self._answer(200, {"kind": "PodList", "apiVersion": "v1", "items": [],
                                          "metadata": {"resourceVersion": str(cluster.version)}})  # fmt: skip
            selector = query.get("labelSelector", "")
            if watch:
                return self._watch(query, selector)
            with cluster.changed:
                items = [p for p in cluster.pods.values() if selector_matches(selector, p["metadata"]["labels"])]
                version = cluster.version
            self._answer(200, {"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(version)}, "items": items})  # fmt: skip

        def _send(self, event: dict) -> None:
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()
            cluster.sent.append((time.monotonic(), event["type"]))

        def _watch(self, query: dict, selector: str) -> None:
            since = int(query.get("resourceVersion") or 0)
            bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
            timeout = min(float(query.get("timeoutSeconds", cluster.max_watch_seconds)), cluster.max_watch_seconds)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline, next_bookmark = time.monotonic() + timeout, time.monotonic() + cluster.bookmark_every
            with cluster.changed:
                generation = cluster.generation
                expired = since and since < cluster.compacted
                # The pods this watch has seen (those the selector matched at `since`): a label change into or out
                # of the selector is an ADDED or DELETED for it, as the watch cache filters.
                seen = _matching_at(cluster.events, since or cluster.version, selector)
                initial = [] if since else [cluster.pods[n] for n in sorted(seen)]
                sent = since or cluster.version
            how = "close"  # at timeoutSeconds, the server's own limit, or close_watches()
            try:
                if expired:  # the answer is this one event, then the end of the response
                    self._send({"type": "ERROR", "object": _status(
                        410, "Expired", f"too old resource version: {since} ({cluster.compacted})")})  # fmt: skip
                    deadline, how = 0, "expired at start"
                for pod in initial:  # no resourceVersion: the current state first, as ADDED events
                    self._send({"type": "ADDED", "object": pod})
                while time.monotonic() < deadline:
                    with cluster.changed:
                        cluster.changed.wait_for(
                            lambda s=sent: cluster.stopping or cluster.generation != generation
                            or cluster.version > s, timeout=min(1, max(0.01, deadline - time.monotonic())),
                        )  # fmt: skip
                        if cluster.stopping:
                            break
                        if cluster.generation != generation:
                            how = cluster.endings[generation]
                            break
                        due = [e for e in cluster.events if e[0] > sent]
                    for version, kind, pod in due:
                        sent = version
                        if kind == "BOOKMARK":
                            if bookmarks:
                                self._send({"type": "BOOKMARK", "object": _bookmark(version)})
                            continue
                        name, matches = pod["metadata"]["name"], selector_matches(selector, pod["metadata"]["labels"])
                        if kind == "DELETED" or (kind == "MODIFIED" and not matches):
                            if name in seen:
                                seen.discard(name)
                                self._send({"type": "DELETED", "object": pod})
                        elif matches:
                            self._send({"type": "ADDED" if name not in seen else kind, "object": pod})
                            seen.add(name)
                    if bookmarks and time.monotonic() >= next_bookmark:
                        next_bookmark = time.monotonic() + cluster.bookmark_every
                        self._send({"type": "BOOKMARK", "object": _bookmark(sent)})
                if how == "expire":  # an open watch that fell behind: ERROR 410, then the end
                    self._send({"type": "ERROR", "object": _status(
                        410, "Expired", f"too old resource version: {sent} ({cluster.compacted})")})  # fmt: skip
                if how == "cut":  # the connection goes without the last chunk
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                else:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                pass
            finally:
                cluster.endings_seen["expire" if how.startswith("expire") else how] += 1
                self.close_connection = how == "cut"  # else the connection stays, for the client's next request

    return Handler


def _bookmark(version: int) -> dict:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(version)}}


def _matching_at(events: list[tuple[int, str, dict]], version: int, selector: str) -> set[str]:
    """The pods the selector matched at `version`, from the history."""
    matching: set[str] = set()
    for rv, kind, pod in events:
        if rv > version:
            break
        if kind == "BOOKMARK":
            continue
        name = pod["metadata"]["name"]
        if kind != "DELETED" and selector_matches(selector, pod["metadata"]["labels"]):
            matching.add(name)
        else:
            matching.discard(name)
    return matching


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
