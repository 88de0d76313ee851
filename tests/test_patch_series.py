"""The patch series apply cleanly, in order, to their pristine wheels (SGLang 0.5.9; 0.5.23's too)."""

from __future__ import annotations

import ast
import py_compile
import shutil

import pytest
from conftest import REPO, SERIES_DIR, gnu_patch, series_names
from sglang_eagle3.trees import patchset

FORWARDED = {"get_embed_and_head", "set_embed_and_head", "set_eagle3_layers_to_capture"}


def test_series_lists_every_patch_file_and_nothing_else():
    on_disk = {p.name for p in SERIES_DIR.glob("*.patch")}
    assert set(series_names()) == on_disk
    assert len(series_names()) == len(set(series_names())), "a patch is listed twice"


# Every pinned series and the fixture of the pristine tree it is written against (0.5.9, and the 0.5.23 stack's).
SERIES = {SERIES_DIR: "pristine_tree", REPO / "patches" / "sglang-0.5.23": "newest_tree"}
PATCHES = [(d, n) for d in SERIES for n in patchset.read_series(d / "series")]


@pytest.mark.parametrize(("series", "name"), PATCHES, ids=[f"{d.name}/{n}" for d, n in PATCHES])
def test_every_patch_has_a_header_saying_what_why_and_upstream(series, name):
    header = (series / name).read_text().split("\n--- a/", 1)[0]
    for section in ("What:", "Why:", "Upstream:"):
        assert section in header, f"{name} header lacks {section!r}"


@pytest.mark.parametrize("series", list(SERIES), ids=[d.name for d in SERIES])
def test_series_applies_in_order_without_fuzz(series, request, tmp_path):
    pristine = request.getfixturevalue(SERIES[series])
    tree = tmp_path / "tree"
    shutil.copytree(pristine / "sglang", tree / "sglang")
    for name in patchset.read_series(series / "series"):
        result = gnu_patch(tree, series / name)
        assert result.returncode == 0, f"{name}:\n{result.stdout}{result.stderr}"
        # GNU patch reports offsets and fuzz; a clean application reports neither.
        assert "offset" not in result.stdout and "fuzz" not in result.stdout, result.stdout


def test_patched_files_compile(patched_tree):
    touched = {line.split()[1].split("/", 1)[1] for name in series_names()
               for line in (SERIES_DIR / name).read_text().splitlines() if line.startswith("+++ ")}  # fmt: skip
    assert touched
    for rel in sorted(touched):
        py_compile.compile(str(patched_tree / rel), doraise=True)


def _class(module: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name)


def test_forwarded_methods_are_inside_the_class(patched_tree):
    """The hand patch users had appended methods after EntryClass; ours must be class members."""
    module = ast.parse((patched_tree / "sglang/srt/models/kimi_k25.py").read_text())
    cls = _class(module, "KimiK25ForConditionalGeneration")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert FORWARDED <= methods.keys()
    for name in FORWARDED:
        # Each one forwards to the inner language model, as mllama4's wrapper does.
        calls = [ast.unparse(c.func) for c in ast.walk(methods[name]) if isinstance(c, ast.Call)]
        assert f"self.language_model.{name}" in calls, (name, calls)
    # Nothing defined at module level after the class except EntryClass.
    top_level_functions = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    assert not FORWARDED & top_level_functions
    assert isinstance(module.body[-1], ast.Assign) and ast.unparse(module.body[-1].targets[0]) == "EntryClass"


def test_pristine_wrapper_lacks_the_methods(pristine_tree):
    """The baseline the patch fixes: 0.5.9's wrapper defines none of them."""
    module = ast.parse((pristine_tree / "sglang/srt/models/kimi_k25.py").read_text())
    cls = _class(module, "KimiK25ForConditionalGeneration")
    assert not FORWARDED & {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_sm120_tables_and_gate_in_patched_source(patched_tree):
    comm = patched_tree / "sglang/srt/distributed/device_communicators"
    sizes_module = ast.parse((comm / "all_reduce_utils.py").read_text())
    sizes = next(
        n
        for n in sizes_module.body
        if isinstance(n, ast.Assign) and n.targets[0].id == "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"
    )
    assert 12 in [k.value for k in sizes.value.keys]
    cls = _class(ast.parse((comm / "torch_symm_mem.py").read_text()), "TorchSymmMemCommunicator")
    multimem = next(
        n for n in cls.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "_WORLD_SIZES_MULTIMEM"
    )
    assert ast.literal_eval(multimem.value)[12] == [], "SM120 must take the two-shot kernel for every world size"
    gate_module = ast.parse((patched_tree / "sglang/srt/layers/communicator.py").read_text())
    gate = next(
        n for n in gate_module.body if isinstance(n, ast.FunctionDef) and n.name == "apply_flashinfer_allreduce_fusion"
    )
    assert "_is_sm120_supported" in ast.unparse(gate)
    # Still opt-in: server_args' auto-enable is untouched and never mentions SM120.
    server_args = (patched_tree / "sglang/srt/server_args.py").read_text()
    auto = server_args[server_args.index("TRTLLM AllReduce Fusion supports") :][:1500]
    assert "is_sm120_supported" not in auto
