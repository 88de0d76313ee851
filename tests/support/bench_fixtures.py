"""Start the stand-in SGLang server (tests/stand_ins/fake_sglang) on loopback for benchmark tests."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import NamedTuple

from sglang_eagle3.bench.runner import load_prompts
from sglang_eagle3.serving import launcher
from sglang_eagle3.serving.launch_plan import LaunchPlan

FAKE_SGLANG = Path(__file__).resolve().parents[1] / "stand_ins" / "fake_sglang"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer(NamedTuple):
    url: str
    true_rate: float  # the rate the stand-in is scheduled to stream at
    send_log: Path  # one JSON line per finished stream: prompt, tokens, the time each chunk was sent

    def delivered_rate(self, prompt_id: str) -> float:
        """The decode rate the server actually sent for the one stream of this prompt.

        Same definition as the client's (tokens after the first over the time after the
        first), on the server's side of the socket. On a busy machine a late wake-up of
        the server shifts the truth; measuring against what was sent keeps the test about
        the client's accuracy.
        """
        stream = self._stream(prompt_id)
        return (stream["tokens"] - 1) / (stream["sent"][-1] - stream["sent"][0])

    def delivered_rate_bounds(self, prompt_id: str) -> tuple[float, float]:
        """The slowest and fastest rate consistent with when the first and last chunk left.

        Each chunk reached the socket between the server's time before and after handing it
        over; if the server was preempted in between, the truth lies anywhere in that window.
        """
        stream = self._stream(prompt_id)
        before, after, decoded = stream["sent"], stream["handed"], stream["tokens"] - 1
        return decoded / (after[-1] - before[0]), decoded / (before[-1] - after[0])

    def _stream(self, prompt_id: str) -> dict:
        text = next(p["prompt"] for p in load_prompts() if p["id"] == prompt_id)
        streams = [json.loads(line) for line in self.send_log.read_text().splitlines()]
        (stream,) = [s for s in streams if s["prompt"] == text]
        return stream


@contextlib.contextmanager
def fake_server(*args: str, **env: str):
    """Yields a FakeServer; env keys are FAKE_SGLANG_* without the prefix, e.g. RATE="200".

    Started, awaited and stopped by the launcher, as the real server is.
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        send_log = Path(tmp) / "sent.jsonl"
        plan = LaunchPlan(
            [sys.executable, "-m", "sglang.launch_server", "--port", str(port), *args],
            {"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_SEND_LOG": str(send_log),
             **{f"FAKE_SGLANG_{k}": str(v) for k, v in env.items()}},
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        with launcher.running(plan, f"{url}/health_generate", ready_timeout=20, stop_timeout=10, interval=0.05):
            key_file = env.get("API_KEY_FILE")
            headers = {"Authorization": f"Bearer {Path(key_file).read_text().strip()}"} if key_file else {}
            request = urllib.request.Request(f"{url}/server_info", headers=headers)
            with urllib.request.urlopen(request, timeout=5) as response:
                yield FakeServer(url, json.load(response)["fake_true_rate"], send_log)
