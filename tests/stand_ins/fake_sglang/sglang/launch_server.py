"""A stand-in SGLang server: SGLang's HTTP formats, tokens streamed at a known rate.

Accepts SGLang's command line (it reads --host, --port and the --speculative-* flags
and ignores the rest). Behaviour is set with environment variables:

  FAKE_SGLANG_RATE          true decode rate in tok/s per request (default 100)
  FAKE_SGLANG_FIRST_DELAY   seconds before the first token (default 0.05)
  FAKE_SGLANG_BURST         tokens per streamed chunk after the first (EAGLE-style bursts)
  FAKE_SGLANG_READY_AFTER   seconds until /health_generate answers 200 (default 0)
  FAKE_SGLANG_NEVER_READY   never healthy
  FAKE_SGLANG_EXIT_AFTER    exit with code 7 after this many seconds
  FAKE_SGLANG_SIGNAL_LOG    file to append the names of received SIGTERM/SIGINT to
  FAKE_SGLANG_FAIL_AFTER    break every stream after this many tokens (error mid-stream)
  FAKE_SGLANG_DIE_AFTER     exit abruptly after this many finished requests (server killed)
  FAKE_SGLANG_SEND_LOG      file to append, per finished request, a JSON line with the prompt, the
                            CLOCK_MONOTONIC time it was received and each chunk was handed to the socket
  FAKE_SGLANG_API_KEY_FILE  require "Authorization: Bearer <key>" (the file's content) on every
                            path but /health* and /metrics*, as SGLang's --api-key does; /server_info
                            then also shows api_key, as unpatched 0.5.9 does
  FAKE_SGLANG_IGNORE_STOP   log SIGTERM/SIGINT but go on (a server that does not stop when asked)
  FAKE_SGLANG_MAX_RUNNING   requests decoded at once; more wait in the queue (default: no limit)
  FAKE_SGLANG_KV_TOKENS     size of the pretend KV cache pool in tokens (default 100000)
  FAKE_SGLANG_DRAFT_QUALITY JSON {draft path: quality}: scales what speculation gains with that
                            draft (1 = the model below, 0.5 = half its extra accepted tokens and speed-up)

GET /metrics serves SGLang 0.5.9's Prometheus metrics, fed by what was served (fake_metrics.py).
For the router (which sits in front of several of these): /v1/loads (SGLang 0.5.9's shape,
srt/entrypoints/v1_loads.py) and the deprecated /get_load report the requests and tokens in
flight, /flush_cache answers, and a request with "stream": false gets one JSON answer once its
last token is due, as SGLang does.

With a speculative algorithm the rate and burst follow a made-up model of (steps, top-k,
draft tokens) with one clear best point, scaled by the draft's quality, so sweeps across
settings and drafts have something to find.
The true rate is reported in /server_info as "fake_true_rate".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time

from sglang.fake_metrics import Metrics

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=30000)
parser.add_argument("--model-path", default="fake/model")
parser.add_argument("--speculative-algorithm")
parser.add_argument("--speculative-num-steps", type=int, default=3)
parser.add_argument("--speculative-eagle-topk", type=int, default=1)
parser.add_argument("--speculative-num-draft-tokens", type=int, default=4)
parser.add_argument("--decode-log-interval", type=int, default=40)  # SGLang's default (server_args.py:393)
parser.add_argument("--speculative-draft-model-path")
args, _ = parser.parse_known_args()
env = os.environ

BASE_RATE = float(env.get("FAKE_SGLANG_RATE", 100))
FIRST_DELAY = float(env.get("FAKE_SGLANG_FIRST_DELAY", 0.05))
STARTED = time.monotonic()
READY_AFTER = float(env.get("FAKE_SGLANG_READY_AFTER", 0))
FAIL_AFTER = int(env["FAKE_SGLANG_FAIL_AFTER"]) if env.get("FAKE_SGLANG_FAIL_AFTER") else None
DIE_AFTER = int(env["FAKE_SGLANG_DIE_AFTER"]) if env.get("FAKE_SGLANG_DIE_AFTER") else None
SEND_LOG = env.get("FAKE_SGLANG_SEND_LOG")
DRAFT_QUALITY = json.loads(env.get("FAKE_SGLANG_DRAFT_QUALITY", "{}")).get(args.speculative_draft_model_path, 1.0)
API_KEY = open(env["FAKE_SGLANG_API_KEY_FILE"]).read().strip() if env.get("FAKE_SGLANG_API_KEY_FILE") else None

if args.speculative_algorithm:
    steps, topk, draft = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    ACCEPT_LENGTH = 1 + 0.75 * min(steps, draft - 1) * (1 - 0.08 * steps) + 0.1 * (topk - 1)
    # Real speed-up curves are flat near the top; this one has a clear peak at (3, 1, 4),
    # at least 15% ahead of any other point, so a sweep finds it despite timing noise.
    SPEED_UP = 1.7 - 0.25 * (steps - 3) ** 2 - 0.3 * (topk - 1) - 0.1 * abs(draft - steps - 1)
    ACCEPT_LENGTH = 1 + (ACCEPT_LENGTH - 1) * DRAFT_QUALITY
    RATE = BASE_RATE * max(0.3, 1 + (SPEED_UP - 1) * DRAFT_QUALITY)
    BURST = int(env.get("FAKE_SGLANG_BURST", round(ACCEPT_LENGTH)))
else:
    ACCEPT_LENGTH, RATE, BURST = None, BASE_RATE, int(env.get("FAKE_SGLANG_BURST", 1))
finished = {"count": 0}
in_flight = {"requests": 0, "tokens": 0}  # what /get_load reports
MAX_RUNNING = int(env["FAKE_SGLANG_MAX_RUNNING"]) if env.get("FAKE_SGLANG_MAX_RUNNING") else None
metrics = Metrics(args.model_path, args.speculative_num_draft_tokens if ACCEPT_LENGTH else None,
                  int(env.get("FAKE_SGLANG_KV_TOKENS", 100_000)), args.decode_log_interval)  # fmt: skip


def ready() -> bool:
    return not env.get("FAKE_SGLANG_NEVER_READY") and time.monotonic() - STARTED >= READY_AFTER


def schedule(max_tokens: int):
    """(due time offset, tokens in the chunk): one token first, then bursts; token i is due at FIRST_DELAY + i/RATE."""
    yield FIRST_DELAY, 1
    sent = 1
    while sent < max_tokens:
        n = min(BURST, max_tokens - sent)
        sent += n
        yield FIRST_DELAY + (sent - 1) / RATE, n


def native_chunk(done: int, total: int, final: bool) -> dict:
    meta = {"id": "req", "prompt_tokens": 12, "completion_tokens": done, "cached_tokens": 0,
            "finish_reason": {"type": "length", "length": total} if final else None}  # fmt: skip
    if final and ACCEPT_LENGTH:
        verify = max(1, round((total - 1) / ACCEPT_LENGTH))
        rate = (total / verify - 1) / max(1, args.speculative_num_draft_tokens - 1)
        meta.update(spec_verify_ct=verify, spec_accept_length=total / verify, spec_accept_rate=rate)
    return {"text": " tok" * done, "meta_info": meta}


def openai_chunk(done: int, total: int, final: bool) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": args.model_path,
            "choices": [{"index": 0, "delta": {"content": " tok"}, "finish_reason": "length" if final else None}],
            "usage": {"prompt_tokens": 12, "completion_tokens": done, "total_tokens": 12 + done}}  # fmt: skip


def response(code: int, body: bytes = b"", content_type: str = "application/json") -> bytes:
    reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 503: "Service Unavailable"}[code]
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + body


def get(path: str) -> bytes:
    if path.startswith("/health"):
        return response(200 if ready() else 503)
    if path in ("/model_info", "/get_model_info"):
        return response(200, json.dumps({"model_path": args.model_path, "is_generation": True}).encode())
    if path in ("/server_info", "/get_server_info"):
        state = {"avg_spec_accept_length": ACCEPT_LENGTH} if ACCEPT_LENGTH else {}
        state.update({"api_key": API_KEY} if API_KEY else {})  # as 0.5.9's vars(server_args) has it
        body = {"model_path": args.model_path, "served_model_name": args.model_path,
                "speculative_algorithm": args.speculative_algorithm, "internal_states": [state],
                "fake_true_rate": RATE, "fake_burst": BURST, "fake_draft_quality": DRAFT_QUALITY,
                **({"api_key": API_KEY} if API_KEY else {})}  # fmt: skip
        return response(200, json.dumps(body).encode())
    if path == "/metrics":
        body, content_type = metrics.page()
        return response(200, body, content_type)
    if path == "/v1/models":
        return response(200, json.dumps({"object": "list", "data": [{"id": args.model_path}]}).encode())
    if path == "/get_load":  # SGLang's shape: one entry per data-parallel rank
        load = {"dp_rank": 0, "num_reqs": in_flight["requests"], "num_waiting_reqs": 0,
                "num_tokens": in_flight["tokens"]}  # fmt: skip
        return response(200, json.dumps([load]).encode())
    if path == "/v1/loads":  # 0.5.9's /v1/loads: per-rank loads (GetLoadsReqOutput) and their aggregate
        return response(200, json.dumps(v1_loads()).encode())
    if path == "/flush_cache":
        return response(200, b"Cache flushed.\n", "text/plain")
    return response(404, b'{"detail": "Not Found"}')


def v1_loads() -> dict:
    """SGLang 0.5.9's /v1/loads answer (srt/entrypoints/v1_loads.py get_loads, its core fields) for one rank."""
    capacity = int(env.get("FAKE_SGLANG_KV_TOKENS", 100_000))
    usage = round(in_flight["tokens"] / capacity, 4)
    load = {"dp_rank": 0, "num_running_reqs": in_flight["requests"], "num_waiting_reqs": 0,
            "num_used_tokens": in_flight["tokens"], "max_total_num_tokens": capacity, "token_usage": usage,
            "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": usage,
            "max_running_requests": MAX_RUNNING or 1024, "num_total_reqs": in_flight["requests"]}  # fmt: skip
    aggregate = {"total_running_reqs": in_flight["requests"], "total_waiting_reqs": 0,
                 "total_reqs": in_flight["requests"], "avg_token_usage": usage, "avg_throughput": 0.0,
                 "avg_utilization": usage}  # fmt: skip
    return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "version": "0.5.9",
            "dp_rank_count": 1, "loads": [load], "aggregate": aggregate}  # fmt: skip


async def complete(writer: asyncio.StreamWriter, prompt: str, max_tokens: int, chunk) -> None:
    """A non-streamed request: one answer when its last token is due."""
    received = time.monotonic()
    await asyncio.sleep(FIRST_DELAY + (max_tokens - 1) / RATE)
    final = chunk(max_tokens, max_tokens, True)
    if "choices" in final:  # OpenAI: a chat.completion, not a chunk
        final.update(object="chat.completion")
        final["choices"][0]["message"] = {"role": "assistant", "content": " tok" * max_tokens}
    if SEND_LOG:
        with open(SEND_LOG, "a") as f:
            row = {"prompt": prompt, "tokens": max_tokens, "received": received, "sent": [time.monotonic()]}
            f.write(json.dumps(row) + "\n")
    writer.write(response(200, json.dumps(final).encode()))
    finished["count"] += 1
    if DIE_AFTER is not None and finished["count"] >= DIE_AFTER:
        await writer.drain()
        os._exit(9)


async def stream(writer: asyncio.StreamWriter, prompt: str, max_tokens: int, chunk) -> None:
    # Streams end when the connection closes, as SSE over HTTP/1.1 with Connection: close.
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    loop = asyncio.get_running_loop()
    received = time.monotonic()
    metrics.queued += 1
    async with slots:
        metrics.queued -= 1
        try:
            await decode(writer, prompt, max_tokens, chunk, loop, received)
        finally:
            metrics.running.pop(id(writer), None)


async def decode(writer, prompt: str, max_tokens: int, chunk, loop, received: float) -> None:
    start = loop.time()
    done = 0
    sent: list[float] = []
    handed: list[float] = []
    prompt_tokens = len(prompt.split())
    for due, n in schedule(max_tokens):
        delay = start + due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        done += n
        if FAIL_AFTER is not None and done > FAIL_AFTER:
            writer.write(b'data: {"error": {"message": "fake failure mid-stream"}}\n\n')
            return
        data = f"data: {json.dumps(chunk(done, max_tokens, done >= max_tokens))}\n\n".encode()
        # The chunk reaches the socket between these two times: a late wake-up of this process
        # on a busy machine shows here, not as the client's error.
        sent.append(time.monotonic())
        writer.write(data)  # asyncio sends at once when nothing is queued
        handed.append(time.monotonic())
        await writer.drain()
        metrics.running[id(writer)] = prompt_tokens + done
        if len(sent) == 1:
            metrics.first_token(received, sent[0])
        else:
            metrics.chunk(sent[-1] - sent[-2], n)
    metrics.finished(prompt_tokens, done, received, time.monotonic())
    if SEND_LOG:  # written before [DONE], so it is there by the time the client has finished
        with open(SEND_LOG, "a") as f:
            row = {"prompt": prompt, "tokens": done, "received": received, "sent": sent, "handed": handed}
            f.write(json.dumps(row) + "\n")
    writer.write(b"data: [DONE]\n\n")
    await writer.drain()
    finished["count"] += 1
    if DIE_AFTER is not None and finished["count"] >= DIE_AFTER:
        os._exit(9)  # killed: no goodbye


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request_line = (await reader.readline()).decode()
        if not request_line:
            return
        method, path, _ = request_line.split(" ", 2)
        path = path.split("?", 1)[0]  # /v1/loads?include=core
        headers = {}
        while (line := (await reader.readline()).decode().strip()) != "":
            name, _, value = line.partition(":")
            headers[name.lower()] = value.strip()
        length = int(headers.get("content-length", 0))
        body = json.loads(await reader.readexactly(length)) if length else {}
        chunk = native_chunk if path == "/generate" else openai_chunk
        if (
            API_KEY
            and not path.startswith(("/health", "/metrics"))
            and headers.get("authorization") != f"Bearer {API_KEY}"
        ):
            writer.write(response(401, b'{"error": "Unauthorized"}'))
        elif method == "GET" or path == "/flush_cache":
            writer.write(get(path))
        elif path in ("/generate", "/v1/chat/completions"):
            if path == "/generate":
                prompt, max_tokens = body.get("text", ""), body.get("sampling_params", {}).get("max_new_tokens", 16)
            else:
                prompt, max_tokens = (body.get("messages") or [{}])[-1].get("content", ""), body.get("max_tokens", 16)
            in_flight["requests"] += 1
            in_flight["tokens"] += max_tokens
            try:
                await (stream if body.get("stream") else complete)(writer, prompt, max_tokens, chunk)
            finally:
                in_flight["requests"] -= 1
                in_flight["tokens"] -= max_tokens
        else:
            writer.write(response(404, b'{"detail": "Not Found"}'))
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main() -> None:
    global slots
    slots = asyncio.Semaphore(MAX_RUNNING or 1_000_000)
    server = await asyncio.start_server(handle, args.host, args.port, reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if env.get("FAKE_SGLANG_SIGNAL_LOG"):
            with open(env["FAKE_SGLANG_SIGNAL_LOG"], "a") as f:
                f.write(signal.Signals(signum).name + "\n")
        if not env.get("FAKE_SGLANG_IGNORE_STOP"):
            stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    if env.get("FAKE_SGLANG_EXIT_AFTER"):
        loop.call_later(float(env["FAKE_SGLANG_EXIT_AFTER"]), os._exit, 7)
    async with server:
        await stop.wait()


asyncio.run(main())
sys.exit(0)
