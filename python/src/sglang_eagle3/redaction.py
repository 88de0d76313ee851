"""What a secret looks like, and hiding it: the one rule for every message, display and log of every command.

A secret is hidden wherever it would show, whatever channel it came by, by properties of the text rather than by a
list of places: a URL's user and password and a query parameter whose name says it is secret; a word that looks like
a credential (a usual key or token prefix followed by at least four characters with a digit or a capital among
them, or a long random-looking word that changes character class at least every other character, as generated keys
do and class names do not); a value this process knows to be secret (``remember``, its environment's secrets).

``hiding_output`` puts the rule between the commands and stdout/stderr, so whatever a command prints passes it;
``shown`` and friends (errors.py) apply it before they shorten a value, so a secret is never cut into a part the
rule would not recognise.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import urllib.parse

HIDDEN = "***"
# The words of a variable or parameter name that say its value is secret. Long words count anywhere in the name
# (DB_PASSWORD, MYTOKEN); short ones only as a whole part of it (DB_PASS, X_AUTH, API_PW, but not BYPASS or KEYBOARD).
_SECRET_SUBSTRINGS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "PRIVATEKEY",
                      "ACCESSKEY", "AUTHORIZATION", "COOKIE", "BEARER")  # fmt: skip
_SECRET_PARTS = frozenset({"KEY", "KEYS", "PASS", "PWD", "PW", "AUTH", "CRED", "CREDS", "SESSION", "SALT", "SIG",
                           "SIGNATURE", "JWT", "DSN", "OTP", "PRIVATE"})  # fmt: skip
# Names that hold where a secret is, not the secret: shown (the value rule still applies to their values).
_PATH_SUFFIXES = ("_FILE", "_PATH", "_DIR", "_DIRECTORY", "_SOCK", "_SOCKET")
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
# Prefixes of API keys and tokens as their issuers hand them out (OpenAI, Hugging Face, GitHub, GitLab, Slack, AWS,
# Google, npm, PyPI, JWTs).
CREDENTIAL_PREFIXES = ("sk-", "sk_", "rk_", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
                       "glpat-", "xoxa-", "xoxb-", "xoxp-", "xoxr-", "xoxs-", "AKIA", "ASIA", "AIza", "npm_", "pypi-",
                       "eyJ")  # fmt: skip

_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)\S*@")  # up to the last @ of the word: a password may hold @
_BARE_USERINFO = re.compile(r"(?<![\w/:.@-])[\w.~%+\-]+:[^\s@/]+@(?=[\w\[])")  # user:password@host, no scheme
_QUERY_VALUE = re.compile(r"([?&;#][\w.\-]*=)([^&\s#'\"]*)")
# A prefixed key wherever it starts (after "model_path=", inside a path or a JSON string), and a random-looking word
# (base64's "=" padding at its end only, so "name=value" is two words).
_PREFIXED = re.compile("(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, CREDENTIAL_PREFIXES)) + r")[A-Za-z0-9_\-+=]{4,}")
_WORD = re.compile(r"[A-Za-z0-9_\-+]{20,}={0,2}")
_remembered: set[str] = set()


def secret_name(name: str) -> bool:
    """Whether a variable's (or parameter's) name says its value is secret: DB_PASS, PASSWD, X_AUTH, CREDENTIAL,
    HF_TOKEN, MY_SECRET... but not a name that holds a path (API_KEY_FILE, CREDENTIALS_DIRECTORY) nor PWD."""
    upper = name.upper().replace("-", "_")
    if upper in _NOT_SECRET_NAMES or upper.endswith(_PATH_SUFFIXES):
        return False
    parts = {part.rstrip("0123456789") for part in re.split(r"[_.]", upper)}
    return bool(parts & _SECRET_PARTS) or any(word in upper for word in _SECRET_SUBSTRINGS)


def looks_like_credential(value: str) -> bool:
    """Whether a value, as a whole, looks like a credential (a URL with a password, a prefixed key, a random word)."""
    word = value.strip()
    if not word or any(c.isspace() for c in word):
        return False
    if "@" in word and (_URL_USERINFO.search(word) or _BARE_USERINFO.search(word)):
        return True
    return any(_prefixed_key(m.group(0)) for m in _PREFIXED.finditer(word)) or any(
        _random_looking(w) for w in _WORD.findall(word)
    )


def _prefixed_key(word: str) -> bool:
    """A key's prefix, then at least four characters with a digit or a capital among them (hf_hub_download is no
    token)."""
    prefix = next(p for p in CREDENTIAL_PREFIXES if word.startswith(p))
    rest = word[len(prefix) :]
    return len(rest) >= 4 and any(c.isdigit() or c.isupper() for c in rest)


def _random_looking(word: str) -> bool:
    """20 characters or more, letters of both cases and digits, changing class at least every other letter or digit
    (the separators not counted: a name such as AQ-MedAI--Kimi-K25-eagle3 is words joined, not a random word)."""
    word = word.rstrip("=")
    if len(word) < 20:
        return False
    word = "".join(c for c in word if c.isalnum())
    if sum(c.isupper() for c in word) < 2 or sum(c.islower() for c in word) < 2 or sum(c.isdigit() for c in word) < 2:
        return False
    kinds = [("u" if c.isupper() else "l" if c.islower() else "d" if c.isdigit() else "s") for c in word]
    changes = sum(a != b for a, b in zip(kinds, kinds[1:], strict=False))
    return changes >= (len(word) - 1) / 2


def remember(secret: str | None) -> None:
    """A secret this process read (an API key, the hub token): hidden wherever it would show from now on."""
    if secret and len(secret) >= 4:
        _remembered.add(secret)


def _known(environ) -> set[str]:
    """The secrets this process knows by value: remembered ones, the passwords of URLs in its environment and the
    values of its variables whose names say they are secret."""
    known = set(_remembered)
    for name, value in environ.items():
        for match in _URL_USERINFO.finditer(value):
            userinfo = match.group(0)[len(match.group(1)) : -1]
            password = userinfo.split(":", 1)[-1]
            known.update(s for s in (userinfo, password, urllib.parse.unquote(password)) if len(s) >= 6)
        if secret_name(name) and len(value) >= 8 and not os.path.exists(value):
            known.add(value)
    return known


def hide(text: str, environ=None) -> str:
    """``text`` with every secret in it replaced by ``***`` (the module's rules)."""
    if not text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    text = _BARE_USERINFO.sub(f"{HIDDEN}@", text)
    text = _QUERY_VALUE.sub(lambda m: m.group(1) + HIDDEN if secret_name(m.group(1)[1:-1]) else m.group(0), text)
    for secret in sorted(_known(os.environ if environ is None else environ), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    text = _PREFIXED.sub(lambda m: HIDDEN if _prefixed_key(m.group(0)) else m.group(0), text)
    return _WORD.sub(lambda m: HIDDEN if _random_looking(m.group(0)) else m.group(0), text)


def hide_values(value):
    """``value`` with ``hide`` applied to every string in it (lists, tuples and dicts, however nested; dict keys
    too): a structure to show, e.g. as JSON."""
    if isinstance(value, str):
        return hide(value)
    if isinstance(value, dict):
        return {hide_values(k): hide_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(hide_values(v) for v in value)
    return value


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """An environment to show: a variable whose name says it is secret shows ``***``; any other value is shown
    with what looks secret in it hidden (a URL's password, a key, a random-looking word)."""
    return {name: HIDDEN if secret_name(name) else hide(value) for name, value in env.items()}


def shown_url(url: str) -> str:
    """A URL a user gave, as a message names it: everything up to its last @ (a user:password, whatever characters
    the password has) and any query or fragment hidden, as either may hold a credential."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "", url.strip()
    if "@" in rest:
        rest = f"{HIDDEN}@" + rest.rsplit("@", 1)[1]
    return hide(scheme + sep + re.sub(r"([?#]).*", rf"\1{HIDDEN}", rest, flags=re.DOTALL))


class _HidingStream(io.TextIOBase):
    """A text stream that writes what it is given with the secrets hidden (everything else is the stream's own)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text) -> int:
        if isinstance(text, str):
            self._stream.write(hide(text))
        else:  # bytes: click asks whether a stream is binary by writing b""
            self._stream.write(text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self._stream, "errors", "strict")


@contextlib.contextmanager
def hiding_output():
    """stdout and stderr with every secret hidden while the block runs (a command), then as they were."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _HidingStream(sys.stdout), _HidingStream(sys.stderr)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = saved
