"""The real router (smg, through sglang-eagle3-router) in front of stand-in SGLang servers.

The router is the real Rust binary from the smg wheel. The workers are this
project's stand-in SGLang server (tests/stand_ins/fake_sglang): SGLang needs GPUs, and
the router only sees HTTP (SGLang's endpoints and formats), which the stand-in speaks.
Each worker logs every request it answered (prompt, tokens, when), so a test can tell
which worker served which request.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from support.bench_fixtures import FAKE_SGLANG, free_port

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "python" / "src"


def offline() -> dict[str, str]:
    """Environment that keeps the router's traffic on loopback: outside requests would go to a proxy address
    where nothing listens. (smg fetches nothing: test_router.py's test_the_router_contacts_nothing_but_its_workers
    shows it with a listener there; sglang-router 0.3.2 fetched the model's tokenizer from the hub.)"""
    dead = f"http://127.0.0.1:{free_port()}"
    return {"HTTPS_PROXY": dead, "HTTP_PROXY": dead, "ALL_PROXY": dead, "NO_PROXY": "127.0.0.1,localhost"}


def wait_until(condition, timeout: float, what: str, interval: float = 0.1):
    """Poll until condition() is truthy; the deadline only guards against a hung process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def get_json(url: str, headers: dict | None = None, timeout: float = 5):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
        return json.load(response)


class StandIn:
    """A stand-in SGLang server on a fixed port; it can be SIGKILLed and started again on that port."""

    def __init__(self, directory: Path, name: str, **env: str):
        self.directory, self.name, self.env = directory, name, env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.lives = 0  # each start logs to its own file: sent-<name>-<life>.jsonl

    def start(self) -> StandIn:
        self.lives += 1
        env = {**os.environ, "PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_SEND_LOG": str(self.log(self.lives)),
               **{f"FAKE_SGLANG_{k}": str(v) for k, v in self.env.items()}}  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", "--port", str(self.port), "--model-path", "fake/kimi"],
            env=env, start_new_session=True,
        )  # fmt: skip
        wait_until(self._healthy, 20, f"stand-in {self.name} on port {self.port}")
        return self

    def _healthy(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/health", timeout=1).close()
            return True
        except (urllib.error.URLError, OSError):
            assert self.process.poll() is None, f"stand-in {self.name} exited with {self.process.returncode}"
            return False

    def kill(self) -> None:
        """SIGKILL: no goodbye, as when a host loses power or the OOM killer strikes."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self, life: int) -> Path:
        return self.directory / f"sent-{self.name}-{life}.jsonl"

    def served(self, life: int | None = None) -> list[dict]:
        """The requests this stand-in answered (in all its lives, or in one)."""
        lives = [life] if life else range(1, self.lives + 1)
        rows = []
        for n in lives:
            if self.log(n).exists():
                rows += [json.loads(line) for line in self.log(n).read_text().splitlines()]
        return rows


class Router:
    """sglang-eagle3-router (the real smg) on loopback in front of the given workers."""

    def __init__(self, directory: Path, workers: list[StandIn], *args: str, api_key_file: Path | None = None,
                 env: dict | None = None):  # fmt: skip
        self.port, self.metrics_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.workers = workers
        self.log_path = directory / f"router-{self.port}.log"
        self.key = api_key_file.read_text().strip() if api_key_file else None
        self.argv = [
            sys.executable, "-m", "sglang_eagle3.serving.router_main",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(self.metrics_port),
            "--worker-urls", *[w.url for w in workers],
            "--shutdown-grace-period-secs", "5",
            *(["--api-key-file", str(api_key_file)] if api_key_file else []),
            *args,
        ]  # fmt: skip
        self.env = {**os.environ, "PYTHONPATH": str(SOURCE), **offline(), **(env or {})}
        self.process: subprocess.Popen | None = None

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def start(self, wait_for_workers: bool = True) -> Router:
        self.process = subprocess.Popen(
            self.argv, env=self.env, stdout=self.log_path.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        if wait_for_workers:
            wait_until(lambda: self.healthy_workers() == {w.url for w in self.workers}, 30, "the router's workers")
        return self

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def worker_states(self) -> dict[str, bool]:
        """{worker url: healthy} as the router sees them (GET /workers)."""
        assert self.process.poll() is None, f"the router exited:\n{self.log_path.read_text()[-3000:]}"
        try:
            workers = get_json(f"{self.url}/workers", self.headers)["workers"]
        except (urllib.error.URLError, OSError):
            return {}
        return {w["url"]: w["is_healthy"] for w in workers}

    def healthy_workers(self) -> set[str]:
        return {url for url, healthy in self.worker_states().items() if healthy}

    def metrics(self) -> dict[tuple[str, tuple], float]:
        """The router's Prometheus samples: {(name, sorted labels): value}."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def log(self) -> str:
        return self.log_path.read_text()


@contextlib.contextmanager
def cluster(directory: Path, n: int, *router_args: str, worker_env: dict | None = None, **router_kw):
    """n stand-in workers and the router in front of them; everything stopped afterwards."""
    workers = [StandIn(directory, f"w{i}", **(worker_env or {})) for i in range(n)]
    router = None
    try:
        for w in workers:
            w.start()
        router = Router(directory, workers, *router_args, **router_kw).start()
        yield router, workers
    finally:
        if router and router.process:
            router.stop()
        for w in workers:
            w.stop()


async def generate(session: aiohttp.ClientSession, url: str, text: str, max_tokens: int = 16,
                   stream: bool = False, headers: dict | None = None) -> tuple[int, str | None]:  # fmt: skip
    """One /generate request: (HTTP status, None if the full answer came back else what was wrong)."""
    body = {"text": text, "sampling_params": {"max_new_tokens": max_tokens}, "stream": stream}
    try:
        async with session.post(f"{url}/generate", json=body, headers=headers or {}) as response:
            raw = await response.read()
    except (aiohttp.ClientError, TimeoutError) as err:
        return 0, f"{type(err).__name__}: {err}"
    if response.status != 200:
        return response.status, raw[:200].decode(errors="replace")
    if stream:
        complete = raw.rstrip().endswith(b"data: [DONE]") and f'"completion_tokens": {max_tokens},'.encode() in raw
        return 200, None if complete else "stream cut short"
    tokens = json.loads(raw)["meta_info"]["completion_tokens"]
    return 200, None if tokens == max_tokens else f"{tokens} of {max_tokens} tokens"
