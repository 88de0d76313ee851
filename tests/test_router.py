"""The router (the real smg 1.13.0 binary, through sglang-eagle3-router) in front of three stand-in SGLang servers.

The stand-ins replace SGLang because SGLang needs GPUs; the router only talks HTTP to
them, in SGLang's formats (tests/router_fixtures.py). Each stand-in logs what it
answered, so every test checks where requests went against what the workers saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from sglang_eagle3.bench import report
from sglang_eagle3.bench.runner import load_prompts
from support.bench_fixtures import free_port
from support.own_resources import missing_path, refused_port
from support.router_fixtures import SOURCE, Router, StandIn, cluster, generate, get_json, offline, wait_until

# Fast health checks and short circuit-breaker pauses, so a test sees a worker leave and
# come back within seconds (production defaults: 60 s each).
FAST_HEALTH = (
    "--health-check-interval-secs", "1", "--health-failure-threshold", "1", "--health-success-threshold", "1",
    "--cb-timeout-duration-secs", "1",
)  # fmt: skip
WORKER = {"RATE": "200", "FIRST_DELAY": "0.02"}  # 16 tokens: about 0.1 s per request


def served_by(workers: list[StandIn]) -> dict[str, str]:
    """{prompt: worker name} over everything the workers answered (prompts are unique per test)."""
    return {row["prompt"]: w.name for w in workers for row in w.served()}


def metric(samples: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


async def sequential(url: str, prompts: list[str], **kw) -> list[tuple[int, str | None]]:
    async with aiohttp.ClientSession() as session:
        return [await generate(session, url, p, **kw) for p in prompts]


# -- policies -----------------------------------------------------------------------------


def test_round_robin_cycles_through_the_workers_and_the_metrics_count_it(tmp_path):
    with cluster(tmp_path, 3, "--policy", "round_robin", worker_env=WORKER) as (router, workers):
        prompts = [f"round robin request {i}" for i in range(60)]
        results = asyncio.run(sequential(router.url, prompts))
        samples = router.metrics()
    assert results == [(200, None)] * 60
    where = served_by(workers)
    order = [where[p] for p in prompts]
    # Exactly in turn: every third request goes to the same worker, each worker gets 20.
    assert all(order[i] == order[i % 3] for i in range(60)) and len(set(order[:3])) == 3
    assert {w.name: len(w.served()) for w in workers} == {"w0": 20, "w1": 20, "w2": 20}
    # The router's own Prometheus counters agree with what the workers saw.
    for w in workers:
        assert metric(samples, "smg_worker_cb_outcomes_total", worker=w.url, outcome="success") == 20
        assert metric(samples, "smg_worker_health", worker=w.url) == 1
    assert metric(samples, "smg_router_requests_total", endpoint="generate") == 60
    assert metric(samples, "smg_worker_selection_total", policy="round_robin") == 60
    assert metric(samples, "smg_http_requests_total", method="POST", path="/generate") == 60


@pytest.mark.parametrize("policy", ["cache_aware", "round_robin"])
def test_cache_aware_keeps_each_conversation_on_one_worker(tmp_path, policy):
    """Three conversations, each a long shared prefix; round robin is the control."""
    conversations = [f"System prompt of conversation {c}. " * 12 for c in "ABC"]

    async def traffic(url, workers):
        async with aiohttp.ClientSession() as session:
            # The first turns overlap: three new prefixes (no match in the router's trees), each sent
            # once the one before has reached a worker and each 4000 tokens long (20 s at the stand-in's
            # rate), so cache aware can place each on a worker with nothing in flight.
            def arrived() -> int:
                return sum(get_json(f"{w.url}/get_load")[0]["num_reqs"] for w in workers)

            first = []
            for n, c in enumerate(conversations, start=1):
                first.append(asyncio.create_task(generate(session, url, c + "turn 0", max_tokens=4000)))
                await asyncio.to_thread(wait_until, lambda n=n: arrived() >= n, 20, f"{n} first turns at a worker")
            assert [status for status, _ in await asyncio.gather(*first)] == [200] * 3
            # Follow-up turns one request at a time, the conversations in a rotating order: round
            # robin then sends conversation c to a different worker every turn (its counter, not
            # the prompt, decides), while cache aware must follow the prefix whatever the order.
            for turn in range(1, 9):
                for i in range(3):
                    await generate(session, url, conversations[(i + turn) % 3] + f"turn {turn}")

    with cluster(tmp_path, 3, "--policy", policy, worker_env=WORKER) as (router, workers):
        asyncio.run(traffic(router.url, workers))
    where = served_by(workers)
    per_conversation = [{where[c + f"turn {t}"] for t in range(9)} for c in conversations]
    if policy == "cache_aware":
        assert all(len(ws) == 1 for ws in per_conversation), per_conversation
        # and spread: smg places a new prefix by its own view of the load, which a busy machine can leave a
        # request behind (three fresh-clone CI runs put the third conversation beside the second while a worker
        # was idle); two workers at least, never all three conversations on one
        assert len(set.union(*per_conversation)) >= 2, per_conversation
    else:  # the control: every conversation visits all three workers
        assert all(len(ws) == 3 for ws in per_conversation), per_conversation


def test_power_of_two_avoids_the_worker_that_reports_load(tmp_path):
    """Power of two compares the load the workers report (SGLang's /v1/loads: requests and tokens in flight)."""
    with cluster(tmp_path, 3, "--policy", "power_of_two", "--load-monitor-interval", "1", "--log-level", "debug",
                 worker_env=WORKER) as (router, workers):  # fmt: skip
        busy = workers[0]

        async def traffic():
            async with aiohttp.ClientSession() as session:
                # Long requests straight to w0 (not through the router): only w0's own report shows them.
                held = [asyncio.create_task(generate(session, busy.url, f"held {i}", max_tokens=3000))
                        for i in range(10)]  # fmt: skip
                await asyncio.to_thread(
                    wait_until,
                    lambda: get_json(f"{busy.url}/v1/loads")["loads"][0]["num_used_tokens"] == 30000,
                    10,
                    "w0's load",
                )
                # The router polls /v1/loads every second (--load-monitor-interval): wait for two polls after.
                fetched = router.log().count("Fetched loads from 3/3 polled workers")
                await asyncio.to_thread(
                    wait_until, lambda: router.log().count("Fetched loads from 3/3 polled workers") >= fetched + 2, 20,
                    "two load polls of the router",
                )  # fmt: skip
                results = [await generate(session, router.url, f"balanced {i}") for i in range(30)]
                for task in held:
                    task.cancel()
                return results

        results = asyncio.run(traffic())
    assert results == [(200, None)] * 30
    counts = {w.name: sum(row["prompt"].startswith("balanced") for row in w.served()) for w in workers}
    # Each pick draws two of the three workers; w0 is drawn in about 2 of 3 picks and must lose
    # every time (random choice would give it about 10 of the 30).
    assert counts["w0"] == 0 and counts["w1"] + counts["w2"] == 30, counts
    assert counts["w1"] > 0 and counts["w2"] > 0


# -- failures -----------------------------------------------------------------------------


class Load:
    """Non-streamed requests with `concurrency` in flight until stopped; every answer checked."""

    def __init__(self, url: str, concurrency: int = 16):
        self.url, self.concurrency = url, concurrency
        self.done: list[tuple[str, int, str | None]] = []  # (prompt, status, problem)
        self.stop = False

    async def run(self, limit: int) -> None:
        counter = iter(range(limit))
        async with aiohttp.ClientSession() as session:

            async def client():
                for i in counter:
                    if self.stop:
                        return
                    # Conversations of 5 turns with a long shared prefix: the cache-aware policy keeps a
                    # conversation where it started, and sends new ones to the least loaded worker.
                    prompt = f"conversation {i // 5}: " + "shared context " * 10 + f"turn {i}"
                    status, problem = await generate(session, self.url, prompt)
                    self.done.append((prompt, status, problem))

            await asyncio.gather(*(client() for _ in range(self.concurrency)))

    def failed(self) -> list:
        return [d for d in self.done if d[2] is not None]


@pytest.mark.parametrize("policy", ["cache_aware", "round_robin", "power_of_two"])
def test_a_worker_killed_under_load_costs_no_request_and_is_used_again_after_restart(tmp_path, policy):
    """The bar: 0 failed of >= 500 requests while one of three workers is SIGKILLed and restarted."""
    args = ("--policy", policy, "--worker-startup-check-interval", "1", *FAST_HEALTH)
    with cluster(tmp_path, 3, *args, worker_env=WORKER) as (router, workers):
        victim = workers[1]
        load = Load(router.url)
        marks = {}

        def chaos():
            wait_until(lambda: len(load.done) >= 150, 60, "150 answered requests")
            victim.kill()
            marks["killed"] = len(load.done)
            wait_until(lambda: victim.url not in router.healthy_workers(), 30, "the router to take the worker out")
            marks["out"] = len(load.done)
            marks["health while out"] = metric(router.metrics(), "smg_worker_health", worker=victim.url)
            wait_until(lambda: len(load.done) >= marks["out"] + 150, 60, "150 requests without the worker")
            victim.start()
            wait_until(lambda: victim.url in router.healthy_workers(), 30, "the router to take the worker back")
            marks["back"] = len(load.done)
            # Until the restarted worker has answered 10 requests, 100 more in all, and at least 600.
            wait_until(lambda: len(victim.served(life=2)) >= 10 and len(load.done) >= max(600, marks["back"] + 100),
                       120, "traffic to the restarted worker")  # fmt: skip
            load.stop = True

        async def main():
            await asyncio.gather(load.run(limit=50_000), asyncio.to_thread(chaos))

        asyncio.run(main())
        samples = router.metrics()
    assert load.failed() == [] and len(load.done) >= 600
    assert all(status == 200 for _, status, _ in load.done)
    # Every request was answered exactly once, by the workers between them: retries went
    # elsewhere, none was answered twice.
    answered = [row["prompt"] for w in workers for row in w.served()]
    assert sorted(answered) == sorted(p for p, _, _ in load.done)
    # Once back, the restarted worker got traffic again.
    assert len(victim.served(life=2)) >= 10
    # The router's metrics: the victim down while out, up again at the end; every request that
    # failed on it (if one was sent there before it was taken out) was retried elsewhere.
    assert marks["health while out"] == 0 and metric(samples, "smg_worker_health", worker=victim.url) == 1
    failures = metric(samples, "smg_worker_cb_outcomes_total", worker=victim.url, outcome="failure")
    assert metric(samples, "smg_worker_retries_total") >= failures
    print(
        f"\n{policy}: {len(load.done)} requests, 0 failed; killed after {marks['killed']}, out after "
        f"{marks['out']}, back after {marks['back']}; restarted worker answered {len(victim.served(life=2))}"
    )


def test_streams_in_flight_on_a_killed_worker_are_cut_later_streams_are_answered(tmp_path):
    """What a router cannot do: a stream whose first tokens reached the client is not retried.

    Streams that were running on the killed worker end early (HTTP 200, no [DONE]); every
    stream started after the kill is answered in full.
    """
    with cluster(tmp_path, 3, "--policy", "round_robin", *FAST_HEALTH, worker_env=WORKER) as (router, workers):

        async def main():
            results = []  # (started, problem)
            async with aiohttp.ClientSession() as session:

                async def one(i):
                    started = time.monotonic()
                    _, problem = await generate(session, router.url, f"stream {i}", max_tokens=60, stream=True)
                    results.append((started, problem))

                async def client(offset):
                    for i in range(offset, 240, 12):
                        await one(i)

                async def killer():
                    while len(results) < 60:
                        await asyncio.sleep(0.01)
                    workers[1].kill()
                    return time.monotonic()

                killed_at, *_ = await asyncio.gather(killer(), *(client(k) for k in range(12)))
            return killed_at, results

        killed_at, results = asyncio.run(main())
    cut = [started for started, problem in results if problem]
    assert len(results) == 240 and 1 <= len(cut) <= 12  # at most the streams in flight: 12 clients
    assert all(started < killed_at for started in cut)


def test_a_worker_that_starts_after_the_router_is_added_when_it_comes_up(tmp_path):
    """GPU hosts load for a long time; the router keeps asking until --worker-startup-timeout-secs."""
    early = StandIn(tmp_path, "early", **WORKER).start()
    late = StandIn(tmp_path, "late", **WORKER)
    router = Router(tmp_path, [early, late], "--policy", "round_robin", "--worker-startup-check-interval", "1",
                    "--worker-startup-timeout-secs", "120", *FAST_HEALTH)  # fmt: skip
    try:
        router.start(wait_for_workers=False)
        wait_until(lambda: router.healthy_workers() == {early.url}, 30, "the early worker")
        late.start()
        wait_until(lambda: router.healthy_workers() == {early.url, late.url}, 60, "the late worker to be added")
        results = asyncio.run(sequential(router.url, [f"after {i}" for i in range(10)]))
    finally:
        router.stop()
        early.stop()
        late.stop()
    assert results == [(200, None)] * 10
    assert len(late.served()) == 5 and len(early.served()) == 5


@pytest.mark.parametrize("flags", [(), ("--disable-tokenizer-autoload",)], ids=["smg's default", "as the unit runs it"])
def test_the_router_contacts_nothing_but_its_workers(tmp_path, flags):
    """No tokenizer download, nothing else outside (docs/router.md; the pod's NetworkPolicy lets it reach only its
    servers and the API server): the hub and every proxy variable point at a listener that records what reaches it."""
    listener = socket.create_server(("127.0.0.1", 0))
    outside = f"http://127.0.0.1:{listener.getsockname()[1]}"
    reached: list[bytes] = []

    def record():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.settimeout(2)
            with contextlib.suppress(OSError), connection:
                reached.append(connection.recv(4096))

    threading.Thread(target=record, daemon=True).start()
    env = {"HF_ENDPOINT": outside, "HTTPS_PROXY": outside, "HTTP_PROXY": outside, "ALL_PROXY": outside,
           "NO_PROXY": "127.0.0.1,localhost", "HF_HOME": str(tmp_path / "hf")}  # fmt: skip
    with cluster(tmp_path, 2, "--policy", "round_robin", *flags, worker_env=WORKER, env=env) as (router, _):
        results = asyncio.run(sequential(router.url, [f"outside {i}" for i in range(6)]))
        time.sleep(3)  # a tokenizer fetch would start when a worker is added
    listener.close()
    assert results == [(200, None)] * 6
    assert reached == [], f"the router reached outside its workers: {reached[:2]}"
    assert not (tmp_path / "hf").exists()


# -- the API key --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["--api-key-file", "systemd credential"])
def test_api_key_from_a_file_protects_the_router_and_reaches_the_workers(tmp_path, how):
    key = "rk-" + os.urandom(12).hex()
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o400)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "api-key").write_text(key)
    (credentials / "api-key").chmod(0o400)  # as systemd's LoadCredential leaves it
    workers = [StandIn(tmp_path, f"w{i}", API_KEY_FILE=str(key_file), **WORKER) for i in range(2)]
    if how == "--api-key-file":
        router = Router(tmp_path, workers, "--policy", "round_robin", api_key_file=key_file)
    else:
        router = Router(tmp_path, workers, "--policy", "round_robin", env={"CREDENTIALS_DIRECTORY": str(credentials)})
        router.key = key
    try:
        for w in workers:
            w.start()
        router.start()
        cmdline = open(f"/proc/{router.process.pid}/cmdline", "rb").read()
        environ = open(f"/proc/{router.process.pid}/environ", "rb").read()
        with_key = asyncio.run(sequential(router.url, ["a", "b"], headers=router.headers))
        without = asyncio.run(sequential(router.url, ["c"]))
        wrong = asyncio.run(sequential(router.url, ["d"], headers={"Authorization": "Bearer wrong"}))
        health = urllib_status(f"{router.url}/health")
    finally:
        router.stop()
        for w in workers:
            w.stop()
    # One key both ways: clients must present it, and the router presents it to the workers
    # (which answer 401 without it).
    assert with_key == [(200, None)] * 2
    assert without[0][0] == 401 and wrong[0][0] == 401
    assert health == 200  # health stays open for load balancers and monitoring
    assert {row["prompt"] for w in workers for row in w.served()} == {"a", "b"}
    # Never in the process list, the environment or the router's log.
    assert key.encode() not in cmdline and key.encode() not in environ
    assert key not in router.log()


# What smg 1.13.0 answers without the key (docs/router.md, "services.sglang-router"): its probes, and three more that
# show the model id and the workers' metrics, or make a worker generate.
OPEN_WITHOUT_KEY = {"/health", "/liveness", "/readiness", "/health_generate", "/v1/models", "/engine_metrics"}
KEY_REQUIRED = {("GET", "/get_model_info"), ("GET", "/get_server_info"), ("GET", "/workers"), ("GET", "/get_loads"),
                ("POST", "/generate"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
                ("POST", "/flush_cache"), ("POST", "/v1/tokenize"), ("POST", "/v1/responses"),
                ("POST", "/workers")}  # fmt: skip


def test_exactly_the_documented_endpoints_answer_without_the_key(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("rk-" + os.urandom(12).hex())
    key_file.chmod(0o400)
    worker = StandIn(tmp_path, "w0", API_KEY_FILE=str(key_file), **WORKER)
    router = Router(tmp_path, [worker], "--policy", "round_robin", api_key_file=key_file)
    body = json.dumps({"text": "a", "prompt": "a", "messages": [{"role": "user", "content": "a"}]}).encode()

    def status(method: str, path: str) -> int:
        request = urllib.request.Request(router.url + path, method=method, data=body if method == "POST" else None,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as err:
            return err.code

    try:
        worker.start()
        router.start()
        answered = {path: status("GET", path) for path in OPEN_WITHOUT_KEY}
        refused = {(method, path): status(method, path) for method, path in KEY_REQUIRED}
    finally:
        router.stop()
        worker.stop()
    assert answered == dict.fromkeys(OPEN_WITHOUT_KEY, 200)
    assert refused == dict.fromkeys(KEY_REQUIRED, 401)
    # ... and docs/router.md says exactly these, and what the firewall defaults do about them.
    row = next(
        line
        for line in (SOURCE.parents[1] / "docs" / "router.md").read_text().splitlines()
        if line.startswith("| `apiKeyFile` | by `LoadCredential`")
    )
    said = set(re.findall(r"`(/[a-z0-9_/]+)`", row.split("without the key", 1)[1].split("Everything else", 1)[0]))
    assert said == OPEN_WITHOUT_KEY and "answers six endpoints without the key" in row
    assert "`openFirewall = false`" in row


def urllib_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def run_router_main(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.serving.router_main", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SOURCE), **offline(), **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--api-key", "secret-value", "--worker-urls", "http://127.0.0.1:{refused}"],
            "must not be given on the command line",
        ),
        (["--api-key=secret-value"], "must not be given on the command line"),
        (["--api-key-file", "{missing}"], "--api-key-file {missing} does not exist"),
        (["--api-key-file"], "--api-key-file needs a path"),
        (["--polcy", "round_robin"], "unrecognized arguments: --polcy"),
        (["--policy", "fastest"], "invalid choice: 'fastest'"),
    ],
)
def test_bad_input_is_refused_with_a_message_and_exit_code_2(args, message, tmp_path):
    with refused_port() as port:
        values = {"refused": port, "missing": missing_path(tmp_path, "key")}
        result = run_router_main(*(a.format(**values) for a in args))
    assert result.returncode == 2, result.stderr
    assert message.format(**values) in result.stderr
    assert "Traceback" not in result.stderr and "secret-value" not in result.stderr


def test_an_empty_or_spaced_key_file_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("two words\n")
    for path, message in [(empty, "is empty"), (spaced, "must hold the key alone, on one line, without spaces")]:
        path.chmod(0o600)
        result = run_router_main("--api-key-file", str(path))
        assert result.returncode == 2 and message in result.stderr and "two words" not in result.stderr


def test_the_key_file_gets_the_servers_checks(tmp_path):
    """The router reads its key as the server does (credentials.read_key): a file others can read is refused."""
    shared = tmp_path / "key"
    shared.write_text("rk-secret-value\n")
    shared.chmod(0o644)
    result = run_router_main("--api-key-file", str(shared))
    assert result.returncode == 2, result.stderr
    assert (
        f"--api-key-file {shared} can be read by other users (mode 0644); make it private: chmod 600" in result.stderr
    )
    assert "rk-secret-value" not in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "dir-key").mkdir()
    result = run_router_main("--api-key-file", str(tmp_path / "dir-key"))
    assert result.returncode == 2 and "is a directory; give the file that holds the key" in result.stderr


def test_a_port_in_use_is_a_clear_error(tmp_path):
    squatter = StandIn(tmp_path, "squatter").start()
    try:
        with refused_port() as worker:
            result = run_router_main("--host", "127.0.0.1", "--port", str(squatter.port),
                                     "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                                     "--worker-urls", f"http://127.0.0.1:{worker}")  # fmt: skip
    finally:
        squatter.stop()
    assert result.returncode == 1
    assert re.search(r"the router stopped with an error: .*Address already in use", result.stderr)


# -- the benchmark through the router ------------------------------------------------------


def test_bench_run_against_the_router_reports_aggregate_and_per_request_throughput(tmp_path, run_cli):
    with cluster(tmp_path, 3, "--policy", "round_robin", worker_env={"RATE": "150", "FIRST_DELAY": "0.05"}) as (
        router,
        workers,
    ):
        output = tmp_path / "router.jsonl"
        result = run_cli("bench", "run", "--url", router.url, "--label", "router", "--concurrency", "6",
                         "--requests", "12", "--warmup", "0", "--max-tokens", "150", "--output", str(output),
                         "--no-plot")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    records = report.load(output)
    requests = [r for r in records if r["type"] == "request"]
    (level,) = [r for r in records if r["type"] == "level"]
    assert len(requests) == 12 and all(r["ok"] for r in requests)
    assert {w.name: len(w.served()) for w in workers} == {"w0": 4, "w1": 4, "w2": 4}
    # Per request: what the worker that served it actually sent, relayed by the router.
    sent = {row["prompt"]: row for w in workers for row in w.served()}
    prompts = {p["id"]: p["prompt"] for p in load_prompts()}
    for r in requests:
        stream = sent[prompts[r["prompt_id"]]]
        truth = (stream["tokens"] - 1) / (stream["sent"][-1] - stream["sent"][0])
        assert abs(r["decode_tok_s"] / truth - 1) < 0.02, (r["decode_tok_s"], truth)
    # Aggregate: every token of the level over its wall time, printed next to the per-request rates.
    assert level["output_tokens"] == 12 * 150 == sum(row["tokens"] for row in sent.values())
    aggregate = report.aggregate_tok_s(level)
    assert re.search(rf"router\s+6\s+12\s+0 .*\s{aggregate:.1f}\s*$", result.stdout, re.MULTILINE), result.stdout
    assert aggregate > 3 * statistics.median(r["decode_tok_s"] for r in requests)  # six streams at once
