"""Run SGLang's own argument validation on an argv, in a process of its own; print the outcome as one JSON line.

    python -m sglang_eagle3.judging.sglang_validation_main < request.json

Started by preflight (sglang_validation.py) with the interpreter and environment the server will have; the
request names the argv, the GPUs as nvidia-smi reported them, and the tree's modules its validation imports lazily.
What runs is SGLang's own code, as ``launch_server`` runs it before the load: the parser, the resolution, then
``check_server_args``. Two things are answered instead of probed, so that it runs in seconds on any machine:

- the GPU: torch.cuda answers with the facts nvidia-smi gave; a fact it did not give raises MissingFact, and the
  run says which one was needed. The tree's modules are imported first, with this machine's own answers (so a
  GPU-only import such as sgl_kernel is not taken without a GPU), then the tree's cached device probes are cleared.
- the model hub: HF_HUB_OFFLINE=1 (the caller sets it): a model that is not on this host is not downloaded.

The outcome: the fields SGLang changed (``rewritten``), or the stage that refused and SGLang's own error and line.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import traceback
from pathlib import Path


class ParseError(Exception):
    """The parser refused the argv (argparse's message, without its usage text)."""


class MissingFact(Exception):
    """The validation asked the GPU for something nvidia-smi did not report."""


def _refuse(parser, message):  # argparse.ArgumentParser.error prints the usage and exits 2
    raise ParseError(message)


class _Properties:
    """torch.cuda.get_device_properties(): the facts nvidia-smi gave, MissingFact for any other."""

    def __init__(self, name: str, capability: tuple[int, int], memory_mib: int | None):
        self.name, (self.major, self.minor) = name, capability
        if memory_mib is not None:  # else total_memory is a MissingFact, as any other attribute
            self.total_memory = memory_mib << 20

    def __getattr__(self, attribute):
        raise MissingFact(f"torch.cuda.get_device_properties().{attribute}")


def answer_gpu_facts(facts: dict, common) -> None:
    """torch.cuda (and SGLang's nvidia-smi reader) answer with the host's facts; SGLang's cached probes forget."""
    import torch

    major, minor = (int(p) for p in facts["compute_capability"].split("."))
    names, memory = facts["names"], [None if m is None else int(m) for m in facts["memory_mib"]]
    count = len(names)

    def index(device=None) -> int:
        value = getattr(device, "index", device)
        return 0 if value is None or isinstance(value, str) else int(value)

    def missing(what):
        def ask(*args, **kwargs):
            raise MissingFact(what)

        return ask

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: count
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_name = lambda device=None: names[index(device) % count]
    torch.cuda.get_device_properties = lambda device=None: _Properties(
        names[index(device) % count], (major, minor), memory[index(device) % count]
    )
    torch.cuda.mem_get_info = missing("torch.cuda.mem_get_info() (free GPU memory)")
    if torch.version.cuda is None:  # a CPU build of torch: the GPU host's is a CUDA one
        torch.version.cuda = "13.0"
    if None in memory:
        common.get_nvgpu_memory_capacity = missing("nvidia-smi's memory.total (it reported none)")
    else:
        common.get_nvgpu_memory_capacity = lambda: float(min(memory))
    for value in vars(common).values():
        if isinstance(value, functools._lru_cache_wrapper):
            value.cache_clear()


class Recorder:
    """Where the resolution changes fields (0.5.9: assignments to ServerArgs fields; later: declare_resolution and
    the dicts post-process passes return), and with ``trace`` every function of the tree entered."""

    def __init__(self, package: Path, trace: bool):
        self.package, self.trace = str(package), trace
        self.changes: list[tuple[str, object, str]] = []  # (field, value, file:line)
        self.entered: set[str] = set()

    def where(self, frame) -> str:
        return f"{Path(frame.f_code.co_filename).relative_to(self.package).as_posix()}:{frame.f_lineno}"

    def inside(self, frame) -> bool:
        return frame.f_code.co_filename.startswith(self.package)

    def profile(self, frame, event, arg):
        code = frame.f_code
        if not self.inside(frame):
            return
        caller = frame.f_back
        if event == "call":
            if self.trace:
                self.entered.add(f"{self.where(frame).rsplit(':', 1)[0]}::{code.co_qualname}")
            if code.co_name == "declare_resolution" and caller is not None and self.inside(caller):
                if caller.f_code.co_name != "run_post_process_pass":
                    for name, value in (frame.f_locals.get("fields") or {}).items():
                        self.changes.append((name, value, self.where(caller)))
        elif event == "return" and caller is not None and caller.f_code.co_name == "run_post_process_pass":
            passed = caller.f_locals.get("fn")  # the pass itself, not a helper run_post_process_pass calls
            if getattr(passed, "__code__", None) is not code or not isinstance(arg, dict):
                return
            for name, value in arg.items():
                self.changes.append((name, value, self.where(frame)))

    def setattr_of(self, original):
        recorder = self

        def __setattr__(record, name, value):
            caller = sys._getframe(1)
            if recorder.inside(caller):
                recorder.changes.append((name, value, recorder.where(caller)))
            original(record, name, value)

        return __setattr__


def _plain(value):
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)


def _failure(stage: str, err: BaseException, package: Path) -> dict:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith(str(package))]
    where = f"{Path(frames[-1].filename).relative_to(package).as_posix()}:{frames[-1].lineno}" if frames else None
    if isinstance(err, MissingFact):
        return {"stage": stage, "missing_fact": str(err), "where": where}
    text = str(err) if isinstance(err, ParseError) else f"{type(err).__name__}: {err}"
    return {"stage": stage, "error": text, "where": where}


def validate(request: dict) -> dict:
    argparse.ArgumentParser.error = _refuse
    try:
        server_args = importlib.import_module("sglang.srt.server_args")
        package = Path(server_args.__file__).parents[1]  # as the code objects name their files
        for name in request.get("modules", []):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module of other hardware (torch_npu, ...): the run never takes it
                pass
        from sglang.srt.utils import common
    except Exception as err:  # noqa: BLE001 - any import failure is the outcome, reported
        return {"stage": "import", "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-2000:]}
    answer_gpu_facts(request["facts"], common)
    recorder = Recorder(package, request.get("trace", False))
    record_class = server_args.ServerArgs
    plain_setattr = record_class.__setattr__
    dataclass_record = hasattr(record_class, "__dataclass_fields__")
    stage = "parse"
    sys.setprofile(recorder.profile)
    try:
        parser = argparse.ArgumentParser()
        record_class.add_cli_args(parser)
        given = _given(parser, request["argv"])
        if dataclass_record:  # 0.5.9: __post_init__ runs in the constructor, from_cli_args
            record_class.__setattr__ = recorder.setattr_of(plain_setattr)
            stage = "resolve"
        args = server_args.prepare_server_args(request["argv"])
        stage = "resolve"
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        stage = "check"
        args.check_server_args()
    except BaseException as err:  # noqa: BLE001 - SGLang's own refusal is the outcome
        sys.setprofile(None)
        return {**_failure(stage, err, package), "entered": sorted(recorder.entered)}
    finally:
        sys.setprofile(None)
        if dataclass_record:
            record_class.__setattr__ = plain_setattr
    fields = getattr(record_class, "__dataclass_fields__", None) or given
    final = args.resolved_dict() if hasattr(args, "resolved_dict") else {f: getattr(args, f) for f in fields}
    rewritten = []
    for name, value in given.items():
        if name not in final:  # a parser-only name (0.5.9's tensor_parallel_size becomes tp_size)
            continue
        now = final[name]
        if now != value:
            where = next((w for n, v, w in reversed(recorder.changes) if n == name), None)
            rewritten.append({"field": name, "given": _plain(value), "now": _plain(now), "where": where})
    return {"stage": "done", "rewritten": rewritten, "entered": sorted(recorder.entered)}


def _given(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    """The fields the argv sets, with the values the parser makes of them."""
    parsed = vars(parser.parse_args(argv))
    given = {}
    for token in argv:
        action = parser._option_string_actions.get(token.split("=", 1)[0]) if token.startswith("--") else None
        if action is not None and action.dest in parsed:
            given[action.dest] = parsed[action.dest]
    return given


def main() -> None:
    request = json.load(sys.stdin)
    outcome = validate(request)
    sys.stdout.flush()
    print("\n" + json.dumps(outcome, default=repr))


if __name__ == "__main__":
    main()
