"""A model's files: weights pinned by commit and per-file hash (lock, fetch, verify), and what the checks read of them.

- ``lockfile``: the lock format (one JSON file per model: repo, commit, every file with
  its size, sha256 and git blob id) and its validation.
- ``hub``: everything that talks to the Hugging Face Hub, through huggingface_hub:
  resolving a revision into a lock, downloading one file at the locked commit, the
  token (read from a file, never from argv or the environment) and the hub's errors
  turned into messages that say what to do.
- ``hashing``: streamed sha256 and git blob ids.
- ``verify``: a directory against a lock (sizes, hashes, missing and extra files).
- ``fetch``: a directory made to match a lock: resumable, parallel, each file verified
  before it is put in place.
- ``progress``: a progress bar on a terminal, periodic lines in logs.
- ``draft_inputs``: a model directory (local, or a hub id in the local cache) and its config.json and
  safetensors headers, read without torch or the network: what the probe and preflight judge a draft and its
  target by.
- ``cli``: the ``sglang-eagle3 models`` commands.
"""

from __future__ import annotations

from ..errors import Eagle3Error
from ..exit_status import ExitStatus


class ModelsError(Eagle3Error):
    """A failure with a message that says what is wrong and what to do.

    ``kind`` names the failure for ``--json`` output; ``status`` is ExitStatus.BAD_INPUT for
    bad input (malformed lock, unknown repo or revision, a token that is missing) and
    ExitStatus.CHECK_FAILED (the default) when a check or a download failed.
    """

    def __init__(self, kind: str, message: str, status: ExitStatus | None = None):
        super().__init__(message, status)
        self.kind = kind

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": str(self)}
