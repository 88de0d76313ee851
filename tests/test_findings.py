"""One finding type and one scale for every check: the probe, the draft checks, preflight, the bench gate."""

from __future__ import annotations

import ast

from conftest import REPO
from sglang_eagle3.judging.findings import Finding, Status, passed, render_verdict, to_json, verdict

PKG = REPO / "python" / "src" / "sglang_eagle3"


def test_the_verdict_is_the_worst_status_and_only_fail_fails():
    ok, unknown, warn, fail = (Finding(s.value, s, "m") for s in Status)
    assert verdict([]) is Status.OK and passed([])
    assert verdict([ok, unknown]) is Status.NOT_CHECKED and passed([ok, unknown])
    assert verdict([unknown, warn, ok]) is Status.WARN and passed([warn])
    assert verdict([ok, fail, warn, unknown]) is Status.FAIL and not passed([ok, fail])


def test_one_text_style_and_one_json_shape():
    findings = [
        Finding("port", Status.FAIL, "0.0.0.0:30000 is in use"),
        Finding("target class", Status.OK, "KimiK25ForConditionalGeneration", where="srt/models/kimi_k25.py:648"),
        Finding("combination", Status.NOT_CHECKED, "SM 10.3 with tp 3 is not known here"),
        Finding("fusion", Status.WARN, "ignored"),
    ]
    assert [f.render() for f in findings] == [
        "[FAIL] port: 0.0.0.0:30000 is in use",
        "[ OK ] target class: KimiK25ForConditionalGeneration (srt/models/kimi_k25.py:648)",
        "[ ?? ] combination: SM 10.3 with tp 3 is not known here",
        "[WARN] fusion: ignored",
    ]
    assert render_verdict(findings) == "Verdict: FAIL (1 fail, 1 warn, 1 not checked, 1 ok)"
    assert render_verdict([]) == "Verdict: OK"
    assert to_json(findings[:2]) == {
        "verdict": "fail",
        "findings": [
            {"name": "port", "status": "fail", "message": "0.0.0.0:30000 is in use", "where": None},
            {"name": "target class", "status": "ok", "message": "KimiK25ForConditionalGeneration",
             "where": "srt/models/kimi_k25.py:648"},
        ],
    }  # fmt: skip
    assert findings[0].prefixed("draft").name == "draft port"


def test_no_other_outcome_type_in_the_package():
    """No second record or scale for an outcome: no enum or dataclass named like one outside findings.py."""
    outcome_words = ("Verdict", "CheckStatus", "Check", "Result", "Status")
    others = []
    for path in PKG.rglob("*.py"):
        if path.name == "findings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (node.name in outcome_words or node.name.endswith("Verdict")):
                others.append(f"{path.relative_to(PKG)}: {node.name}")
    assert others == []
