"""The NixOS module's part in secrets and stopping (evaluated as in test_nix.py, with nixpkgs' lib).

- The benchmark unit gets the API key as a credential (bench reads $CREDENTIALS_DIRECTORY/api-key).
- The admin key and the TLS key's password are credentials like the API key, never settings.
- TimeoutStopSec follows settings.stop_timeout: systemd waits longer than the launcher does.
"""

from __future__ import annotations

import json

from conftest import REPO
from support.nix_harness import evaluate_module, needs_lib

EXAMPLE = REPO / "modules" / "examples" / "8-gpu-host.nix"


def evaluate(extra: str) -> dict:
    config = f"({{ lib, ... }}: {{ imports = [ {EXAMPLE} ]; }} // ({extra}))"
    return evaluate_module(config)


@needs_lib
def test_benchmark_unit_gets_the_api_key_as_a_credential():
    out = evaluate("{ }")
    bench = out["services"]["sglang-eagle3-bench"]["serviceConfig"]
    assert bench["LoadCredential"] == ["api-key:/run/secrets/sglang-api-key"]
    script = out["services"]["sglang-eagle3-bench"]["script"]
    assert "sglang-api-key" not in script and "--api-key " not in script  # bench finds the credential itself


@needs_lib
def test_admin_key_and_tls_password_are_credentials_not_settings():
    out = evaluate('{ services.sglang-eagle3.adminApiKeyFile = "/run/secrets/sglang-admin-key"; '
                   'services.sglang-eagle3.sslKeyfilePasswordFile = "/run/secrets/tls-key-password"; }')  # fmt: skip
    server = out["services"]["sglang-eagle3"]["serviceConfig"]
    assert server["LoadCredential"] == [
        "api-key:/run/secrets/sglang-api-key",
        "admin-api-key:/run/secrets/sglang-admin-key",
        "ssl-keyfile-password:/run/secrets/tls-key-password",  # the launcher finds credentials.SECRET_ARGS' names
    ]
    assert "admin" not in json.dumps(out["settings"])  # the rendered settings file names no key file
    assert "password" not in json.dumps(out["settings"])


@needs_lib
def test_stop_timeout_drives_timeout_stop_sec():
    default = evaluate("{ }")["services"]["sglang-eagle3"]["serviceConfig"]["TimeoutStopSec"]
    assert default == 60 + 30
    short = evaluate("{ services.sglang-eagle3.settings.stop_timeout = 12.5; }")
    assert short["services"]["sglang-eagle3"]["serviceConfig"]["TimeoutStopSec"] == 13 + 30
    assert short["settings"]["stop_timeout"] == 12.5  # and the launcher gets the same grace
