"""Secrets: where the server's secrets come from, checks on their files, and keeping them out of output.

SGLang's secret flags (SECRET_ARGS; the fields patches/sglang-<version>/secret-exits.json lists, kept in step by
tests/test_secret_exits.py) are never a setting, an argument or an environment variable here: the settings name a
file, or systemd hands the secret over as a credential in ``$CREDENTIALS_DIRECTORY`` (so does the Hugging Face token
of the models commands). The launcher passes only the file's path on (sglang_main.py), and patch 0005 keeps SGLang
from printing what it was given. 0.5.23's ``--watermark-config`` takes a file: its path may be an argument, the JSON
itself (which holds the watermark keys) may not.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput
from ..redaction import looks_like_credential, remember

# Words no variable of the manifests' environment may name (tests/test_kubernetes.py). What is shown masked is
# redaction.secret_name's rule.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


@dataclass(frozen=True)
class SecretArg:
    """One of SGLang's secret arguments and where this project takes it from."""

    field: str  # SGLang's ServerArgs field: api_key

    @property
    def flag(self) -> str:  # --api-key
        return "--" + self.field.replace("_", "-")

    @property
    def setting(self) -> str:  # api_key_file
        return f"{self.field}_file"

    @property
    def credential(self) -> str:  # api-key, as in LoadCredential=api-key:/path
        return self.field.replace("_", "-")

    @property
    def env(self) -> str:  # SGLANG_EAGLE3_API_KEY_FILE: tells sglang_main the file (never the key)
        return f"SGLANG_EAGLE3_{self.field.upper()}_FILE"


SECRET_ARGS = (SecretArg("api_key"), SecretArg("admin_api_key"), SecretArg("ssl_keyfile_password"))
API_KEY = SECRET_ARGS[0]
API_KEY_FILE_ENV = API_KEY.env
# SGLang flags that begin a secret flag's name: argparse reads an exact flag as itself, not as a
# prefix of a longer one (``--ssl-keyfile`` is the key file's path, not ``--ssl-keyfile-password``).
PUBLIC_PREFIX_FLAGS = frozenset({"--ssl-keyfile"})
# Secret flags that take a file's path or the secret itself: the path may be an argument.
PATH_FLAGS = {"--watermark-config": "the path of a file (chmod 600) holding the watermark JSON"}
# Every secret field of SGLang's server args, on either stack (each stack's secret-exits.json).
SERVER_SECRET_FIELDS = frozenset(
    {"api_key", "admin_api_key", "ssl_keyfile_password", "watermark_config", "watermark_key", "watermark_key_b"}
)


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0].lower().replace("_", "-")


def _abbreviates(name: str, flag: str) -> bool:
    """Whether argparse would read ``name`` as ``flag`` (it expands unambiguous prefixes: ``--api-k``)."""
    return len(name) >= 4 and name.startswith("--") and flag.startswith(name) and name not in PUBLIC_PREFIX_FLAGS


def secret_flag_in(arg: str) -> SecretArg | None:
    """The secret flag an SGLang argument would set, also as argparse would read it: unambiguous prefixes (``--api-k``)
    and ``--api_key`` (no SGLang flag, but it would show the key in the dry run and in errors all the same)."""
    name = _flag_name(arg)
    return next((s for s in SECRET_ARGS if _abbreviates(name, s.flag)), None)


def inline_secret_in(args: list[str]) -> str | None:
    """The path flag (PATH_FLAGS) among ``args`` given the secret itself (a JSON object), not a path."""
    for i, arg in enumerate(args):
        flag = next((f for f in PATH_FLAGS if _abbreviates(_flag_name(arg), f)), None)
        value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
        if flag and value.lstrip().startswith("{"):
            return flag
    return None


# The Hugging Face token `models lock` and `models fetch` read (modules/sglang-eagle3-models.nix loads it).
HUB_TOKEN_CREDENTIAL = "hf-token"


def credential(name: str, environ: dict[str, str]) -> Path | None:
    """systemd's credential ``name`` (``LoadCredential=name:/path``): $CREDENTIALS_DIRECTORY/name, if it is there."""
    directory = environ.get("CREDENTIALS_DIRECTORY")
    path = Path(directory) / name if directory else None
    return path if path is not None and path.is_file() else None


def key_file(secret: SecretArg, configured: Path | None, environ: dict[str, str]) -> Path | None:
    """A key's file: the setting, else systemd's credential $CREDENTIALS_DIRECTORY/<name>."""
    return configured if configured is not None else credential(secret.credential, environ)


class KeyFileError(BadInput):
    """A key file that cannot be used; the message says why and how to fix it (never the key)."""


def typed_key(value: str | Path) -> bool:
    """Whether a value given as a key file's path looks like the key itself: no file is there, and it has no ``/``
    (a typed key, or a bare file name that is not there either) or looks like a credential (redaction.py)."""
    text = str(value)
    return not os.path.lexists(text) and ("/" not in text or looks_like_credential(text))


def key_file_problem(value: str | Path, what: str) -> str | None:
    """What is wrong with ``value`` as the path of a file holding a secret, found without reading it and said
    without repeating it (it may be the secret itself), or None."""
    if not str(value).strip():
        return f"{what} is empty; give the path of the file that holds it, or leave it out"
    if typed_key(value):
        return (
            f"{what} names no file, and the value looks like the secret itself rather than a path (it is not shown): "
            "write the secret into a file (chmod 600) and give that file's path"
        )
    return None


def read_key(path: Path, what: str = "api_key_file") -> str:
    """The key in ``path``, after the checks a secret's file must pass: there, a regular file, private (no group or
    other bits), readable, one line of printable ASCII, not empty. Else KeyFileError, bad input (never the key)."""
    if problem := key_file_problem(path, what):
        raise KeyFileError(problem)
    path = Path(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise KeyFileError(f"{what} {path} does not exist; write the key into that file (chmod 600)") from None
    except OSError as err:
        raise KeyFileError(f"{what} {path} cannot be reached: {err.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise KeyFileError(f"{what} {path} is a directory; give the file that holds the key")
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError(f"{what} {path} is not a regular file; give the file that holds the key")
    if info.st_mode & 0o077:
        raise KeyFileError(
            f"{what} {path} can be read by other users (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"make it private: chmod 600 {path}"
        )
    try:
        raw = path.read_bytes()
    except PermissionError:
        raise KeyFileError(
            f"{what} {path} cannot be read by this user (uid {os.getuid()}); "
            f"give it to the user that runs the server: chown {os.getuid()} {path}"
        ) from None
    except OSError as err:
        raise KeyFileError(f"{what} {path} cannot be read: {err.strerror}") from None
    try:
        key = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise KeyFileError(f"{what} {path} does not hold a key: it must be one line of printable ASCII") from None
    if not key:
        raise KeyFileError(f"{what} {path} is empty; write the key into it")
    if not key.isprintable() or any(c.isspace() for c in key):
        raise KeyFileError(f"{what} {path} must hold the key alone, on one line, without spaces")
    remember(key)  # hidden wherever it would show
    return key


def without_secrets(info):
    """SGLang's /server_info without the secrets, at any depth (each internal state holds the server args too; patch
    0005 leaves them out already, an unpatched server does not)."""
    if isinstance(info, dict):
        return {k: without_secrets(v) for k, v in info.items() if k not in SERVER_SECRET_FIELDS}
    if isinstance(info, list):
        return [without_secrets(v) for v in info]
    return info
