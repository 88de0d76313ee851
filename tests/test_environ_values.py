"""A variable's value as each tree reads it (source/environ_values.py), against SGLang's own EnvField.get().

The oracle is the tree's real srt/environ.py, executed in a child process (its classes and ``envs``; the import of
sglang at its end fails there, after them): for each case it sets the variable and calls ``get()``, recording the
value and whether SGLang warned that it used the default instead. No SGLang import, no GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from sglang_eagle3.judging import preflight
from sglang_eagle3.judging.findings import Status
from sglang_eagle3.serving.settings import ServerSettings
from sglang_eagle3.source import environ_values, sglang_source
from support.gpus import fake_nvidia_smi

ORACLE = r"""
import json, os, sys, warnings
source = open(sys.argv[1]).read()
scope = {"__name__": "environ_oracle"}
try:
    exec(compile(source, sys.argv[1], "exec"), scope)
except ImportError:
    pass  # the sglang imports at the end of the file: envs and its classes are defined by then
envs, answers = scope["envs"], []
for variable, text in json.load(sys.stdin):
    os.environ[variable] = text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(envs, variable).get()
    os.environ.pop(variable)
    fell_back = any(f"Invalid value for {variable}" in str(w.message) for w in caught)
    answers.append({"value": value if isinstance(value, (bool, int, float, str)) else repr(value),
                    "fell_back": fell_back})
print(json.dumps(answers))
"""

TEXTS = ["true", "Y", "yes", "No", "0", "1", "maybe", "", " 1", "1.5", "1e3", "nan", "-3", "0x10", "12_000", "inf",
         "None", "a,b", "10 "]  # fmt: skip


def declared(tree) -> dict:
    path = tree.srt / "environ.py"
    return environ_values._declarations(str(path), path.stat().st_mtime_ns)[0]


def one_of_each_kind(tree) -> dict[str, str]:
    """A variable of each class Envs uses (kind -> variable)."""
    chosen = {}
    for variable, found in sorted(declared(tree).items()):
        chosen.setdefault(found.kind, variable)
    return chosen


def oracle(tree, cases: list[tuple[str, str]]) -> list[dict]:
    result = subprocess.run([sys.executable, "-c", ORACLE, str(tree.srt / "environ.py")], input=json.dumps(cases),
                            capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_variable_of_envs_has_a_class_whose_parse_runs_here_but_those_that_open_files(tree):
    found = declared(tree)
    assert len(found) > 200 and "SGLANG_USE_MODELSCOPE" in found
    kinds = {f.kind for f in found.values()}
    assert {"EnvBool", "EnvInt", "EnvFloat", "EnvStr"} <= kinds
    not_run = {f.kind for f in found.values() if f.parse is None}
    assert not_run == ({"EnvJSON"} if tree.version == "0.5.23" else set())  # EnvJSON reads a path on the server


@hypothesis_settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(extra=st.lists(st.text(max_size=8), min_size=1, max_size=6))
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_the_reading_is_sglangs_own_get(version, extra, request):
    """Each kind of variable, given generated text and the edge cases above: where get() warns and uses the
    default, the reading has parse()'s error; elsewhere the very value get() returns."""
    tree = sglang_source.locate(request.getfixturevalue("pristine_tree" if version == "0.5.9" else "newest_tree"))
    texts = [t for t in TEXTS + extra if "\x00" not in t]
    cases = [(variable, text) for variable in one_of_each_kind(tree).values() for text in texts]
    readings = [environ_values.read(tree, variable, text) for variable, text in cases]
    judged = [(case, r, o) for case, r, o in zip(cases, readings, oracle(tree, cases), strict=True) if r is not None]
    assert len(judged) >= len(cases) - 2 * len(texts)  # all but EnvJSON's (and at most one other kind)
    assert {own["fell_back"] for _, _, own in judged} == {True, False}  # both outcomes are compared
    for (variable, text), reading, own in judged:
        assert (reading.error is not None) == own["fell_back"], (variable, text, reading, own)
        if reading.error is None:
            value = reading.value if isinstance(reading.value, (bool, int, float, str)) else repr(reading.value)
            assert value == own["value"] or value != value and own["value"] != own["value"], (variable, text)


@pytest.fixture(scope="module")
def smi(tmp_path_factory):
    return fake_nvidia_smi(tmp_path_factory.mktemp("smi"), "8x-rtx-pro-6000.csv")


def settings_finding(tree, smi, environment: dict):
    report = preflight.preflight(ServerSettings(environment=environment), str(tree.root), nvidia_smi=smi, drafts=False)
    return next(f for f in report.findings if f.name == "settings")


def test_a_value_the_tree_cannot_read_fails_preflight_naming_the_variable(tree, smi):
    """An int variable given 'many': SGLang would warn and run with its default; preflight FAILs naming the
    variable, the class's parse() line and the default. A value it reads passes."""
    variable = one_of_each_kind(tree)["EnvInt"]
    found = settings_finding(tree, smi, {variable: "many"})
    assert found.status is Status.FAIL, found
    reading = environ_values.read(tree, variable, "many")
    assert found.message.startswith(f"environment {variable}: SGLang {tree.version} cannot read 'many' (EnvInt.parse")
    assert reading.parse_at in found.message and f"the default {reading.default} instead" in found.message
    path, line = reading.parse_at.split(":")
    assert "def parse" in (tree.package / path).read_text().splitlines()[int(line) - 1]
    assert settings_finding(tree, smi, {variable: "12"}).status is Status.OK


def test_spec_v2_is_on_exactly_when_0_5_9s_own_envbool_reads_it_true(pristine_tree, smi):
    """The spec-v2-topk rule reads SGLANG_ENABLE_SPEC_V2 with the tree's EnvBool.parse: 'Y' turns it on, 'no'
    leaves it off, 'maybe' is refused as unreadable (SGLang would run with False), not as the top-k rule."""
    tree = sglang_source.locate(pristine_tree)
    tree_settings = {"speculative_eagle_topk": 2, "speculative_num_draft_tokens": 4}

    def judged(text):
        report = preflight.preflight(ServerSettings(**tree_settings, environment={"SGLANG_ENABLE_SPEC_V2": text}),
                               str(tree.root), nvidia_smi=smi, drafts=False)  # fmt: skip
        return next(f for f in report.findings if f.name == "settings")

    assert "SGLANG_ENABLE_SPEC_V2 supports only top-k 1" in judged("Y").message
    assert judged("no").status is Status.OK
    maybe = judged("maybe")
    assert "cannot read 'maybe'" in maybe.message and "supports only top-k 1" not in maybe.message
