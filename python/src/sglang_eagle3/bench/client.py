"""One streamed request against an SGLang server, timed chunk by chunk.

Both APIs give the cumulative completion token count in every streamed chunk (SGLang's ``/generate`` in
``meta_info``, with the speculative counters in the last event; the OpenAI-compatible one in ``usage`` with
``continuous_usage_stats``), so EAGLE bursts (several tokens in one chunk) are counted exactly. Decode throughput
is the tokens after the first chunk over the time after it, so time to first token does not dilute it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field

import aiohttp

from ..exit_status import ExitStatus
from ..files import loads_json
from . import BenchError

APIS = ("native", "openai")
# How long the server may take to say what it serves. SGLang opens its port only once the model is loaded, so a
# server that accepts the connection answers /model_info at once; one that does not answer in this time is hung
# or not SGLang (a port forwarded to nothing).
IDENTIFY_TIMEOUT_S = 30.0
YIELD_BEFORE_BOOKKEEPING_S = 0.002
# meta_info.completion_tokens (native) and usage.completion_tokens (OpenAI) are both cumulative.
COMPLETION_TOKENS = re.compile(r'"completion_tokens":\s*(\d+)')
_KEY = '"completion_tokens"'


def _completion_tokens(payload: str) -> int | None:
    """The cumulative token count of an event, without parsing it: events carry the whole text so far (parsing each
    costs O(tokens)), and the count sits in meta_info / usage at the end, so it is searched for backwards."""
    at = payload.rfind(_KEY)
    if at < 0:
        return None
    match = COMPLETION_TOKENS.match(payload, at)
    return int(match.group(1)) if match else None


@dataclass
class RequestResult:
    index: int
    prompt_id: str
    concurrency: int
    ok: bool
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    decode_tok_s: float | None = None
    output_tokens: int | None = None  # as the server counted them
    # Arrival of each chunk after the request was sent, in integer microseconds (cheap to
    # serialise: the record is written while other streams are still being timed).
    chunk_times_us: list[int] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)  # tokens in each chunk
    tokens_estimated: bool = False  # the server gave no per-chunk counts (not SGLang)
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_verify_ct: int | None = None

    def to_record(self, label: str) -> dict:
        # Not dataclasses.asdict: it deep-copies ~1,000-element lists (ms each), and any
        # time spent here delays the timestamps of chunks still streaming in.
        return {"type": "request", "label": label, **vars(self)}


def inter_token_latencies_ms(chunk_times_us: list[int], chunk_tokens: list[int]) -> list[float]:
    """Per-token latency: a chunk of k tokens arriving g after the previous one counts k tokens of g/k."""
    gaps = [b - a for a, b in zip(chunk_times_us, chunk_times_us[1:], strict=False)]
    return [g / k / 1000 for g, k in zip(gaps, chunk_tokens[1:], strict=True) for _ in range(k)]


def request_body(api: str, prompt: str, max_tokens: int, ignore_eos: bool, model: str) -> tuple[str, dict]:
    if api == "native":
        return "/generate", {
            "text": prompt,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": max_tokens, "ignore_eos": ignore_eos},
            "stream": True,
        }
    return "/v1/chat/completions", {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,  # SGLang extension
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def _has_content(api: str, event: dict) -> bool:
    if api == "native":
        return True
    return any((c.get("delta") or {}).get("content") for c in event.get("choices") or [])


def _tokens_so_far(api: str, payload: str, counts: list[int]) -> tuple[int | None, bool]:
    """An event's cumulative token count, and whether it is a guess: a server that gives no counts gets one token
    per content chunk after the counts so far (None: an event without content)."""
    so_far = _completion_tokens(payload)
    if so_far is not None:
        return so_far, False
    event = loads_json(payload)
    if "error" in event:
        raise BenchError(f"server error mid-stream: {event['error']}")
    return ((counts[-1] if counts else 0) + 1, True) if _has_content(api, event) else (None, False)


async def _sse_lines(response: aiohttp.ClientResponse):
    """(arrival time, line) for each line of the stream, timed when its bytes were read: lines of one network read
    share its timestamp, so time spent parsing one event never delays the timestamp of the next."""
    buffer = b""
    async for data in response.content.iter_any():
        now = time.perf_counter()
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield now, line.rstrip(b"\r")
    if buffer:
        yield time.perf_counter(), buffer


async def stream_one(
    client: aiohttp.ClientSession,
    api: str,
    prompt_id: str,
    prompt: str,
    max_tokens: int,
    ignore_eos: bool,
    index: int,
    concurrency: int,
    model: str = "default",
) -> RequestResult:
    path, body = request_body(api, prompt, max_tokens, ignore_eos, model)
    result = RequestResult(index=index, prompt_id=prompt_id, concurrency=concurrency, ok=False)
    times: list[float] = []
    counts: list[int] = []
    last_payload = "{}"
    estimated = False
    start = time.perf_counter()
    try:
        async with client.post(path, json=body) as response:
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")[:300]
                result.error = f"HTTP {response.status} from {path}: {text}"
                return result
            async for now, line in _sse_lines(response):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip().decode()
                if payload == "[DONE]":
                    break
                so_far, guessed = _tokens_so_far(api, payload, counts)
                if so_far is None:
                    continue
                estimated, last_payload = estimated | guessed, payload
                if counts and so_far <= counts[-1]:
                    continue  # a usage-only or final chunk with no new tokens
                times.append(now)
                counts.append(so_far)
    except (aiohttp.ClientError, TimeoutError, BenchError, json.JSONDecodeError) as err:
        result.error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        return result
    # Let the other streams' chunks that are already here be timestamped before this
    # request's bookkeeping (and record writing) holds the event loop.
    await asyncio.sleep(YIELD_BEFORE_BOOKKEEPING_S)
    if not counts:
        result.error = "the stream ended without any token"
        return result
    if counts[-1] < max_tokens and ignore_eos and not estimated:
        result.error = f"stream ended after {counts[-1]} of {max_tokens} tokens"
        return result

    result.ok = True
    result.tokens_estimated = estimated
    result.ttft_s = times[0] - start
    result.e2e_s = times[-1] - start
    result.output_tokens = counts[-1]
    result.chunk_tokens = [counts[0]] + [b - a for a, b in zip(counts, counts[1:], strict=False)]
    result.chunk_times_us = [round((t - start) * 1e6) for t in times]
    decode_tokens = counts[-1] - counts[0]
    if decode_tokens > 0 and times[-1] > times[0]:
        result.decode_tok_s = decode_tokens / (times[-1] - times[0])
    meta = loads_json(last_payload).get("meta_info") or {}
    result.spec_accept_length = meta.get("spec_accept_length")
    result.spec_accept_rate = meta.get("spec_accept_rate")
    result.spec_verify_ct = meta.get("spec_verify_ct")
    return result


async def _get_json(client: aiohttp.ClientSession, path: str, timeout: float | None = None) -> tuple[int, dict | None]:
    async with client.get(path, timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None) as response:
        try:
            return response.status, await response.json(content_type=None)
        except ValueError:
            return response.status, None


async def identify(client: aiohttp.ClientSession, api: str) -> dict:
    """Check this is an SGLang server before sending load; returns /model_info."""
    base = str(client._base_url)
    try:
        status, info = await _get_json(client, "/model_info", IDENTIFY_TIMEOUT_S)
        if status == 404:
            status, info = await _get_json(client, "/get_model_info", IDENTIFY_TIMEOUT_S)
    except TimeoutError:
        raise BenchError(
            f"{base} did not answer /model_info within {IDENTIFY_TIMEOUT_S:.0f} s: the port is open but nothing "
            "answers there (a hung server, or not an SGLang server); check the URL and the server's log",
            ExitStatus.CHECK_FAILED,
        ) from None
    except aiohttp.ClientError as err:  # a server that does not answer is a failed check, as the hub's is (models)
        raise BenchError(f"cannot reach {base}: {type(err).__name__} {err}".strip(), ExitStatus.CHECK_FAILED) from None
    if status == 401:
        has_key = "Authorization" in client.headers
        raise BenchError(
            f"{base} rejected the API key (HTTP 401); check --api-key-file"
            if has_key
            else f"{base} requires an API key (HTTP 401): give --api-key-file FILE "
            "(or run with $CREDENTIALS_DIRECTORY/api-key)"
        )
    if status != 200:
        raise BenchError(
            f"{base} does not look like an SGLang server: /model_info answered "
            f"HTTP {status}; check the URL (e.g. http://127.0.0.1:30000)"
        )
    if not isinstance(info, dict) or "model_path" not in info:
        raise BenchError(f"{base}/model_info is not SGLang's model info; is this an SGLang server?")
    return info


async def server_info(client: aiohttp.ClientSession) -> dict:
    """/server_info (or the old /get_server_info); empty when unavailable."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, info = await _get_json(client, path)
        except (aiohttp.ClientError, TimeoutError):
            return {}
        if status == 200 and isinstance(info, dict):
            return info
    return {}


def avg_spec_accept_length(info: dict) -> float | None:
    values = [s.get("avg_spec_accept_length") for s in info.get("internal_states") or [] if isinstance(s, dict)]
    values = [v for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None
