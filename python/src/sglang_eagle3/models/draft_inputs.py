"""Find a model's files (a local directory, or a hub id in the local Hugging Face cache) and read
its config.json and safetensors headers safely: no network, no torch, clear errors.

The hub cache is read through huggingface_hub's own cache API (``snapshot_download`` with
``local_files_only=True``), so HF_HOME / HF_HUB_CACHE and the cache layout are honoured
exactly as SGLang's own download will later honour them.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput, shown
from ..files import loads_json


class DraftInputError(BadInput):
    """A model path or config that cannot be used; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class ModelFiles:
    given: str  # as the user wrote it
    directory: Path | None  # None: a hub id not in the local cache
    source: str  # "local directory", "Hugging Face cache", or why there is no directory


def expanded(path: str) -> Path:
    """``path`` with ``~`` expanded; as given when it names no user of this host (the checks then report it)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~unknown-user
        return Path(path)


def looks_local(path: str) -> bool:
    """Whether a model path is a directory on this host rather than a Hugging Face id."""
    return path.startswith(("/", "./", "../", "~")) or expanded(path).exists()


def locate(path_or_id: str, what: str) -> ModelFiles:
    if not isinstance(path_or_id, str) or not path_or_id.strip():
        raise DraftInputError(f"{what}: expected a directory or a Hugging Face id, got {shown(path_or_id)}")
    if looks_local(path_or_id):
        directory = expanded(path_or_id)
        if not directory.is_dir():
            raise DraftInputError(f"{what} {directory} is not a directory; give the model's directory or its hub id")
        return ModelFiles(path_or_id, directory, "local directory")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils import HFValidationError, LocalEntryNotFoundError
    except ImportError:
        return ModelFiles(path_or_id, None, "huggingface_hub is not installed, so the hub cache cannot be read")
    except ValueError as err:  # one of its HF_* variables it cannot read (it reads them as it is imported)
        return ModelFiles(path_or_id, None, f"huggingface_hub refuses its environment ({shown(str(err))}), so "
                          "the hub cache cannot be read; check the HF_* variables")  # fmt: skip
    try:
        directory = snapshot_download(path_or_id, local_files_only=True)
    except HFValidationError:
        raise DraftInputError(
            f"{what} {shown(path_or_id)} is neither an existing directory nor a Hugging Face id (org/name)"
        ) from None
    except (LocalEntryNotFoundError, FileNotFoundError):
        return ModelFiles(path_or_id, None, "not in the local Hugging Face cache")
    return ModelFiles(path_or_id, Path(directory), "Hugging Face cache")


def read_config(directory: Path, what: str) -> dict:
    """config.json as a dict, or DraftInputError saying exactly what is wrong with it."""
    path = directory / "config.json"
    if not path.is_file():
        raise DraftInputError(f"{what} {directory} has no config.json; point at the model's top directory")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise DraftInputError(f"{path} is not UTF-8 text (byte {err.start}); is it really a config.json?") from None
    except OSError as err:
        raise DraftInputError(f"cannot read {path}: {err.strerror}") from None
    try:
        data = loads_json(text)
    except json.JSONDecodeError as err:
        raise DraftInputError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    if not isinstance(data, dict):
        raise DraftInputError(f"{path} must hold a JSON object, not a JSON {type(data).__name__}")
    return data


class Fields:
    """Typed access to one config dict; a wrong type is a DraftInputError naming the file and field."""

    def __init__(self, data: dict, where: str):
        self.data, self.where = data, where

    def _fail(self, key: str, expected: str):
        raise DraftInputError(f"{self.where}: {key} must be {expected}, not {shown(self.data[key])}")

    def integer(self, key: str, required: bool = False, minimum: int | None = 1) -> int | None:
        value = self.data.get(key)
        if value is None:
            if required and key in self.data:  # null: present, so the model class gets None
                self._fail(key, "an integer" + (f" >= {minimum}" if minimum is not None else ""))
            if required:
                raise DraftInputError(f"{self.where} has no {key}; is this a model config.json?")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            self._fail(key, "an integer" + (f" >= {minimum}" if minimum is not None else ""))
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self._fail(key, "true or false")
        return value

    def architecture(self) -> str:
        value = self.data.get("architectures")
        if value is None:
            raise DraftInputError(f"{self.where} has no architectures; is this a model config.json?")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            self._fail("architectures", "a non-empty list of class names")
        return value[0]

    def section(self, key: str) -> Fields | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self._fail(key, "a JSON object")
        return Fields(value, f"{self.where} {key}")

    def int_list(self, key: str) -> list[int] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self._fail(key, "a list of integers")
        return value


# -- safetensors headers ----------------------------------------------------------------

MAX_HEADER = 100 * 1024 * 1024  # the safetensors format caps its JSON header at 100 MB


def safetensors_header(path: Path) -> dict:
    """The JSON header of a .safetensors file: 8-byte little-endian length, then JSON (the file format)."""
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER:
            raise ValueError(f"header length {length} is not plausible")
        header = loads_json(f.read(length).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    return header


@dataclass
class TensorLookup:
    found: dict[str, list[int] | None]  # tensor name -> shape (None: listed in the index, shard not here)
    searched: str  # what was read
    problem: str | None = None  # weights missing or unreadable


def find_tensors(directory: Path, needle: str) -> TensorLookup:
    """Tensors whose name contains ``needle`` (SGLang's own test for d2t/t2d), from index and headers."""
    index_file = directory / "model.safetensors.index.json"
    shards = sorted(directory.glob("*.safetensors"))
    found: dict[str, list[int] | None] = {}
    if index_file.is_file():
        try:
            weight_map = loads_json(index_file.read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return TensorLookup({}, index_file.name, f"{index_file} is not a safetensors index (no weight_map)")
        for name, shard in weight_map.items():
            if needle in name:
                found[name] = None
                shard_path = directory / str(shard)
                if shard_path.is_file():
                    try:
                        found[name] = safetensors_header(shard_path).get(name, {}).get("shape")
                    except (OSError, ValueError) as err:
                        return TensorLookup(found, shard_path.name, f"cannot read the header of {shard_path}: {err}")
        return TensorLookup(found, index_file.name)
    if not shards:
        other = sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".pt", ".pth"))
        why = f"weights are {', '.join(other)} (not safetensors)" if other else "no weight files here (yet)"
        return TensorLookup({}, "", why)
    for shard in shards:
        try:
            header = safetensors_header(shard)
        except (OSError, ValueError) as err:
            return TensorLookup(found, shard.name, f"cannot read the header of {shard}: {err}")
        found.update({name: info.get("shape") for name, info in header.items() if needle in name})
    return TensorLookup(found, ", ".join(s.name for s in shards))
