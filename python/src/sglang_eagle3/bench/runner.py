"""Run the benchmark against a live server, writing each finished request as it completes (JSON Lines: the record
types are bench/report.py's), so a run that is interrupted or whose server dies keeps every finished request. A
level's wall time and output tokens give the aggregate throughput, what a router in front of several servers adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import json
import re
import secrets
import signal
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import aiohttp

from ..errors import shown
from ..redaction import shown_url
from ..serving import credentials
from . import BenchError, server_metrics
from .client import APIS, RequestResult, avg_spec_accept_length, identify, server_info, stream_one

ABORT_AFTER_CONSECUTIVE_FAILURES = 3


def load_prompts() -> list[dict]:
    return json.loads(resources.files(__package__).joinpath("prompts.json").read_text())


@dataclass
class RunConfig:
    url: str
    output: Path
    label: str = "run"
    api: str = "native"
    concurrencies: list[int] = field(default_factory=lambda: [1])
    requests: int = 8  # measured requests per concurrency level
    warmup: int = 2  # per concurrency level, not recorded
    max_tokens: int = 256
    ignore_eos: bool = True
    timeout: float = 600.0
    api_key_file: Path | None = None  # sent as "Authorization: Bearer KEY"; the results keep the path only

    def __post_init__(self):
        if self.api not in APIS:
            raise BenchError(f"api must be one of {', '.join(APIS)}, not {shown(self.api)}")
        self.url = base_url(self.url)
        if any(c < 1 for c in self.concurrencies) or self.requests < 1 or self.max_tokens < 2:
            raise BenchError("concurrency and requests must be >= 1, max_tokens >= 2")

    def headers(self) -> dict[str, str]:
        if self.api_key_file is None:
            return {}
        try:
            return {"Authorization": f"Bearer {credentials.read_key(self.api_key_file, 'the API key file')}"}
        except credentials.KeyFileError as err:
            raise BenchError(str(err)) from None


def base_url(url: str) -> str:
    """A server's base URL, checked: http(s), a host, a valid port, no path beyond '/'."""
    example = "e.g. http://127.0.0.1:30000"
    said = shown(shown_url(url))
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError as err:
        why = "" if "@" in url else f" ({err})"  # Python's own message may quote the user:password part
        raise BenchError(f"{said} is not a valid URL{why}; {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"{said} is not an http(s) URL with a host; {example}")
    try:
        parts.hostname.encode("idna")  # what aiohttp will do with it: labels of 1-63 characters
    except UnicodeError as err:
        raise BenchError(f"{said}: {shown(parts.hostname[:40])}... is not a host name ({err}); {example}") from None
    if port == 0:
        raise BenchError(f"{said}: port 0 is not a server's port; {example}")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username or parts.password:
        raise BenchError(f"{said}: give the server's base URL only, without path, query or user; {example}")
    return f"{parts.scheme}://{parts.netloc}"


def looks_like_url(text: str) -> bool:
    """``scheme://...``, whatever the scheme's case or the spaces around it: never read as a file name."""
    return re.match(r"\s*[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


def new_run_id() -> str:
    """A run's identity in its results file (each record carries it as "run"): when it started, and a random part
    for runs started in the same second. `bench compare --baseline-run` names it."""
    return f"{dt.datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


@dataclass
class RunOutcome:
    run_id: str = field(default_factory=new_run_id)  # every record of the run carries it as "run"
    finished: int = 0
    failed: int = 0
    interrupted: bool = False
    aborted: str | None = None  # why the run stopped early (server gone)
    signal: int = signal.SIGINT  # what interrupted it: SIGINT or SIGTERM (exit_status.for_signal)
    written: bool = False  # the results file got this run's records (a run stopped before it began wrote none)


class ResultWriter:
    """Appends a run's records to its results file (a file may hold several runs: each record names its own)."""

    def __init__(self, path: Path, run_id: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file, self.run_id = path.open("a"), run_id

    def write(self, record: dict) -> None:
        self.file.write(json.dumps({**record, "run": self.run_id}) + "\n")
        self.file.flush()  # a crash one second later must not lose this request

    def close(self) -> None:
        self.file.close()


@contextlib.contextmanager
def _no_gc_pauses():
    """No cyclic garbage collection while requests stream: a collection stops the event loop for milliseconds, and
    chunks arriving meanwhile would be timestamped late. The streaming path creates no reference cycles."""
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.unfreeze()
        gc.collect()


async def _level(client, config: RunConfig, prompts, concurrency: int, writer, outcome: RunOutcome, on_result):
    """Warm-up, then config.requests requests with `concurrency` in flight."""
    queue: asyncio.Queue = asyncio.Queue()
    total = config.warmup + config.requests
    for i in range(total):
        queue.put_nowait(i)
    failures = {"consecutive": 0}
    spans: list[tuple[float, float, int]] = []  # (sent, last token, tokens) of each measured request that finished

    async def worker():
        while not queue.empty() and outcome.aborted is None:
            i = queue.get_nowait()
            prompt = prompts[i % len(prompts)]
            sent = time.perf_counter()
            result = await stream_one(
                client, config.api, prompt["id"], prompt["prompt"], config.max_tokens, config.ignore_eos,
                index=i - config.warmup, concurrency=concurrency,
            )  # fmt: skip
            if i < config.warmup:
                continue
            if result.ok:
                spans.append((sent, sent + result.e2e_s, result.output_tokens))
            writer.write(result.to_record(config.label))
            if result.ok:
                outcome.finished += 1
                failures["consecutive"] = 0
            else:
                outcome.failed += 1
                failures["consecutive"] += 1
                if failures["consecutive"] >= ABORT_AFTER_CONSECUTIVE_FAILURES:
                    outcome.aborted = f"{failures['consecutive']} requests in a row failed; last: {result.error}"
            on_result(result)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if spans:  # wall time from the first measured request sent to the last token received
        wall_s = max(end for _, end, _ in spans) - min(sent for sent, _, _ in spans)
        writer.write({"type": "level", "label": config.label, "concurrency": concurrency, "requests": len(spans),
                      "output_tokens": sum(n for _, _, n in spans), "wall_s": wall_s})  # fmt: skip


async def run_async(config: RunConfig, on_result=lambda r: None, on_level=lambda c, n: None,
                    outcome: RunOutcome | None = None) -> RunOutcome:  # fmt: skip
    outcome = outcome or RunOutcome()
    prompts = load_prompts()
    connector = aiohttp.TCPConnector(limit=max(config.concurrencies) + 4)
    timeout = aiohttp.ClientTimeout(total=config.timeout, connect=10.0)
    headers = config.headers()
    async with aiohttp.ClientSession(
        base_url=config.url, timeout=timeout, connector=connector, headers=headers
    ) as client:
        model_info = await identify(client, config.api)
        metrics_before = await server_metrics.snapshot(client)
        writer = ResultWriter(config.output, outcome.run_id)
        outcome.written = True
        try:
            started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            described = {k: v for k, v in asdict(config).items() if k != "output"}  # the file knows where it is
            writer.write(
                {"type": "run", **described, "api_key_file": str(config.api_key_file) if config.api_key_file else None,
                 "model": model_info.get("model_path"), "started": started}
            )  # fmt: skip
            for concurrency in config.concurrencies:
                on_level(concurrency, config.requests)
                with _no_gc_pauses():
                    await _level(client, config, prompts, concurrency, writer, outcome, on_result)
                if outcome.aborted:
                    break
        except asyncio.CancelledError:
            outcome.interrupted = True
        finally:
            if not outcome.aborted and not outcome.interrupted:
                info = await server_info(client)
                writer.write({"type": "server_info", "label": config.label,  # no keys, from an unpatched server
                              "avg_spec_accept_length": avg_spec_accept_length(info),
                              "raw": credentials.without_secrets(info)})  # fmt: skip
                metrics_after = await server_metrics.snapshot(client)
                writer.write(server_metrics.record(config.label, metrics_before, metrics_after))
            writer.close()
    return outcome


def run(config: RunConfig, on_result=lambda r: None, on_level=lambda c, n: None) -> RunOutcome:
    """Run to completion, or until SIGINT or SIGTERM: then the requests in flight are dropped and the rest kept."""

    received: list[int] = []
    outcome = RunOutcome()

    def stop(signum: int) -> None:
        received.append(signum)
        task.cancel()

    async def main():
        nonlocal task
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, stop, signum)
        try:
            await run_async(config, on_result, on_level, outcome)
        except asyncio.CancelledError:
            outcome.interrupted = True
        outcome.signal = received[0] if received else signal.SIGINT
        return outcome

    task = None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return asyncio.run(main())
    finally:  # asyncio leaves SIGTERM at the default when its loop closes: the command's handlers, back
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def result_summary_line(result: RequestResult) -> str:
    if not result.ok:
        return f"failed: {result.error}"
    return f"{result.decode_tok_s or 0:.1f} tok/s, ttft {result.ttft_s * 1000:.0f} ms"
