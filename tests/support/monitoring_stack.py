"""Real processes on loopback for the monitoring tests: the router (smg, the PyPI wheel's
binary) and Prometheus (Debian's package), each started, awaited and stopped."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from support.bench_fixtures import free_port

PROMETHEUS = shutil.which("prometheus")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def wait_for(check, what: str, timeout: float = 60.0, interval: float = 0.2):
    """Poll ``check()`` until it returns something truthy (bounded; a failure names what never happened)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            last = check()
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


@contextlib.contextmanager
def process(argv: list[str], log: Path, env: dict[str, str] | None = None):
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def router(worker_urls: list[str], tmp: Path):
    """The router (smg) in front of ``worker_urls``; yields its metrics URL once it has health-checked them."""
    port, metrics_port = free_port(), free_port()
    argv = [sys.executable, "-m", "smg.launch_router", "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *worker_urls, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
            "--health-check-interval-secs", "1"]  # fmt: skip
    with process(argv, tmp / "router.log"):
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_for(lambda: "smg_worker_health{" in get(url), "the router to report worker health")
        yield url


@contextlib.contextmanager
def prometheus(jobs: dict[str, tuple[str, list[str]]], rule_files: list[Path], tmp: Path):
    """Prometheus scraping ``jobs`` (name -> (metrics path, [host:port])) every second; yields its API URL.

    A job on /health_generate gets the fallback scrape protocol, as the NixOS module gives it:
    the answer has no body and no Content-Type, which Prometheus 3 accepts only with one."""
    port = free_port()
    scrape_configs = [{"job_name": name, "metrics_path": path, "static_configs": [{"targets": targets}]}
                      | ({"fallback_scrape_protocol": "PrometheusText0.0.4"} if path == "/health_generate" else {})
                      for name, (path, targets) in jobs.items()]  # fmt: skip
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(p) for p in rule_files], "scrape_configs": scrape_configs}  # fmt: skip
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    argv = [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    with process(argv, tmp / "prometheus.log"):
        api = f"http://127.0.0.1:{port}/api/v1"
        wait_for(lambda: json.loads(get(f"{api}/status/runtimeinfo"))["status"] == "success", "Prometheus to start")
        yield api


def query(api: str, expr: str) -> list[dict]:
    body = json.loads(get(f"{api}/query?" + urllib.parse.urlencode({"query": expr})))
    assert body["status"] == "success", body
    return body["data"]["result"]
