"""The model lock: one JSON file per model (ModelLock below), enough to fetch and verify it byte for byte.

For LFS files (the weights) size and sha256 are what the hub publishes; git_blob_id is
the id of the LFS pointer. Small files are stored in git, and the hub publishes only their
git blob id (a sha1 of a git header and the content, not a sha256): `models lock` downloads
them, checks that id, and records their sha256, so every file verifies the same way and
Nix can fetch each one as a fixed-output derivation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import shown, shown_path
from ..exit_status import ExitStatus
from ..files import loads_json, write_atomic
from . import ModelsError

FORMAT = "sglang-eagle3-model-lock"
VERSION = 1
# Directories inside a model directory that belong to the tools, not to the model:
# ours (fetch state, partial downloads) and huggingface_hub's local-dir metadata.
RESERVED_DIRS = (".sglang-eagle3", ".cache/huggingface")
REPO_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
HEX40 = r"^[0-9a-f]{40}$"
HEX64 = r"^[0-9a-f]{64}$"


class LockedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Path inside the repository, '/'-separated.")
    size: int = Field(ge=0, description="Size in bytes.")
    sha256: str = Field(pattern=HEX64, description="sha256 of the content (LFS: as the hub publishes it).")
    git_blob_id: str = Field(pattern=HEX40, description="Git blob id (LFS: of the pointer file).")
    lfs: bool = Field(description="Stored with Git LFS.")

    @field_validator("path")
    @classmethod
    def _relative_and_plain(cls, path: str) -> str:
        parts = PurePosixPath(path).parts
        if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in path.split("/")):
            raise ValueError(f"{shown(path)} must be a relative path without '.', '..' or empty parts")
        if any("/".join(parts[: len(r.split("/"))]) == r for r in RESERVED_DIRS):
            raise ValueError(
                f"{shown(path)} lies in a directory the tools keep for themselves ({', '.join(RESERVED_DIRS)})"
            )
        return path


class ModelLock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = FORMAT
    version: int = VERSION
    repo: str = Field(description="Hugging Face repository id, owner/name.")
    revision: str = Field(description="The revision that was asked for (branch, tag or commit).")
    commit: str = Field(pattern=HEX40, description="The commit that revision resolved to: what is fetched.")
    gated: bool = False
    private: bool = False
    locked_at: str = Field(description="When the lock was made (UTC, ISO 8601).")
    total_size: int = Field(ge=0)
    files: list[LockedFile]

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value != FORMAT:
            raise ValueError(f"not a model lock (format {shown(value)}, expected {FORMAT!r})")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if value != VERSION:
            raise ValueError(f"lock version {value} is not supported by this sglang-eagle3 (it reads {VERSION})")
        return value

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not REPO_ID.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a Hugging Face repository id (owner/name)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ModelLock:
        if not self.files:
            raise ValueError("files: a lock lists at least one file")
        seen: set[str] = set()
        for f in self.files:
            if f.path in seen:
                raise ValueError(f"files: {shown(f.path)} is listed twice")
            seen.add(f.path)
        if self.total_size != sum(f.size for f in self.files):
            raise ValueError(f"total_size {self.total_size} is not the sum of the file sizes")
        return self

    @property
    def name(self) -> str:
        """The model's short name: the repository name without its owner."""
        return self.repo.rsplit("/", 1)[-1]


def describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


def load(path: Path) -> ModelLock:
    """Read and validate a lock file; every problem is a ModelsError naming the file and the field."""
    if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device would block or never end
        raise ModelsError("bad_lock", f"lock file {shown_path(path)} is not a regular file", ExitStatus.BAD_INPUT)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ModelsError(
            "bad_lock", f"cannot read lock file {shown_path(path)}: {err.strerror}", ExitStatus.BAD_INPUT
        ) from None
    except UnicodeDecodeError:
        raise ModelsError(
            "bad_lock", f"lock file {shown_path(path)} is not UTF-8 text: a lock is the JSON file "
            "`sglang-eagle3 models lock` writes", ExitStatus.BAD_INPUT,
        ) from None  # fmt: skip
    try:
        data = loads_json(text)
    except json.JSONDecodeError as err:
        raise ModelsError(
            "bad_lock", f"lock file {shown_path(path)} is not valid JSON: {err}", ExitStatus.BAD_INPUT
        ) from None
    if not isinstance(data, dict):
        raise ModelsError(
            "bad_lock",
            f"lock file {shown_path(path)}: expected a JSON object (one model per lock file)",
            ExitStatus.BAD_INPUT,
        )
    try:
        return ModelLock.model_validate(data)
    except ValidationError as err:
        hint = "; make it again with `sglang-eagle3 models lock`"
        raise ModelsError(
            "bad_lock", f"lock file {shown_path(path)} is malformed: {describe(err)}{hint}", ExitStatus.BAD_INPUT
        ) from None


def file_name(repo: str) -> str:
    """A repository's lock file name, OWNER--NAME.lock.json: what `models lock -o DIR/` writes, and hints name."""
    return f"{repo.replace('/', '--')}.lock.json"


def dump(lock: ModelLock) -> str:
    return json.dumps(lock.model_dump(), indent=2) + "\n"


def write(lock: ModelLock, path: Path) -> None:
    """Write atomically: a lock is either the old one or the new one, never half of each."""
    write_atomic(path, dump(lock))


def json_schema() -> dict:
    return ModelLock.model_json_schema()
