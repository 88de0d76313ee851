"""Progress lines on stderr while a first run works for a while (fetching, unpacking or auditing a release: tens
of seconds, once). stdout stays the command's own output, JSON included. Shared by the layer that gets trees
(trees/) and the one that reads them (source/), so it lives below both."""

from __future__ import annotations

import contextlib
import sys
import threading
import time


def progress(message: str) -> None:
    """A line on stderr while a first run fetches, unpacks or audits a release (tens of seconds, once; stdout stays
    the command's own output, JSON included)."""
    print(f"sglang-eagle3: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def working(message: str, every: float = 15.0):
    """``message`` as a progress line, then a line every ``every`` seconds until the block ends: a first run that
    reads for a minute is never silent."""
    progress(f"{message} ...")
    done = threading.Event()
    started = time.monotonic()

    def tick():
        while not done.wait(every):
            progress(f"... still at it ({time.monotonic() - started:.0f} s)")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
