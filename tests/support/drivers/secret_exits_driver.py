"""Drive the exits of the secret-exit audit with SGLang's own code on CPU; print one JSON object.

Usage: python secret_exits_driver.py TREE SECRETS_JSON OUTDIR

TREE holds sglang/ (0.5.9 or 0.5.23, pristine or patched). SECRETS_JSON maps every secret
field of its ServerArgs to a distinct value. Prints {probe: what that exit gave out}, where
a list names the files it wrote (the request and crash dumps, under OUTDIR); everything the
code logged is the probe "log". The test (tests/test_secret_exits.py) searches all of it.

Each probe runs the function that holds the exit, compiled from the tree's own source
(``compiled``: the function's statements as they are, decorators dropped), with SGLang's
real helpers where they import (ServerArgs, the watermark redaction, build_server_info,
RuntimeContext's methods, msgspec). What stands in, and why:
- ``self``: a plain object holding only the attributes the function reads (a scheduler,
  tokenizer manager or engine cannot be built without a GPU and a model);
- 0.5.9's ServerArgs.__post_init__ is skipped: it probes for an accelerator and reads the
  model's config, neither of which is under test;
- 0.5.23's sglang/__init__.py is not run, and its engine.py, http_server.py,
  tokenizer_manager.py, internal_state.py and rust_server/ cannot be imported here (they
  import transformers 5 models; the test environment has 0.5.9's transformers 4.57): the
  functions are compiled from those files with the real helpers they call;
- protobuf (0.5.9's gRPC GetServerInfo) and the Rust extension are not installed: their
  message and server objects are dictionaries that record what they are given;
- the multi-tokenizer shared memory holds the secrets by design (the tokenizer workers
  check requests with the keys): its probe reports the segment's mode, not its content.
"""

from __future__ import annotations
import __future__

import ast
import asyncio
import io
import json
import logging
import os
import stat
import sys
import time
import types
from pathlib import Path
from types import SimpleNamespace as NS

ROOT, SECRETS, OUT = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
NEW_LAYOUT = (ROOT / "sglang" / "srt" / "arg_groups" / "fields").is_dir()  # 0.5.23
if NEW_LAYOUT:  # enter the package without running sglang/__init__.py (see above)
    package = types.ModuleType("sglang")
    package.__path__ = [str(ROOT / "sglang")]
    sys.modules["sglang"] = package
else:
    sys.path.insert(0, str(ROOT))

LOG = io.StringIO()
handler = logging.StreamHandler(LOG)
handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG)

# The command line of a server given every secret flag, for the code that echoes sys.argv.
FLAGS = {"api_key": "--api-key", "admin_api_key": "--admin-api-key", "ssl_keyfile_password": "--ssl-keyfile-password",
         "watermark_config": "--watermark-config"}  # fmt: skip
ARGV = ["--model-path", "m"]
for name, flag in FLAGS.items():
    if name in SECRETS:
        ARGV += [flag, SECRETS[name]] if name != "admin_api_key" else [f"{flag}={SECRETS[name]}"]
sys.argv = ["sglang.launch_server", *ARGV]


def compiled(rel: str, *qualnames: str, namespace: dict) -> dict:
    """The named functions (``Class.method`` for a method) of sglang/<rel>, compiled from its source into
    ``namespace`` under their own names, decorators dropped."""
    module = ast.parse((ROOT / "sglang" / rel).read_text())
    for qualname in qualnames:
        scope, *path = qualname.split(".")
        node = next(n for n in module.body if getattr(n, "name", None) == scope)
        for name in path:
            node = next(n for n in node.body if getattr(n, "name", None) == name)
        node.decorator_list = []
        # Annotations stay unevaluated (as under `from __future__ import annotations`): they name types
        # this driver does not import.
        code = compile(ast.Module([node], []), str(ROOT / "sglang" / rel), "exec",
                       flags=__future__.annotations.compiler_flag, dont_inherit=True)  # fmt: skip
        exec(code, namespace)
    return namespace


def statement_value(rel: str, qualname: str, match) -> ast.expr:
    """The first expression in the function ``qualname`` of sglang/<rel> that ``match`` accepts."""
    module = ast.parse((ROOT / "sglang" / rel).read_text())
    scope, *path = qualname.split(".")
    node = next(n for n in module.body if getattr(n, "name", None) == scope)
    for name in path:
        node = next(n for n in node.body if getattr(n, "name", None) == name)
    return next(n for n in ast.walk(node) if match(n))


def method_holder(name: str, functions: dict, **attributes):
    """An object of a class named ``name`` with ``functions`` as its methods and ``attributes`` set."""
    cls = type(name, (), {k: v for k, v in functions.items() if callable(v)})
    holder = cls()
    holder.__dict__.update(attributes)
    return holder


def text(value) -> str:
    return json.dumps(value, default=repr)


# -- SGLang 0.5.9 ---------------------------------------------------------------------------------


def probes_0_5_9() -> dict:
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    ServerArgs.__post_init__ = lambda self: None  # probes for an accelerator (see the module docstring)
    args = ServerArgs(model_path="m", **SECRETS)
    out = {"repr": f"{args!r} {args} {args=}"}  # what every f"{server_args=}" / !r log line prints

    ns = {"dataclasses": dataclasses, "logger": logging.getLogger("scheduler"), "logging": logging,
          "get_global_server_args": lambda: args, "RECORD_STEP_TIME": False,
          "GetInternalStateReqOutput": lambda internal_state: internal_state,
          "SetInternalStateReqOutput": lambda updated, server_args: {"updated": updated,
                                                                     "server_args": server_args}}  # fmt: skip
    compiled("srt/managers/scheduler.py", "Scheduler.get_internal_state", "Scheduler.set_internal_state", namespace=ns)
    scheduler = NS(last_gen_throughput=1.0, max_total_num_tokens=8, max_running_requests=4, pp_size=1,
                   tp_worker=NS(model_runner=NS(weight_load_mem_usage=1.0, graph_mem_usage=0.0)),
                   token_to_kv_pool_allocator=NS(get_kvcache=lambda: NS(mem_usage=0.5)),
                   spec_algorithm=NS(is_none=lambda: True), spec_total_num_forward_ct=0,
                   spec_total_num_accepted_tokens=0)  # fmt: skip
    state = dict(ns["get_internal_state"](scheduler, None))  # a copy: 0.5.9's vars() is the object's own dict
    out["internal_state"] = text(state)
    out["set_internal_state"] = text(
        ns["set_internal_state"](scheduler, NS(server_args={"pp_max_micro_batch_size": 2}))
    )

    async def get_internal_state():
        return [state]

    manager = NS(server_args=args, get_internal_state=get_internal_state)
    http = compiled("srt/entrypoints/http_server.py", "get_server_info", "server_info", namespace={
        "dataclasses": dataclasses, "logger": logging.getLogger("http"), "__version__": "0.5.9",
        "_global_state": NS(tokenizer_manager=manager, scheduler_info={})})  # fmt: skip
    out["http_server_info"] = text(asyncio.run(http["get_server_info"]()))
    engine = compiled("srt/entrypoints/engine.py", "Engine.get_server_info", namespace={
        "dataclasses": dataclasses, "__version__": "0.5.9"})  # fmt: skip
    loop = asyncio.new_event_loop()
    out["engine_server_info"] = text(
        engine["get_server_info"](NS(loop=loop, tokenizer_manager=manager, scheduler_info={}))
    )

    class Struct(dict):  # protobuf's Struct: records what it is given (see the module docstring)
        pass

    grpc = compiled("srt/entrypoints/grpc_server.py", "SGLangSchedulerServicer.GetServerInfo", namespace={
        "dataclasses": dataclasses, "Struct": Struct, "time": time, "logger": logging.getLogger("grpc"),
        "Timestamp": lambda: NS(FromSeconds=lambda s: None), "sglang": NS(__version__="0.5.9"),
        "sglang_scheduler_pb2": NS(GetServerInfoResponse=lambda **fields: fields)})  # fmt: skip
    servicer = NS(server_args=args, scheduler_info={}, start_time=time.time(), request_manager=NS(
        get_server_info=lambda: {"active_requests": 0, "paused": False, "last_receive_time": 0.0}))  # fmt: skip
    out["grpc_server_info"] = text(asyncio.run(grpc["GetServerInfo"](servicer, None, None)))

    from sglang.srt import server_args as module

    redact = getattr(module, "redact_secret_args", None)  # patch 0005's, when the tree has it
    out.update(write_dumps(args, namespace={"redact_secret_args": redact}))
    out["shm"] = shared_memory_mode("srt/managers/multi_tokenizer_mixin.py", args)
    return out


def write_dumps(args, methods: tuple[str, ...] = (), namespace: dict | None = None, **attributes) -> dict:
    """The request dump and the crash dump, written under OUT by TokenizerManager's own methods (and
    ``methods``, the helpers they call): {probe: [the files]}."""
    import datetime as dt
    import pickle
    import socket

    ns = compiled("srt/managers/tokenizer_manager.py", "TokenizerManager._dump_data_to_file",
                  "TokenizerManager.dump_requests_before_crash", *methods, namespace={
                      "os": os, "pickle": pickle, "asyncio": asyncio, "logger": logging.getLogger("tokenizer"),
                      "socket": socket, "time": time, "datetime": dt.datetime, "sys": sys,
                      **(namespace or {})})  # fmt: skip
    finished = [(NS(rid="r1", text="hello"), {}, 0.0, 1.0)]
    manager = method_holder("TokenizerManager", ns, server_args=args, crash_dump_folder=str(OUT / "crash"),
                            crash_dump_performed=False, crash_dump_request_list=list(finished), rid_to_state={},
                            **attributes)  # fmt: skip

    async def request_dump():
        manager._dump_data_to_file(finished, str(OUT / "requests" / "dump.pkl"), "dumping requests")
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))  # its write, on a thread

    asyncio.run(request_dump())
    manager.dump_requests_before_crash(hostname="host")
    return {
        "request_dump": [str(OUT / "requests" / "dump.pkl")],
        "crash_dump": sorted(map(str, (OUT / "crash").rglob("*.pkl"))),
    }


def shared_memory_mode(rel: str, args) -> str:
    """The mode of the segment write_to_shared_memory makes for the tokenizer workers (then removed)."""
    import pickle
    from multiprocessing import shared_memory

    ns = compiled(rel, "write_to_shared_memory", namespace={"pickle": pickle, "shared_memory": shared_memory})
    name = f"sglang_eagle3_probe_{os.getpid()}"
    segment = ns["write_to_shared_memory"](("port_args", args, {}), name)
    try:
        return f"{stat.S_IMODE(os.stat(f'/dev/shm/{name}').st_mode):04o}"
    finally:
        segment.close()
        segment.unlink()


# -- SGLang 0.5.23 --------------------------------------------------------------------------------


def probes_0_5_23() -> dict:
    import msgspec
    from sglang.srt.runtime_context import RuntimeContext
    from sglang.srt.sampling.watermarking import core
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import common
    from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

    args = prepare_server_args(ARGV)
    logging.getLogger().addHandler(handler)  # prepare_server_args' logging.basicConfig(force=True) removed it
    for name, value in SECRETS.items():  # the fields with no flag (watermark_key, _b: resolved from the config)
        if getattr(args, name) != value:
            msgspec.Struct.__setattr__(args, name, value)
    context_state = NS(server_args=args, _overrides_log=[("update_server_args", {"pp_max_micro_batch_size": 2})])
    context = NS(  # RuntimeContext's own methods, on the two attributes they read
        resolved_server_args_dict=lambda base=None: RuntimeContext.resolved_server_args_dict(context_state, base),
        overrides_log=lambda: RuntimeContext.overrides_log(context_state),
    )
    real = {"redact_watermark_secrets": core.redact_watermark_secrets, "build_server_info": common.build_server_info,
            "redact_watermark_command_line": core.redact_watermark_command_line, "get_context": lambda: context,
            "msgspec_to_builtins": msgspec_to_builtins, "msgspec": msgspec, "json": json,
            "__version__": "0.5.23"}  # fmt: skip
    out = {"repr": f"{args!r} {args}", "launch_command": str(args.launch_command)}

    logging_ns = compiled("srt/entrypoints/engine.py", "_server_args_for_logging", namespace=dict(real))
    out["startup_log"] = f"server_args={logging_ns['_server_args_for_logging'](args)}"  # engine.py's logger.info line
    launch = statement_value("srt/entrypoints/engine.py", "Engine.__init__", lambda n: isinstance(n, ast.Call) and any(
        isinstance(a, ast.Constant) and a.value == "_launch_command" for a in n.args))  # fmt: skip
    kwargs = {"model_path": "m", **{k: v for k, v in SECRETS.items() if k in FLAGS}}
    out["engine_launch_command"] = eval(compile(ast.Expression(launch.args[2]), "engine.py", "eval"),
                                        {**real, "kwargs": kwargs})  # fmt: skip

    # A scheduler's internal state, and what the Rust server is handed of it.
    internal = compiled("srt/managers/scheduler_components/internal_state.py",
                        "SchedulerInternalStateController.get_internal_state", namespace={
                            **real, "GetInternalStateReqOutput": InternalStateOutput})  # fmt: skip
    contributions = {f"_add_{p}": (lambda self, state: None) for p in (
        "topology", "memory_usage", "disaggregation", "elastic_ep", "speculative", "step_times", "rust_server",
        "env_vars")}  # fmt: skip
    controller = method_holder("SchedulerInternalStateController", {**internal, **contributions})
    state_output = controller.get_internal_state(None)
    out["internal_state"] = text(state_output.internal_state)
    pushed = {}
    rust = compiled("srt/rust_server/server.py", "RustServer.push_control_output", namespace=dict(real))
    rust_server = method_holder("RustServer", rust, server=NS(push_control_result=lambda rid, data: pushed.update(
        {rid: data})))  # fmt: skip
    rust_server.push_control_output(NS(rid="rid-1"), state_output)
    out["rust_internal_state"] = pushed["rid-1"].decode("latin-1")  # msgpack bytes, the strings as they are

    async def get_internal_state():
        return [state_output.internal_state]

    manager = NS(server_args=args, startup_time=0.0, get_internal_state=get_internal_state, scheduler_info={},
                 mm_processor=None)  # fmt: skip
    http = compiled(
        "srt/entrypoints/http_server.py",
        "get_server_info",
        "server_info",
        namespace={
            **real,
            "logger": logging.getLogger("http"),
            "_global_state": NS(tokenizer_manager=manager, scheduler_info={}),
        },
    )
    out["http_server_info"] = text(asyncio.run(http["get_server_info"]()))
    engine = compiled("srt/entrypoints/engine.py", "Engine.get_server_info", namespace=dict(real))
    loop = asyncio.new_event_loop()
    out["engine_server_info"] = text(engine["get_server_info"](NS(
        loop=loop, tokenizer_manager=manager, _scheduler_init_result=NS(scheduler_infos=[{}]))))  # fmt: skip
    bridge = compiled(
        "srt/entrypoints/grpc_bridge.py",
        "RuntimeHandle.get_server_info",
        namespace={**real, "_media_input_features": lambda mm_processor: []},
    )  # no multimodal processor here
    out["grpc_bridge_server_info"] = bridge["get_server_info"](NS(tokenizer_manager=manager, scheduler_info={}))
    rust_config = compiled("srt/rust_server/config.py", "_launch_server_info", namespace=dict(real))
    out["rust_launch_server_info"] = rust_config["_launch_server_info"](NS(
        server_args=args, max_total_num_tokens=8, max_req_input_len=8))  # fmt: skip
    out["follower_grpc_server_info"] = follower_grpc_info(common, args)

    out.update(write_dumps(
        args, ("TokenizerManager._server_args_for_dump", "TokenizerManager._dump_config_snapshot",
               "TokenizerManager.resolved_config_dict"), {
            **real, "_MANAGER_OWNED_FIELDS": ("model_path", "served_model_name"),
            "get_exec": lambda: NS(features=NS(enable_watermark=False)),  # the default
            "envs": NS(SGLANG_PYSPY_DUMP_BEFORE_CRASH=NS(get=lambda: False),
                       SGLANG_CUDA_COREDUMP_BEFORE_CRASH=NS(get=lambda: False)),
            "convert_time_to_realtime": lambda t: t},
        model_path="m", served_model_name="m"))  # fmt: skip
    out["shm"] = shared_memory_mode("srt/managers/multi_tokenizer_mixin.py", args)
    return out


class InternalStateOutput:
    """GetInternalStateReqOutput (io_struct cannot be imported here): a msgspec struct with its one field."""

    def __new__(cls, internal_state):
        import msgspec

        class GetInternalStateReqOutput(msgspec.Struct):
            internal_state: dict

        return GetInternalStateReqOutput(internal_state=internal_state)


def follower_grpc_info(common, args) -> str:
    """What start_follower_grpc_server hands the Rust gRPC extension (which is not installed here)."""
    import sglang.srt.rust_extensions as extensions

    given = {}
    common.get_serving = lambda: NS(grpc_port=1, smg_grpc_mode=False, grpc_mode=False, host="127.0.0.1")
    extensions.load_rust_extension = lambda name: NS(start_metadata_server=lambda **kw: given.update(kw))
    common.start_follower_grpc_server(args, {})
    return given["server_info_json"]


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    result = probes_0_5_23() if NEW_LAYOUT else probes_0_5_9()
    result["log"] = LOG.getvalue()
    print(json.dumps(result))
