"""Secrets: where the server's API key comes from, and keeping secrets out of what we print.

The key itself is never a setting, an argument or an environment variable: the settings
name a file (``api_key_file``), or systemd hands it over as a credential
(``LoadCredential=api-key:/path``, found in ``$CREDENTIALS_DIRECTORY``).
"""

from __future__ import annotations

from pathlib import Path

from .settings import ServerSettings

# The launcher tells sglang_main where the key's file is (the path, never the key).
API_KEY_FILE_ENV = "SGLANG_EAGLE3_API_KEY_FILE"
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def api_key_file(settings: ServerSettings, environ: dict[str, str]) -> Path | None:
    """The API key's file: the setting, else systemd's credential $CREDENTIALS_DIRECTORY/api-key."""
    if settings.api_key_file is not None:
        return settings.api_key_file
    credentials = environ.get("CREDENTIALS_DIRECTORY")
    if credentials and (Path(credentials) / "api-key").is_file():
        return Path(credentials) / "api-key"
    return None


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """Environment for display: values of secret-looking variables replaced."""
    return {
        k: "***" if any(w in k.upper() for w in SECRET_WORDS) and not k.endswith("_FILE") else v for k, v in env.items()
    }
