"""A model's files: weights pinned by commit and per-file hash (lock, fetch, verify), and what the checks read of them.

The hub's token is read from a file, never from argv or the environment; draft_inputs reads a model's config.json and
safetensors headers without torch or the network (what the probe and preflight judge a draft and its target by).
"""

from __future__ import annotations

from ..errors import Eagle3Error
from ..exit_status import ExitStatus


class ModelsError(Eagle3Error):
    """A failure with a message that says what is wrong and what to do; ``kind`` names it for ``--json`` output."""

    def __init__(self, kind: str, message: str, status: ExitStatus | None = None):
        super().__init__(message, status)
        self.kind = kind

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": str(self)}
