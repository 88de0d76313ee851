"""Every secret of SGLang's server arguments, and every exit it can take, for both stacks: an audit as data.

patches/sglang-<version>/secret-exits.json holds, for SGLang 0.5.9 and 0.5.23, which fields are
secrets and a disposition for each place the scan (sglang_eagle3.source.secret_exits) finds
the server args can leave by. These tests prove:

- the secret fields are what the rule finds in the real source; every match is a secret or a
  look-alike with a reason, and a new secret-looking field is reported;
- every exit the scan finds in the pristine tree has exactly one disposition (an entry, or a
  rule for code the server never runs), no entry is stale and every rule is used; the patched
  tree has exactly the exits the data names for it; a removed entry is reported;
- each exit closed by a patch names a patch of the series that changes the definition (via)
  that closes it;
- every probe the data names runs SGLang's own code on CPU with a distinct secret in every
  secret field (tests/support/drivers/secret_exits_driver.py): on the patched tree no secret is
  in any output (log lines, info replies, the Rust server's state, launch commands, the dump
  files written, the driver's stdout and stderr); on the pristine tree each exit a patch closes
  lets a secret out, so the test can fail;
- the scan finds each kind of exit in a small package written here;
- `patch check` reports an exit a tree opens that the audit does not know, and an exit whose
  closing patch no longer applies.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, STAND_INS
from sglang_eagle3.serving import credentials
from sglang_eagle3.source import secret_exits as se
from sglang_eagle3.source.server_args import server_args_fields
from sglang_eagle3.trees import patchset

DRIVER = Path(__file__).parent / "support" / "drivers" / "secret_exits_driver.py"
ENV = {"PYTHONPATH": str(REPO / "python" / "src")}
# Each stack: its series and the fixtures of its pristine and patched trees.
STACKS = {
    "0.5.9": (REPO / "patches" / "sglang-0.5.9", "pristine_tree", "patched_tree"),
    "0.5.23": (REPO / "patches" / "sglang-0.5.23", "newest_tree", "patched_newest"),
}


def audit(version: str) -> se.SecretAudit:
    return se.SecretAudit.load(STACKS[version][0] / se.DATA_FILE)


@pytest.fixture(params=list(STACKS), scope="module")
def stack(request):
    """(version, its audit, its pristine tree, its patched tree)."""
    series, pristine, patched = STACKS[request.param]
    return request.param, audit(request.param), request.getfixturevalue(pristine), request.getfixturevalue(patched)


@pytest.fixture(scope="module")
def scanned(stack) -> dict:
    """The audit's report on the pristine tree and the exits of the patched tree (scans are cached on disk)."""
    version, data, pristine, patched = stack
    report = se.audit_tree(pristine, data)
    return {"pristine": report, "patched": se.scan_exits(patched, report.secrets)}


def proofs(entry: dict) -> list[str]:
    proof = entry.get("proof", [])
    return [proof] if isinstance(proof, str) else proof


# -- the secret fields ---------------------------------------------------------------------------


def test_the_secret_fields_are_the_rules_matches(stack):
    version, data, pristine, _ = stack
    fields = server_args_fields(pristine)
    looking = se.secret_looking(fields)
    assert set(looking) == set(data.secret_fields) | set(data.not_secret), "the data and the source disagree"
    assert not set(data.secret_fields) & set(data.not_secret)
    assert {"api_key", "admin_api_key"} <= set(data.secret_fields)
    # The rule reads words and help, not substrings: these never match.
    names = {f.name for f in fields}
    for lookalike in (
        "max_total_tokens",
        "tokenizer_path",
        "skip_tokenizer_init",
        "tokenizer_metrics_custom_labels_header",
    ):
        assert lookalike in names and lookalike not in looking
    for name, why in data.not_secret.items():
        assert why and name in looking
    assert len(fields) > 300  # the whole ServerArgs was read, not a part of it


def test_0_5_23_has_the_ssl_password_and_the_watermark_secrets():
    data = audit("0.5.23")
    assert {"ssl_keyfile_password", "watermark_key", "watermark_key_b", "watermark_config"} <= set(data.secret_fields)
    assert set(audit("0.5.9").secret_fields) == {"api_key", "admin_api_key"}


def test_a_new_secret_looking_field_is_reported(pristine_tree, tmp_path):
    source = (pristine_tree / "sglang" / "srt" / "server_args.py").read_text()
    field = "    api_key: Optional[str] = None\n"
    assert field in source
    tree = tmp_path / "tree"
    (tree / "sglang" / "srt").mkdir(parents=True)
    (tree / "sglang" / "srt" / "server_args.py").write_text(
        source.replace(field, field + "    hf_token: Optional[str] = None\n    s3_credentials: Optional[str] = None\n")
    )
    looking = se.secret_looking(server_args_fields(tree))
    data = audit("0.5.9")
    assert sorted(n for n in looking if n not in data.secret_fields and n not in data.not_secret) == [
        "hf_token", "s3_credentials"]  # fmt: skip


# -- the exits ------------------------------------------------------------------------------------


def test_every_exit_has_exactly_one_disposition(stack, scanned):
    version, data, pristine, _ = stack
    report = scanned["pristine"]
    assert report.new_fields == []
    assert [f"{e.where} {e.key}" for e in report.unknown] == [], "exits with no disposition"
    found = {e.key: e for e in report.exits}
    stale = [k for k in data.exits if k not in found]
    assert stale == [], "entries for exits the tree does not have"
    for key, entry in data.exits.items():
        assert data.disposition(entry), f"{key}: needs exactly one of {se.DISPOSITIONS}"
        assert data.rule_for(found[key].file) is None, f"{key}: a rule covers it already"
        assert entry["where"] == found[key].where, f"{key}: moved to {found[key].where}"
        assert entry[data.disposition(entry)].strip(), key
    used = {data.rule_for(e.file) for e in report.exits} - {None}
    assert used == set(data.rules), "a rule no exit uses"
    names = patchset.read_series(STACKS[version][0] / "series")
    for key, entry in {**data.exits, **data.patched_exits}.items():
        if "closed_by" in entry:
            assert entry["closed_by"] in names and entry.get("via") and entry.get("how"), key
    # What each exit kind covers, as the issue lists them: logs, info endpoints, the dumps, the launch command.
    kinds = {e.kind for e in report.exits if data.rule_for(e.file) is None}
    assert kinds == {"text", "dict", "bytes", "argv", "field"} | ({"log"} if version == "0.5.23" else set())


def test_every_field_named_by_an_expression_not_resolved_is_listed(stack, scanned):
    """A carrier's field read or set by a name the scan cannot follow to constants is in the data's unresolved, and
    the data lists no other: one more in a new release, or one fewer, fails here."""
    _, data, _, _ = stack
    assert scanned["pristine"].unresolved == data.unresolved
    assert all({"where", "function", "expression"} == set(u) for u in data.unresolved)


def test_the_patched_tree_has_the_exits_the_data_names(stack, scanned):
    _, data, _, _ = stack
    pristine = {e.key for e in scanned["pristine"].exits}
    patched = {e.key: e for e in scanned["patched"]}
    assert {k for k in patched if k not in pristine and data.rule_for(patched[k].file) is None} == set(
        data.patched_exits)  # fmt: skip
    for key, entry in data.patched_exits.items():
        assert "closed_by" not in entry and data.disposition(entry), key
        assert entry["where"] == patched[key].where


def test_a_removed_entry_is_an_exit_with_no_disposition(pristine_tree):
    data = audit("0.5.9")
    key = next(k for k, e in data.exits.items() if "crash" in e.get("proof", ""))
    exits = {k: v for k, v in data.exits.items() if k != key}
    report = se.audit_tree(pristine_tree, se.SecretAudit(data.path, data.secret_fields, data.not_secret, data.rules,
                                                         exits, data.patched_exits))  # fmt: skip
    assert [e.key for e in report.unknown] == [key]


def definition_lines(path: Path, qualname: str) -> tuple[int, int]:
    """First and last line of a class, function or module-level assignment named ``qualname``."""
    body = ast.parse(path.read_text()).body
    node = None
    for part in qualname.split("."):
        node = next(n for n in body if getattr(n, "name", None) == part or (
            isinstance(n, ast.Assign) and any(getattr(t, "id", None) == part for t in n.targets)))  # fmt: skip
        body = getattr(node, "body", [])
    return node.lineno, node.end_lineno


def changed_lines(patch: Path, rel: str) -> set[int]:
    """The old-file lines a patch removes, and those it inserts after, in file ``rel``."""
    lines, current, old = set(), None, 0
    for line in patch.read_text().splitlines():
        if line.startswith("+++ "):
            current = line[4:].split("/", 1)[1]
        elif line.startswith("@@") and current == rel:
            old = int(line.split()[1][1:].split(",")[0])
        elif current == rel and line[:1] == " ":
            old += 1
        elif current == rel and line[:1] == "-" and not line.startswith("---"):
            lines.add(old)
            old += 1
        elif current == rel and line[:1] == "+":
            lines.add(old - 1)
    return lines


def test_each_closing_patch_changes_the_definition_that_closes_the_exit(stack):
    version, data, pristine, _ = stack
    series = STACKS[version][0]
    names = patchset.read_series(series / "series")
    for key, entry in data.exits.items():
        if "closed_by" not in entry:
            continue
        rel, qualname = entry["via"].split("::")
        patch = series / entry["closed_by"]
        earlier = names[: names.index(entry["closed_by"])]
        # Pristine line numbers hold for the patch only when no earlier patch changes the file.
        assert all(f"sglang/{rel}" not in patchset.Patch(n, series / n).files for n in earlier)
        first, last = definition_lines(pristine / "sglang" / rel, qualname)
        assert any(first <= n <= last for n in changed_lines(patch, f"sglang/{rel}")), (
            f"{key}: {entry['closed_by']} does not change {entry['via']}"
        )


# -- the launcher: a secret SGLang takes as a flag comes from a file, or is refused --------------------


def test_every_secret_flag_comes_from_a_file_or_is_refused(stack):
    version, data, pristine, _ = stack
    fields = {f.name: f for f in server_args_fields(pristine)}
    for name in data.secret_fields:
        flag = fields[name].flag
        if flag is None:  # watermark_key, _b: resolved from --watermark-config, no flag of their own
            continue
        secret = credentials.secret_flag_in(flag)
        if secret is not None:
            assert secret.field == name  # taken from secret.setting's file (or its systemd credential)
            assert credentials.secret_flag_in(f"{flag}=x") == secret and credentials.secret_flag_in(flag[:-2]) == secret
        else:
            assert flag in credentials.PATH_FLAGS, f"{flag}: neither read from a file nor refused"
            assert credentials.inline_secret_in([flag, '{"key": "k"}']) == flag
            assert credentials.inline_secret_in([f"{flag}=/etc/secret.json"]) is None
    # An SGLang flag that begins a secret flag's name is read as itself by argparse: not refused.
    prefixes = {f.flag for f in fields.values() if f.flag and any(
        s.flag.startswith(f.flag) and s.flag != f.flag for s in credentials.SECRET_ARGS)}  # fmt: skip
    assert prefixes <= credentials.PUBLIC_PREFIX_FLAGS
    assert all(credentials.secret_flag_in(p) is None for p in prefixes)
    assert set(data.secret_fields) <= credentials.SERVER_SECRET_FIELDS


def test_the_launchers_secret_lists_are_the_audits(pristine_tree, newest_tree):
    union = set(audit("0.5.9").secret_fields) | set(audit("0.5.23").secret_fields)
    assert credentials.SERVER_SECRET_FIELDS == union  # what bench drops from a recorded /server_info
    flags = {f.flag for tree in (pristine_tree, newest_tree) for f in server_args_fields(tree)}
    assert credentials.PUBLIC_PREFIX_FLAGS <= flags  # each is a real flag of a stack


MAIN_DRIVER = Path(__file__).parent / "support" / "drivers" / "sglang_main_driver.py"


def test_sglang_main_reads_the_ssl_password_from_its_file_on_0_5_23_and_refuses_it_on_0_5_9(stack, tmp_path):
    version, _, pristine, _ = stack
    password = tmp_path / "ssl-keyfile-password"
    password.write_text("tls-pass-4711\n")
    password.chmod(0o400)
    ssl = next(s for s in credentials.SECRET_ARGS if s.field == "ssl_keyfile_password")
    given = {"argv": ["--model-path", "m"], "environ": {ssl.env: str(password)}}
    env = {**os.environ, "PYTHONPATH": str(REPO / "python" / "src")}
    result = subprocess.run([sys.executable, str(MAIN_DRIVER), str(pristine)], input=json.dumps(given),
                            capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert "tls-pass-4711" not in result.stdout + result.stderr and "Traceback" not in result.stderr
    if version == "0.5.9":
        assert result.returncode == 2
        assert "ssl_keyfile_password_file: this SGLang has no --ssl-keyfile-password" in result.stderr
    else:
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout.splitlines()[-1])["changed"] == ["ssl_keyfile_password"]


# -- every exit, run: the real code with a secret in every field ----------------------------------


def run_driver(tree: Path, values: dict[str, str], out: Path) -> dict[str, bytes]:
    """Each probe's output (files it wrote read in), plus "stdout+stderr" and every file under ``out``."""
    out.parent.mkdir(parents=True)
    (out.parent / "secrets.json").write_text(json.dumps(values))
    env = {**os.environ, "PYTHONPATH": str(STAND_INS)}  # the driver enters the tree itself
    result = subprocess.run([sys.executable, str(DRIVER), str(tree), str(out.parent / "secrets.json"), str(out)],
                            capture_output=True, env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    probes = json.loads(result.stdout.splitlines()[-1])
    outputs = {
        name: value.encode() if isinstance(value, str) else b"\n".join(Path(p).read_bytes() for p in value)
        for name, value in probes.items()
    }
    assert all(probes[name] for name in ("request_dump", "crash_dump")), "a dump was not written"
    outputs["stdout+stderr"] = result.stdout + result.stderr
    outputs["files"] = b"\n".join(p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file())
    return outputs


def secret_values(data: se.SecretAudit) -> tuple[dict[str, str], dict[str, str]]:
    """A distinct secret for every secret field (what the driver is given), and what to search for."""
    needles = {name: f"{name.replace('_', '-')}-{secrets.token_hex(8)}" for name in data.secret_fields}
    given = dict(needles)
    if "watermark_config" in given:  # the config is JSON holding a key
        given["watermark_config"] = json.dumps({"key": needles["watermark_config"]})
    return given, needles


@pytest.fixture(scope="module")
def driven(stack, tmp_path_factory) -> dict:
    version, data, pristine, patched = stack
    given, needles = secret_values(data)
    root = tmp_path_factory.mktemp(f"driven-{version}")
    return {
        "needles": needles,
        "patched": run_driver(patched, given, root / "patched" / "out"),
        "pristine": run_driver(pristine, given, root / "pristine" / "out"),
    }


def leaked(output: bytes, needles: dict[str, str]) -> list[str]:
    return [name for name, value in needles.items() if value.encode() in output]


def test_every_probe_the_data_names_is_driven(stack, driven):
    _, data, _, _ = stack
    named = {p for entry in {**data.exits, **data.patched_exits}.values() for p in proofs(entry)}
    driven_probes = set(driven["patched"]) - {"log", "stdout+stderr", "files"}
    assert named == driven_probes


def test_the_patched_tree_lets_no_secret_out(stack, driven):
    needles = driven["needles"]
    assert len(needles) == len(stack[1].secret_fields)
    for probe, output in driven["patched"].items():
        assert leaked(output, needles) == [], f"{probe} shows {leaked(output, needles)}"
    assert driven["patched"]["shm"] == b"0600"  # the workers' copy: the server's user only
    if stack[0] == "0.5.23":  # redacted, not dropped: the replies keep their fields
        for probe in ("http_server_info", "rust_internal_state", "crash_dump", "startup_log"):
            assert b"<redacted>" in driven["patched"][probe], probe
        assert b"--ssl-keyfile-password <redacted>" in driven["patched"]["launch_command"]


def test_the_pristine_tree_lets_out_every_exit_a_patch_closes(stack, driven):
    _, data, _, _ = stack
    closing = {p for entry in {**data.exits}.values() if "closed_by" in entry for p in proofs(entry)}
    quiet = [p for p in sorted(closing) if not leaked(driven["pristine"][p], driven["needles"])]
    assert quiet == [], "the series closes exits that leak nothing without it"
    assert set(leaked(driven["pristine"]["files"], driven["needles"])) == set(data.secret_fields), (
        "the dumps do not hold every secret on the pristine tree")  # fmt: skip


# -- the scan, on a package written here ------------------------------------------------------------

SMALL_SERVER_ARGS = """
import dataclasses
from typing import Optional


@dataclasses.dataclass
class ServerArgs:
    model_path: str = "m"
    hf_token: Optional[str] = None
    tokenizer_path: Optional[str] = None
    max_total_tokens: int = 0
    signing: Optional[str] = None

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--hf-token", help="The Hugging Face token.")
        parser.add_argument("--tokenizer-path", help="The path of the tokenizer.")
        parser.add_argument("--signing", help="The private key that signs replies.")
"""
SMALL_EXITS = """
import dataclasses, json, logging, pickle, sys

logger = logging.getLogger(__name__)


def log_it(server_args):
    logger.info("args %s", server_args)


def show(server_args):
    return f"{server_args}"


def info(server_args):
    return dataclasses.asdict(server_args)


def caller(server_args):
    return json.dumps(info(server_args))


def dump(server_args, f):
    pickle.dump({"args": server_args}, f)


def token(server_args):
    return server_args.hf_token


def echo():
    return " ".join(sys.argv)


def keep(obj, f):
    pickle.dump(obj, f)


def passes(server_args, f):
    keep((server_args, 1), f)


def harmless(server_args):
    logger.info("model %s", server_args.model_path)
    return server_args.max_total_tokens
"""


def test_the_scan_finds_each_kind_of_exit(tmp_path):
    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "server_args.py").write_text(textwrap.dedent(SMALL_SERVER_ARGS))
    (srt / "exits.py").write_text(textwrap.dedent(SMALL_EXITS))
    looking = se.secret_looking(server_args_fields(tmp_path))
    assert looking == {"hf_token": "its name has the word 'token'", "signing": "its help says 'private key'"}
    found = {(e.function, e.kind) for e in se.scan_exits(tmp_path, looking) if e.file == "srt/exits.py"}
    assert found == {("log_it", "log"), ("show", "text"), ("info", "dict"), ("caller", "dict"), ("dump", "bytes"),
                     ("token", "field"), ("echo", "argv"), ("keep", "bytes")}  # fmt: skip
    empty = se.SecretAudit(tmp_path / "none.json", {}, {}, {}, {}, {})
    report = se.audit_tree(tmp_path, empty)
    assert report.new_fields == ["hf_token", "signing"] and len(report.unknown) == len(found)


# -- patch check reports what a new version opens ----------------------------------------------------


def test_patch_check_reports_a_new_exit_and_a_reopened_one(run_cli, pristine_tree, tree_copy):
    tree = tree_copy(pristine_tree)
    http = tree / "sglang" / "srt" / "entrypoints" / "http_server.py"
    http.write_text(
        http.read_text() + '\n\ndef _debug_keys(server_args):\n    logger.info(f"{server_args.api_key=}")\n'
    )
    manager = tree / "sglang" / "srt" / "managers" / "tokenizer_manager.py"
    context = '            "launch_command": " ".join(sys.argv),\n'  # in 0005's hunk: the patch no longer applies
    assert context in manager.read_text()
    manager.write_text(manager.read_text().replace(context, context.replace("sys.argv", "list(sys.argv)")))
    result = run_cli("patch", "check", "--sglang", str(tree), "--json", env=ENV)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    audit_part = report["secret_exits"]
    (new,) = audit_part["unknown_exits"]
    assert new["function"] == "_debug_keys" and new["kind"] == "field" and new["where"].startswith(
        "srt/entrypoints/http_server.py:")  # fmt: skip
    reopened = {e["where"].split(":")[0] for e in audit_part["reopened"]}
    assert reopened == {"srt/managers/tokenizer_manager.py", "srt/entrypoints/http_server.py",
                        "srt/entrypoints/engine.py", "srt/entrypoints/grpc_server.py", "srt/managers/scheduler.py",
                        "srt/grpc/scheduler_launcher.py"}  # fmt: skip
    assert {e["patch"] for e in audit_part["reopened"]} == {"0005-server-args-hide-api-keys.patch"}
    text = run_cli("patch", "check", "--sglang", str(tree), env=ENV).stdout
    assert "[FAIL] secret exits: 1 exit with no disposition in patches/sglang-0.5.9/secret-exits.json" in text
    assert f"{new['where']} field server_args.api_key" in text and "(0005-server-args-hide-api-keys.patch: " in text


def test_patch_check_accounts_for_every_exit_of_both_pinned_trees(run_cli, pristine_tree, newest_tree):
    for tree in (pristine_tree, newest_tree):
        report = json.loads(run_cli("patch", "check", "--sglang", str(tree), "--json", env=ENV).stdout)
        audit_part = report["secret_exits"]
        assert audit_part["unknown_exits"] == [] and audit_part["reopened"] == [] and audit_part["exits"] > 30
        assert {f["name"]: f["status"] for f in report["findings"][-2:]} == {
            "secret fields": "ok",
            "secret exits": "ok",
        }
