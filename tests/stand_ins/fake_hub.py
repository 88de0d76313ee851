"""A stand-in Hugging Face Hub on loopback: what huggingface_hub 0.36 and 1.x call to lock and fetch a model.

Why a stand-in: these machines have no internet. The real client runs unchanged against it
(HF_ENDPOINT=<url>). It implements only what the client uses for `models lock` and `models
fetch`, as read in huggingface_hub's source (hf_api.py `model_info`; file_download.py
`get_hf_file_metadata`, `_get_metadata_or_catch_error`, `http_get`; utils/_http.py
`hf_raise_for_status`):

    GET  /api/models/{repo}/revision/{rev}?blobs=true
         {"id", "sha", "private", "gated", "siblings": [{"rfilename", "size", "blobId", "lfs"?}]}
    HEAD /{repo}/resolve/{rev}/{path}     (and GET)
         file in git: 200, ETag = git blob id, X-Repo-Commit, Content-Length, the bytes (Range too)
         LFS file:    302 to the CDN, X-Linked-Etag = sha256, X-Linked-Size, X-Repo-Commit,
                      ETag = the pointer's blob id
    GET  /cdn/{sha256}                    the LFS bytes; Range -> 206 + Content-Range (resume)
    GET  /api/agent-harnesses             an empty registry: huggingface_hub 1.x asks for it once a
                                          process for its User-Agent (utils/_detect_agent.py)

Errors carry the hub's X-Error-Code, which the client maps to its exceptions: RepoNotFound
(401), RevisionNotFound (404), EntryNotFound (404, with X-Repo-Commit), GatedRepo (401 without
a token, 403 with a token that has no access).

The CDN is addressed as "localhost" and the hub as "127.0.0.1": another host name, so the
client drops the Authorization header when it follows the redirect, as it does for the
hub's real CDN.

Test controls: `pause_after(n)` holds every body once n more bytes have been sent (to kill a
download at a known point), `drop_lfs_after` closes CDN connections when they reach that
byte of the object (a CDN that cannot serve past it for now: an interrupted download, which
hub 1.x's own retries from there cannot finish either), `rewrite` serves other bytes under
an existing commit (the hub disagreeing with a lock), and `log` records every request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".pt")
PIECE = 64 * 1024


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    oid = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    tokens: set[str] = field(default_factory=set)  # tokens whose account may download a gated repo


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # LFS content by sha256, served by the CDN
        self.log: list[dict] = []
        self.bytes_sent = 0
        self.drop_lfs_after: int | None = None
        self.paused = threading.Event()
        self._budget: int | None = None
        self._go = threading.Event()
        self._lock = threading.Lock()
        self._commits = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hub = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.cdn = f"http://localhost:{self.port}/cdn"

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> FakeHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()

    # -- repositories --------------------------------------------------------------------------

    def commit(self, repo_id: str, files: dict[str, bytes], ref: str = "main", gated: bool | None = None) -> str:
        """A new commit holding exactly `files`; moves `ref` to it. Creates the repository."""
        repo = self.repos.setdefault(repo_id, Repo())
        if gated is not None:
            repo.gated = gated
        self._commits += 1
        listing = sorted((p, git_blob_id(d)) for p, d in files.items())
        sha = hashlib.sha1(json.dumps([repo_id, self._commits, listing]).encode()).hexdigest()
        repo.commits[sha] = dict(files)
        repo.refs[ref] = sha
        for path, data in files.items():
            if is_lfs(path):
                self.blobs[hashlib.sha256(data).hexdigest()] = data
        return sha

    def rewrite(self, repo_id: str, sha: str, path: str, data: bytes) -> None:
        """Serve other bytes for path under an existing commit (what a lock must catch)."""
        self.repos[repo_id].commits[sha][path] = data
        if is_lfs(path):
            self.blobs[hashlib.sha256(data).hexdigest()] = data

    # -- test controls -------------------------------------------------------------------------

    def pause_after(self, nbytes: int) -> None:
        """Let nbytes more body bytes out, then hold every response until release()."""
        with self._lock:
            self._budget = nbytes
            self._go = threading.Event()
            self.paused.clear()

    def release(self) -> None:
        with self._lock:
            self._budget = None
            self._go.set()

    def _take(self, n: int) -> int:
        """How many of n bytes may go out now; blocks while paused."""
        while True:
            with self._lock:
                if self._budget is None or self._budget > 0:
                    if self._budget is not None:
                        n = min(n, self._budget)
                        self._budget -= n
                    self.bytes_sent += n
                    return n
                self.paused.set()
                go = self._go
            go.wait()

    def requests(self, **match) -> list[dict]:
        return [r for r in list(self.log) if all(r.get(k) == v for k, v in match.items())]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client killed mid-request (the tests do that on purpose) is not an error here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass  # the test reads hub.log instead

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # -- routing -------------------------------------------------------------------------------

    def _route(self, head: bool) -> None:
        hub: FakeHub = self.server.hub  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        entry = {"method": self.command, "path": unquote(url.path), "host": self.headers.get("Host", ""),
                 "range": self.headers.get("Range"), "authorization": self.headers.get("Authorization")}  # fmt: skip
        hub.log.append(entry)
        try:
            if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
                self._model_info(hub, f"{parts[2]}/{parts[3]}", parts[5], parse_qs(url.query), entry)
            elif parts == ["api", "agent-harnesses"]:
                body = json.dumps({"standardEnvVars": [], "harnesses": {}}).encode()
                self._send(entry, 200, {"Content-Type": "application/json"}, body, head)
            elif parts[0] == "cdn" and len(parts) == 2:
                self._cdn(hub, parts[1], head, entry)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(hub, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head, entry)
            else:
                self._error(entry, 404, None, "Not Found", head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (killed): nothing to answer

    def _repo_and_commit(self, hub: FakeHub, repo_id: str, rev: str, head: bool, entry: dict, download: bool):
        repo = hub.repos.get(repo_id)
        if repo is None:
            self._error(entry, 401, "RepoNotFound", "Repository not found", head)
            return None, None
        if download and repo.gated:
            auth = self.headers.get("Authorization", "")
            if not auth:
                self._error(entry, 401, "GatedRepo", f"Access to model {repo_id} is restricted. Log in.", head)
                return None, None
            if auth.removeprefix("Bearer ") not in repo.tokens:
                self._error(entry, 403, "GatedRepo", f"Access to model {repo_id} is restricted.", head)
                return None, None
        sha = repo.refs.get(rev, rev)
        if sha not in repo.commits:
            self._error(entry, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return None, None
        return repo, sha

    def _model_info(self, hub: FakeHub, repo_id: str, rev: str, query: dict, entry: dict) -> None:
        repo, sha = self._repo_and_commit(hub, repo_id, rev, False, entry, download=False)
        if repo is None:
            return
        blobs = query.get("blobs") == ["True"] or query.get("blobs") == ["true"]
        siblings = []
        for path, data in sorted(repo.commits[sha].items()):
            sibling: dict = {"rfilename": path}
            if blobs:
                pointer = lfs_pointer(data)
                stored = pointer if is_lfs(path) else data
                sibling.update(size=len(data), blobId=git_blob_id(stored))
                if is_lfs(path):
                    sibling["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                      "pointerSize": len(pointer)}  # fmt: skip
            siblings.append(sibling)
        body = {"id": repo_id, "sha": sha, "private": False, "gated": "manual" if repo.gated else False,
                "disabled": False, "siblings": siblings}  # fmt: skip
        self._send(entry, 200, {"Content-Type": "application/json"}, json.dumps(body).encode(), False)

    def _resolve(self, hub: FakeHub, repo_id: str, rev: str, path: str, head: bool, entry: dict) -> None:
        repo, sha = self._repo_and_commit(hub, repo_id, rev, head, entry, download=True)
        if repo is None:
            return
        data = repo.commits[sha].get(path)
        if data is None:
            self._error(entry, 404, "EntryNotFound", f"{path} does not exist at {sha}", head, {"X-Repo-Commit": sha})
            return
        if is_lfs(path):
            digest = hashlib.sha256(data).hexdigest()
            headers = {"Location": f"{hub.cdn}/{digest}", "X-Repo-Commit": sha, "X-Linked-Etag": f'"{digest}"',
                       "X-Linked-Size": str(len(data)), "ETag": f'"{git_blob_id(lfs_pointer(data))}"'}  # fmt: skip
            self._send(entry, 302, headers, b"", head)
            return
        self._content(hub, data, {"ETag": f'"{git_blob_id(data)}"', "X-Repo-Commit": sha}, head, entry, lfs=False)

    def _cdn(self, hub: FakeHub, digest: str, head: bool, entry: dict) -> None:
        data = hub.blobs.get(digest)
        if data is None:
            self._error(entry, 404, None, "no such object", head)
            return
        self._content(hub, data, {"ETag": f'"{digest}"'}, head, entry, lfs=True)

    # -- responses -----------------------------------------------------------------------------

    def _content(self, hub: FakeHub, data: bytes, headers: dict, head: bool, entry: dict, lfs: bool) -> None:
        start, end, status = 0, len(data), 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start = int(first)
            end = min(int(last) + 1, len(data)) if last else len(data)
            if start >= len(data):
                self._send(entry, 416, {"Content-Range": f"bytes */{len(data)}"}, b"", head)
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        headers.update({"Content-Length": str(end - start), "Accept-Ranges": "bytes"})
        entry["status"] = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if head:
            return
        limit = hub.drop_lfs_after if lfs else None
        pos = start
        while pos < end:
            n = hub._take(min(PIECE, end - pos))
            if limit is not None and pos + n > limit:
                self.wfile.write(data[pos : max(pos, limit)])
                self.wfile.flush()
                self.close_connection = True  # the body stops short of its Content-Length
                return
            self.wfile.write(data[pos : pos + n])
            pos += n

    def _send(self, entry: dict, status: int, headers: dict, body: bytes, head: bool) -> None:
        entry["status"] = status
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _error(self, entry, status: int, code: str | None, message: str, head: bool, extra: dict | None = None):
        headers = {"Content-Type": "application/json", "X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._send(entry, status, headers, json.dumps({"error": message}).encode(), head)
