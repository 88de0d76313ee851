"""The settings definition: sources and their order, bad input, schema, generated reference."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from conftest import REPO
from sglang_eagle3.serving import settings
from sglang_eagle3.source.server_args import server_flags
from sglang_eagle3.source.tree import locate
from support import harness_env


def test_defaults_are_the_tuned_configuration():
    s = settings.load(environ={})
    assert (s.model_path, s.speculative_draft_model_path) == ("nvidia/Kimi-K2.5-NVFP4", "AQ-MedAI/Kimi-K25-eagle3")
    assert (s.tp_size, s.speculative_num_steps, s.speculative_eagle_topk, s.speculative_num_draft_tokens) == (
        8,
        3,
        1,
        4,
    )


def test_sources_in_documented_order(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text('tp_size = 4\nport = 31000\nhost = "0.0.0.0"\n')
    environ = {"SGLANG_EAGLE3_PORT": "32000", "SGLANG_EAGLE3_HOST": "127.0.0.2"}
    s = settings.load(config, ["host=127.0.0.3"], environ=environ)
    assert s.tp_size == 4  # file over default
    assert s.port == 32000  # environment over file
    assert s.host == "127.0.0.3"  # --set over environment
    baseline = settings.load(config, ["speculative_algorithm=EAGLE3"], environ=environ, profile="baseline")
    assert baseline.speculative_algorithm is None  # the profile is applied last


def test_json_file(tmp_path):
    config = tmp_path / "server.json"
    config.write_text(json.dumps({"extra_args": ["--log-level", "debug"], "environment": {"NCCL_DEBUG": "INFO"}}))
    s = settings.load(config, environ={})
    assert s.extra_args == ["--log-level", "debug"] and s.environment == {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize(
    "assignments, message",
    [
        (["tp_sise=4"], "unknown setting 'tp_sise'; did you mean 'tp_size'?"),
        (["tp_size=0"], "tp_size: Input should be greater than or equal to 1"),
        (["tp_size=eight"], "tp_size: Input should be a valid integer"),
        (["port=70000"], "port: Input should be less than or equal to 65535"),
        (["speculative_num_draft_tokens=6"], "with speculative_eagle_topk 1 it must be speculative_num_steps + 1 = 4"),
        (["speculative_eagle_topk=2", "speculative_num_draft_tokens=20"], "cannot be filled by top-k 2 over 3 steps"),
        (["speculative_algorithm=MEDUSA"], "speculative_algorithm: Input should be 'EAGLE3', 'EAGLE', 'NEXTN'"),
        (["speculative_draft_model_path=null"], "EAGLE3 needs a draft model"),
        (["nnodes=2"], "dist_init_addr: more than one node needs"),
        (["node_rank=1"], "node_rank: 1 must be below nnodes (1)"),
        (["mem_fraction_static=1.5"], "mem_fraction_static: Input should be less than 1"),
        (['extra_args=["--api-key", "s3cret"]'], "do not pass --api-key"),
        (["tp_size"], "--set expects field=value"),
    ],
)
def test_bad_values_name_the_field(assignments, message):
    with pytest.raises(settings.SettingsError) as err:
        settings.load(None, assignments, environ={})
    assert message in str(err.value)


def test_bad_files_and_environment(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("tp_size = \n")
    with pytest.raises(settings.SettingsError, match="is not valid TOML"):
        settings.load(bad, environ={})
    with pytest.raises(settings.SettingsError, match="cannot read settings file"):
        settings.load(tmp_path / "missing.json", environ={})
    with pytest.raises(settings.SettingsError, match="SGLANG_EAGLE3_TP: unknown setting 'tp'"):
        settings.load(environ={"SGLANG_EAGLE3_TP": "4"})


# Names the tests use on purpose to show that they are refused.
REFUSED_ON_PURPOSE = {"api_key", "admin_api_key", "tp"}


def test_every_sglang_eagle3_variable_the_project_names_is_a_setting_or_a_tool_variable():
    """A variable the tools, Nix or CI set must not stop the CLI as an 'unknown setting'.

    CI once exported SGLANG_EAGLE3_REQUIRE_FLAKE_EVAL and every CLI test then failed with
    exit 2; this catches the next such name where it is introduced.
    """
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    names: dict[str, str] = {}
    for rel in tracked.decode().split("\0"):
        path = REPO / rel
        if not rel or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        for match in re.finditer(r"\bSGLANG_EAGLE3_([A-Z0-9_]*[A-Z0-9])\b", text):
            names.setdefault(match.group(1).lower(), rel)
    assert {"patches", "tp_size", "nvidia_smi"} <= names.keys()  # the scan sees what it must
    former = {name.removeprefix("SGLANG_EAGLE3_").lower() for name in harness_env.FORMER.values()}
    for name, where in sorted(names.items()):
        if name in REFUSED_ON_PURPOSE or name in former:
            continue  # the harness moves its former names out of the way before any CLI runs
        environ = {f"SGLANG_EAGLE3_{name.upper()}": "1"}
        if name in settings.NOT_SETTINGS:
            assert settings.from_environment(environ) == {}, where
        else:
            assert name in settings.ServerSettings.model_fields, (
                f"SGLANG_EAGLE3_{name.upper()} (in {where}) is neither a setting nor in settings.NOT_SETTINGS"
            )


def test_cli_runs_with_the_ci_environment(run_cli):
    """Every variable of the test harness and CI set (EAGLE3_TESTS_*): the CLI reads none of them."""
    env = {getattr(harness_env, name): "1" for name in dir(harness_env) if name.isupper() and name != "FORMER"}
    assert len(env) == len(harness_env.FORMER)
    result = run_cli("settings", "show", env=env)
    assert result.returncode == 0, result.stderr


def test_the_package_knows_no_name_of_the_test_harness():
    """The runtime does not list test-harness variables (it once did, in NOT_SETTINGS): the tests' own live
    outside the settings' prefix, and the package names neither them nor their former names."""
    harness = {*harness_env.FORMER, *harness_env.FORMER.values()}
    package = REPO / "python" / "src" / "sglang_eagle3"
    assert {(n, p.name) for p in package.rglob("*.py") for n in harness if n in p.read_text()} == set()
    assert {settings.ENV_PREFIX + n.upper() for n in settings.NOT_SETTINGS}.isdisjoint(harness_env.FORMER.values())
    assert not any(n.startswith(settings.ENV_PREFIX) for n in harness_env.FORMER)  # the loader never reads them


def test_cli_reports_bad_settings_without_traceback(run_cli):
    result = run_cli("serve", "--dry-run", "--set", "specultive_num_steps=2")
    assert result.returncode == 2
    assert "did you mean 'speculative_num_steps'?" in result.stderr and "Traceback" not in result.stderr


def test_json_schema_documents_every_field(run_cli):
    result = run_cli("settings", "schema")
    schema = json.loads(result.stdout)
    assert set(schema["properties"]) == set(settings.ServerSettings.model_fields)
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
        assert "sglangFlag" in prop, name
    assert schema["properties"]["tp_size"]["default"] == 8 and schema["properties"]["tp_size"]["minimum"] == 1
    assert schema["additionalProperties"] is False


def test_json_schema_says_it_is_generated_and_its_keys_are_one_style(run_cli):
    """The committed copy (modules/settings-schema.json) names its generator; every keyword, JSON Schema's own and
    ours, is camelCase (property names are the settings' own, snake_case, and are not keywords)."""
    schema = json.loads(run_cli("settings", "schema").stdout)
    assert schema["$comment"].startswith("GENERATED by `sglang-eagle3 settings schema`")

    def keywords(node) -> set[str]:
        if isinstance(node, list):
            return set().union(*map(keywords, node)) if node else set()
        if not isinstance(node, dict):
            return set()
        found = set(node) - {"properties"}
        for key, value in node.items():
            found |= set().union(*map(keywords, value.values())) if key == "properties" else keywords(value)
        return found

    assert [k for k in keywords(schema) if not re.fullmatch(r"\$?[a-z]+(?:[A-Z][a-z0-9]*)*", k)] == []


def test_docs_reference_is_generated_from_the_definition():
    readme = (REPO / "docs" / "serve.md").read_text()
    match = re.search(r"<!-- settings-reference:start -->\n(.*?)\n<!-- settings-reference:end -->", readme, re.S)
    assert match, "docs/serve.md lacks the generated settings reference block"
    assert match.group(1).strip() == settings.reference_markdown().strip(), (
        "stale: regenerate with `sglang-eagle3 settings reference --write docs/serve.md`"
    )


def test_sglang_flags_are_the_field_names_and_sglang_knows_them(pristine_tree):
    """A setting's flag is derived from its name; every such flag exists in SGLang 0.5.9's own parser."""
    known = server_flags(locate(pristine_tree))
    launcher_only = {
        n for n in settings.ServerSettings.model_fields if settings.field_flag(n) is None and not settings.field_env(n)
    }
    assert {n for n in settings.ServerSettings.model_fields if settings.field_env(n)} == {"pcie_ipc_allreduce"}
    assert launcher_only == {
        "api_key_file", "admin_api_key_file", "ssl_keyfile_password_file", "extra_args", "environment",
        "ready_timeout", "stop_timeout"
    }  # fmt: skip
    for name in set(settings.ServerSettings.model_fields) - launcher_only - {"pcie_ipc_allreduce"}:
        flag = settings.field_flag(name)
        assert flag == "--" + name.replace("_", "-") and flag in known, name
    assert not {"--" + n.replace("_", "-") for n in launcher_only} & set(known)  # none shadows a real flag


@pytest.mark.parametrize("field", ["ready_timeout", "stop_timeout"])
def test_the_docs_give_the_timeouts_settings_default(field):
    """Where README.md or docs/*.md give a timeout's value in seconds ("`ready_timeout` (7200 s)", "ready_timeout
    7,200 s", "its default, 7200 s"), it is settings.py's default (docs/gpu-host.md once said 3600 s)."""
    default = settings.ServerSettings.model_fields[field].default
    said = re.compile(rf"{field}`? \(?(?:its default, )?(\d[\d,]*) s\b")
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    found = [(doc.name, int(m[1].replace(",", ""))) for doc in docs for m in said.finditer(doc.read_text())]
    assert [f for f in found if f[1] != default] == []
    assert found or field == "stop_timeout", "no doc names ready_timeout's default any more: drop this test"
