"""What the secret rule hides and what it must leave alone (redaction.py).

Every message passes through ``redaction.hide``; a rule that hides too much makes a hint unusable. The model ids a
user meets are taken from the definitions (every hub id among the settings' defaults and the example lock files),
with the lock file name that ``models lock`` hints for each: none is hidden. Random tokens of the shapes issuers
hand out are hidden wherever they sit in a line.
"""

from __future__ import annotations

import json
import secrets

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_eagle3.models.lockfile import file_name
from sglang_eagle3.redaction import CREDENTIAL_PREFIXES, HIDDEN, hide
from sglang_eagle3.serving.settings import ServerSettings


def hub_ids() -> list[str]:
    defaults = [field.default for field in ServerSettings.model_fields.values() if isinstance(field.default, str)]
    ids = {value for value in defaults if value.count("/") == 1 and not value.startswith("/")}
    for lock in (REPO / "nix" / "tests").glob("*.lock.json"):
        ids.add(json.loads(lock.read_text())["repo"])
    return sorted(ids)


@pytest.mark.parametrize("repo", hub_ids())
def test_a_model_id_and_its_lock_file_name_are_shown(repo):
    line = f"pin it: `sglang-eagle3 models lock {repo} -o {file_name(repo)}`"
    assert hide(line, environ={}) == line


def test_the_ids_come_from_the_definitions():
    assert len(hub_ids()) >= 2  # the target and the draft defaults at least: a rule change cannot empty the list


@settings(max_examples=300, deadline=None)
@given(nbytes=st.integers(8, 40), prefix=st.sampled_from(CREDENTIAL_PREFIXES), hexed=st.booleans(),
       before=st.sampled_from(["", "key ", "path=/x/", "\"", "--api-key=", "model_path="]))  # fmt: skip
def test_an_issued_key_is_hidden_wherever_it_sits(nbytes, prefix, hexed, before):
    """Every issuer's prefix (the rule's own list) with a random body, after whatever a line puts before it."""
    token = prefix + (secrets.token_hex(nbytes) if hexed else secrets.token_urlsafe(nbytes))
    line = f"{before}{token} rest"
    shown = hide(line, environ={})
    assert token not in shown and HIDDEN in shown, (line, shown)
