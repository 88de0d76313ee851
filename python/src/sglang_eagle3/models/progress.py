"""Progress of long byte counts (downloads, hashing): a bar on a terminal, lines in logs.

On a terminal: a rich bar with bytes done, rate and time left. Elsewhere (systemd's
journal, CI logs, a pipe) a bar is noise, so one line every `interval` seconds and one
at the end say the same.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class Progress:
    """Bytes done out of a total; safe to advance from several threads."""

    def __init__(
        self, label: str, total: int, initial: int = 0, stream: TextIO | None = None, interval: float = 30.0
    ) -> None:
        self.label, self.total, self.initial = label, total, initial
        self.stream = stream or sys.stderr
        self.interval = interval
        self.completed = initial
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._last_line = self.started
        self._bar = None
        if self.stream.isatty():
            from rich import progress as rich_progress
            from rich.console import Console

            rp = rich_progress
            self._bar = rp.Progress(
                rp.TextColumn("{task.description}"), rp.BarColumn(), rp.DownloadColumn(), rp.TransferSpeedColumn(),
                rp.TimeRemainingColumn(), console=Console(file=self.stream), transient=False,
            )  # fmt: skip
            self._task = self._bar.add_task(label, total=total, completed=initial)
            self._bar.start()

    def advance(self, n: int) -> None:
        with self._lock:
            self.completed += n
        self._render()

    def set(self, completed: int) -> None:
        with self._lock:
            self.completed = completed
        self._render()

    def _render(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed)
            return
        now = time.monotonic()
        if now - self._last_line >= self.interval:
            self._last_line = now
            self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = (self.completed - self.initial) / elapsed
        share = f" ({100 * self.completed / self.total:.0f}%)" if self.total else ""
        text = f"{self.label}: {human_bytes(self.completed)} of {human_bytes(self.total)}{share}"
        text += f", {human_bytes(rate)}/s"
        if not final and rate > 0 and self.total > self.completed:
            text += f", about {human_seconds((self.total - self.completed) / rate)} left"
        if final:
            text += f", {human_seconds(elapsed)}"
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed)
            self._bar.stop()
        elif self.total:
            self._line(time.monotonic(), final=True)
