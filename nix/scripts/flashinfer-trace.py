#!/usr/bin/env python3
"""Which FlashInfer modules SGLang's EAGLE-3 path loads: SGLang's own code, run on the CPU for a simulated GPU.

    flashinfer-trace.py REQUEST.json      (run by sglang_eagle3_audits/flashinfer_calls.py, one GPU and one draft each)

The stack's SGLang builds its server as it does on the GPU host: its own argument parser and resolution over the
settings the project renders, its own ModelConfig, memory pools, attention backends (ModelRunner's choice, the
worker class SpeculativeAlgorithm.create_worker picks and its draft backends), the Kimi-K2.5 language model and
the Llama EAGLE-3 draft. Each step then runs what the server runs in one forward mode (prefill with and without a
cached prefix, target verify, draft extend, draft decode, CUDA-graph capture and replay, sampling): the backends'
metadata calls and the models' own forward passes. FlashInfer runs its own Python (wrappers, plans, its module
generators); only a compiled module is not loaded: each one FlashInfer asks for is recorded (its name, the
generator and arguments that made it) and stands in as a module whose functions record their calls.

What is simulated, and why (this machine has no GPU):
- the GPU's answers: compute capability, properties (shared memory, SMs), memory, CUDA streams and events, for the
  GPU the request names; SGLang's capability predicates and FlashInfer's device queries answer for it;
- tensors asked for on 'cuda' are made on the CPU (a torch function mode); pinned host memory is plain;
- SGLang's kernel package (sgl_kernel) cannot load without a GPU: its names import, and a call to one ends the
  step with its name recorded (that path uses SGLang's kernel, not FlashInfer);
- SGLang's modules are imported as this machine imports them (their own kernels take their CPU paths; 0.5.23's
  fused ops run their torch references, SGLANG_FORCE_FUSED_OP_BACKEND=torch); the sampler, which picks its
  kernels at import, is imported again for the simulated GPU; SGLang's Triton index kernels run in Triton's
  interpreter.
Prints one JSON object on its last line. Exit status: 0 traced (a step's failure is data, reported), 2 bad input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import tempfile
import traceback
import types

if len(sys.argv) != 2 or not os.path.isfile(sys.argv[1]):
    sys.exit("usage: flashinfer-trace.py REQUEST.json (sglang_eagle3_audits/flashinfer_calls.py writes it)")
REQUEST = json.loads(open(sys.argv[1]).read())
CAP = tuple(REQUEST["capability"])
GPU = REQUEST["gpu"]
os.environ.update(CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1", SGLANG_USE_CPU_ENGINE="1")
# Everything the trace writes (FlashInfer's workspace, the models' configs, the rendezvous) goes in one directory of
# its own, removed when the trace ends (weakref.finalize at exit).
SCRATCH = tempfile.TemporaryDirectory(prefix="flashinfer-trace-")
os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", os.path.join(SCRATCH.name, "workspace"))
os.environ.update(REQUEST.get("environment", {}))


# -- SGLang's kernel package -----------------------------------------------------------------------------------
class KernelPackageCall(Exception):
    """A traced path reached a kernel of SGLang's own kernel package (not FlashInfer's): the step ends there."""


class _KernelName:
    """A name of the kernel package: its attributes are more names; calling one raises KernelPackageCall."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _KernelName(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise KernelPackageCall(self._name)


class KernelPackage(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sgl_kernel (SGLang's CUDA kernels; sglang-kernel in 0.5.23) loads CUDA libraries at import."""

    def find_spec(self, name, path=None, target=None):
        if name == "sgl_kernel" or name.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def __getattr__(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _KernelName(f"{spec.name}.{attr}")

        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, KernelPackage())

import torch  # noqa: E402  (after the environment above: CUDA_VISIBLE_DEVICES, the kernel package)
from torch.overrides import TorchFunctionMode  # noqa: E402


# -- the simulated GPU -----------------------------------------------------------------------------------------
def _cpu(device):
    return "cpu" if device is not None and "cuda" in str(device) else device


class CudaOnCpu(TorchFunctionMode):
    """Tensors SGLang and FlashInfer ask for on 'cuda' are made on the CPU; pinned host memory is plain memory."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if func in (torch.Tensor.cuda, torch.Tensor.pin_memory):
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
        return func(*args, **kwargs)


class _Stream:
    """A CUDA stream or event: ordering is trivial on one CPU thread."""

    cuda_stream = 0

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, attr):
        return lambda *args, **kwargs: None


class _CudaGenerator:
    """A CUDA generator's state: (seed, offset), 16 bytes, which FlashInfer's samplers read and advance."""

    def __init__(self):
        self._state = torch.tensor([0, 0], dtype=torch.int64).view(torch.uint8)

    def get_state(self):
        return self._state.clone()

    def set_state(self, state):
        self._state = state.clone()


class _Generators:
    """torch.cuda.default_generators, whatever device index is asked (a CPU device has none)."""

    def __init__(self):
        self._generator = _CudaGenerator()

    def __getitem__(self, index):
        return self._generator


def simulate_cuda_runtime():
    cuda = torch.cuda
    cuda.get_device_capability = lambda device=None: CAP
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.synchronize = cuda.empty_cache = cuda.init = lambda *args, **kwargs: None
    cuda.Stream = cuda.Event = _Stream
    cuda.current_stream = lambda device=None: _Stream()
    cuda.stream = cuda.device = lambda *args, **kwargs: contextlib.nullcontext()
    cuda.default_generators = _Generators()


def interpreter_on_numpy2():
    """Triton 3.5's interpreter turns a loaded scalar into an index with int() of a one-element array, which NumPy
    2 refuses; the same conversion through .item() is what it means (SGLang's KV index kernels loop on one)."""
    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor):
        patch(tensor)
        tensor.__index__ = lambda self: int(self.handle.data.reshape(-1)[0].item())

    interpreter._patch_lang_tensor = _patch_lang_tensor


simulate_cuda_runtime()
interpreter_on_numpy2()

SWITCHES: list[tuple] = []  # (holder, attribute, this machine's answer, the simulated GPU's)


def rebind(original, replacement, prefixes=("flashinfer", "sglang")):
    """Answer with `replacement` wherever a loaded module holds `original` (names bound by import included)."""
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(prefixes):
            for attr, value in list(vars(module).items()):
                if value is original:
                    SWITCHES.append((module, attr, original, replacement))


def simulated_gpu(on: bool):
    """Switch every rebound answer between this machine's and the simulated GPU's."""
    for holder, attr, machine, simulated in SWITCHES:
        setattr(holder, attr, simulated if on else machine)


def simulate_device_queries():
    """FlashInfer's and SGLang's questions about the GPU, answered for the one the request names."""
    import flashinfer.utils as flashinfer_utils
    import sglang.srt.utils.common as common

    props = types.SimpleNamespace(
        major=CAP[0],
        minor=CAP[1],
        name=GPU["name"],
        total_memory=GPU["memory_mib"] << 20,
        **{
            k: GPU[k]
            for k in ("multi_processor_count", "shared_memory_per_multiprocessor", "shared_memory_per_block_optin")
        },
    )
    for name, answer in (
        ("get_compute_capability", lambda device=None: CAP),
        ("get_device_properties", lambda device=None: props),
    ):
        if hasattr(flashinfer_utils, name):
            rebind(getattr(flashinfer_utils, name), answer)
    torch.cuda.get_device_properties = lambda device=None: props
    SWITCHES.append((torch.cuda, "is_available", torch.cuda.is_available, lambda: True))
    # SGLang's capability predicates: lru_cache(partial(_check_cuda_device_version, majors, cuda_version)).
    cuda = tuple(int(x) for x in REQUEST["cuda"].split("."))
    for value in list(vars(common).values()):
        check = getattr(value, "__wrapped__", None)
        if isinstance(check, functools.partial) and check.func is getattr(common, "_check_cuda_device_version", None):
            answer = CAP[0] in check.keywords["device_capability_majors"] and cuda >= tuple(
                check.keywords["cuda_version"]
            )
            rebind(value, lambda *args, _answer=answer, **kwargs: _answer)
    rebind(common.is_cuda, lambda: True)
    rebind(common.is_cpu, lambda: False)
    rebind(common.get_nvgpu_memory_capacity, lambda: float(GPU["memory_mib"]))


# -- the recorder ----------------------------------------------------------------------------------------------
STEP = {"name": "start", "draft": None}  # the step running, and the draft geometry of a draft step
EVENTS: list[dict] = []
SPECS: dict[str, dict] = {}


def caller():
    """Where SGLang called into FlashInfer: its source line (under srt/), and the outermost FlashInfer function."""
    api, frame = None, sys._getframe(2)
    while frame is not None:
        module, path = frame.f_globals.get("__name__", ""), frame.f_code.co_filename
        if module.startswith("sglang.srt."):
            return {"api": api, "site": path[path.index("/srt/") + 1 :] + f":{frame.f_lineno}"}
        if module.startswith("flashinfer") and module != "flashinfer.api_logging":  # not its logging decorators
            owner = frame.f_locals.get("self")
            api = (
                f"{type(owner).__name__}.{frame.f_code.co_name}"
                if owner is not None and not isinstance(owner, RecordedModule)
                else f"{module}.{frame.f_code.co_qualname}"
            )
        frame = frame.f_back
    return {"api": api, "site": None}


class RecordedModule:
    """A FlashInfer module as loaded: each function called is recorded, nothing runs."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, function):
        if function.startswith("__"):
            raise AttributeError(function)

        def call(*args, **kwargs):
            EVENTS.append(
                {"step": STEP["name"], "draft": STEP["draft"], "module": self._name, "function": function, **caller()}
            )
            # A plan is kept only to be handed back to the module's run functions: zeros stand for it.
            if "staged_workspace_bytes" in function:
                return [0] * 16, 0
            return [0] * 16 if function.startswith("plan") else None

        return call


def describe(value):
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return {"unresolved": type(value).__name__}


def generator_of(frames):
    """The FlashInfer generator (the outermost gen_* frame) that made a module spec, with its arguments."""
    found = None
    for info in frames:
        if info.function.lstrip("_").startswith("gen_") and info.frame.f_globals.get("__name__", "").startswith(
            "flashinfer"
        ):
            found = info
        elif found is not None:
            break
    if found is None:
        return {"generator": None}
    spec = inspect.getargvalues(found.frame)
    args = [spec.locals[a] for a in spec.args] + list(spec.locals[spec.varargs] if spec.varargs else ())
    kwargs = dict(spec.locals[spec.keywords]) if spec.keywords else {}
    return {
        "generator": f"{found.frame.f_globals['__name__']}:{found.function}",
        "args": describe(args),
        **({"kwargs": {k: describe(v) for k, v in kwargs.items()}} if kwargs else {}),
    }


def install_recorder():
    """FlashInfer's JitSpec: record each spec made (and by which generator) and each one loaded."""
    from flashinfer.jit import core

    classes = [core.JitSpec, *core.JitSpec.__subclasses__()]
    for cls in classes:
        if "__init__" in cls.__dict__:

            def __init__(self, *args, _init=cls.__init__, **kwargs):
                _init(self, *args, **kwargs)
                if getattr(self, "name", None) and self.name not in SPECS:
                    SPECS[self.name] = {"class": type(self).__name__, **generator_of(inspect.stack()[1:])}

            cls.__init__ = __init__

    def build_and_load(self):
        EVENTS.append({"step": STEP["name"], "draft": STEP["draft"], "module": self.name, "function": None, **caller()})
        return RecordedModule(self.name)

    for cls in classes:
        if cls is core.JitSpec or "build_and_load" in cls.__dict__:
            cls.build_and_load = build_and_load


# -- SGLang, built as the server builds it ---------------------------------------------------------------------
def write_config(config: dict) -> str:
    path = tempfile.mkdtemp(prefix="model-", dir=SCRATCH.name)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def server_args_for(argv):
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def init_parallel(server_args, hidden_size):
    """One rank of gloo groups, made as each release's scheduler makes them."""
    method = f"file://{tempfile.mkdtemp(dir=SCRATCH.name)}/rendezvous"
    try:  # 0.5.23: the launcher publishes the rank; the bootstrap makes the groups as ModelRunner's does
        from sglang.srt.distributed import bootstrap
        from sglang.srt.runtime_context import SpawnRanks, publish
    except ImportError:
        bootstrap = None
    if bootstrap is not None:
        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=0))
        bootstrap._init_parallel_groups(backend="gloo", dist_init_method=method, server_args=server_args, gpu_id=0)
        return
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(server_args)
    init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=method)
    initialize_model_parallel(1)
    initialize_dp_attention(server_args, types.SimpleNamespace(hidden_size=hidden_size, dtype=torch.bfloat16))


def runner_for(server_args, model_config, pools, is_draft):
    """A real ModelRunner whose __init__ (weights, memory profiling, CUDA graphs) is not run: the fields it sets
    that the attention backends read are set as it sets them; its methods and properties are its own."""
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = ModelRunner.__new__(ModelRunner)
    vars(runner).update(
        server_args=server_args,
        model_config=model_config,
        device="cuda",
        gpu_id=0,
        tp_size=1,
        tp_rank=0,
        dtype=model_config.dtype,
        kv_cache_dtype=model_config.dtype,
        page_size=server_args.page_size,
        sliding_window_size=None,
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        init_new_workspace=False,
        is_draft_worker=is_draft,
        draft_model_idx=0,
        spec_algorithm=SpeculativeAlgorithm.from_string(server_args.speculative_algorithm),
        **pools,
    )
    return runner


def init_attention_backend(runner):
    """The runner's own attention backend, chosen by the release's own code."""
    try:  # 0.5.23
        from sglang.srt.model_executor.model_runner import resolve_draft_attention_backend
        from sglang.srt.model_executor.model_runner_components import attention_backend_setup as setup
    except ImportError:
        from sglang.srt.server_args import get_global_server_args

        # ModelRunner.__init__ sets the global flag from each runner in turn, the draft's last (model_runner.py:381).
        get_global_server_args().use_mla_backend = runner.use_mla_backend
        runner.init_attention_backend()
        return
    runner.draft_attention_backend = resolve_draft_attention_backend(
        draft_attention_backend=None, is_draft_worker=runner.is_draft_worker
    )
    runner.init_kv_index_translator()
    resolved = setup.resolve_attention_backend_strs(model_runner=runner)
    runner.prefill_attention_backend_str, runner.decode_attention_backend_str = resolved.prefill, resolved.decode
    runner.attn_backend = setup.get_attention_backend(model_runner=runner)


def init_draft_backends(worker):
    """The draft backends (multi-step decode, draft extend) of the worker class SGLang picks for these settings
    (SpeculativeAlgorithm.create_worker: 0.5.9 EAGLEWorker; 0.5.23 EAGLEWorkerV2, whose EagleDraftWorker owns them)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    cls = SpeculativeAlgorithm.from_string(worker.server_args.speculative_algorithm).create_worker(worker.server_args)
    worker.worker_class = f"{cls.__module__}.{cls.__name__}"
    if cls.__name__.endswith("V2"):
        from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker as cls
    if hasattr(cls, "_configure_qsa_mtp_index_share"):
        worker._configure_qsa_mtp_index_share = types.MethodType(cls._configure_qsa_mtp_index_share, worker)
    cls.init_attention_backend(worker)


class Server:
    """The pieces of one SGLang server the EAGLE-3 path runs through: pools, runners, backends, worker."""

    def __init__(self, server_args, target_config, draft_config):
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, ReqToTokenPool

        size, bf16 = REQUEST["kv_tokens"], torch.bfloat16
        self.server_args = server_args
        self.req_pool = ReqToTokenPool(size=8, max_context_len=size, device="cuda", enable_memory_saver=False)
        target_kv = MLATokenToKVPool(
            size,
            page_size=1,
            dtype=bf16,
            kv_lora_rank=target_config.kv_lora_rank,
            qk_rope_head_dim=target_config.qk_rope_head_dim,
            layer_num=1,
            device="cuda",
            enable_memory_saver=False,
        )
        draft_kv = MHATokenToKVPool(
            size,
            page_size=1,
            dtype=bf16,
            head_num=draft_config.get_num_kv_heads(1),
            head_dim=draft_config.head_dim,
            layer_num=1,
            device="cuda",
            enable_memory_saver=False,
        )
        allocator = TokenToKVPoolAllocator(size, bf16, "cuda", target_kv, need_sort=False)
        shared = dict(req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=allocator)
        self.target = runner_for(server_args, target_config, dict(token_to_kv_pool=target_kv, **shared), False)
        self.draft = runner_for(server_args, draft_config, dict(token_to_kv_pool=draft_kv, **shared), True)
        for runner, step in ((self.target, "target.init"), (self.draft, "draft.init")):
            STEP["name"] = step
            init_attention_backend(runner)
        self.worker = types.SimpleNamespace(
            server_args=server_args,
            draft_model_runner=self.draft,
            draft_runner=self.draft,
            topk=server_args.speculative_eagle_topk,
            speculative_num_steps=server_args.speculative_num_steps,
            seed_dsa_topk_from_draft_extend=False,
        )
        init_draft_backends(self.worker)


# Imported as this machine imports them (no GPU): SGLang's own kernels (norms, rotary, MLP) take their CPU
# paths; only FlashInfer's modules are the question. Modules a release lacks are skipped.
PREIMPORT = (
    "sglang.srt.layers.attention.flashinfer_backend",
    "sglang.srt.layers.attention.flashinfer_mla_backend",
    "sglang.srt.layers.attention.attention_registry",
    "sglang.srt.layers.sampler",
    "sglang.srt.distributed.parallel_state",
    "sglang.srt.models.deepseek_v2",
    "sglang.srt.models.llama_eagle3",
    "sglang.srt.speculative.eagle_info",
    "sglang.srt.speculative.draft_utils",
    "sglang.srt.speculative.eagle_worker",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.spec_utils",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.mem_cache.allocator",
    "sglang.srt.configs.model_config",
)


# -- the EAGLE-3 path, step by step ----------------------------------------------------------------------------
STEPS: list[tuple[str, str, object]] = []  # (name, what it is, function)


def step(name):
    def register(fn):
        STEPS.append((name, inspect.getdoc(fn) or "", fn))
        return fn

    return register


def mode(name):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return getattr(ForwardMode, name)


def is_extend(forward_mode):
    """An extend of new tokens over the cache (0.5.23 counts its DRAFT_EXTEND_V2 only when asked)."""
    try:
        return forward_mode.is_extend(include_draft_extend_v2=True)
    except TypeError:
        return forward_mode.is_extend()


def in_forward(backend):
    """0.5.23 runs each forward inside a ForwardContext naming the attention backend (its pools come from it)."""
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        return contextlib.nullcontext()
    return forward_context(ForwardContext(attn_backend=backend))


class Flow:
    """Requests placed in the pools as the scheduler places them; forward batches made as the workers make them."""

    def __init__(self, server, target_model, draft_model):
        self.server, self.target_model, self.draft_model = server, target_model, draft_model
        self.next_slot = 1  # KV slot 0 is the allocator's padding slot
        args = server.server_args
        self.topk, self.steps, self.draft_tokens = (
            args.speculative_eagle_topk,
            args.speculative_num_steps,
            args.speculative_num_draft_tokens,
        )

    def place(self, seq_lens):
        """Requests 0..bs-1 hold `seq_lens` tokens each, in fresh KV slots."""
        rows = self.server.req_pool.req_to_token
        for i, n in enumerate(seq_lens):
            rows[i, :n] = torch.arange(self.next_slot, self.next_slot + n, dtype=torch.int32)
            self.next_slot += n
        return torch.arange(len(seq_lens), dtype=torch.int64, device="cuda")

    def batch(self, forward_mode, runner, prefix, extend, backend=None, spec_info=None):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch

        seq = [p + e for p, e in zip(prefix, extend, strict=True)]
        rows = self.server.req_pool.req_to_token
        pool = self.place(seq)
        out = torch.cat([rows[i, p:s] for i, (p, s) in enumerate(zip(prefix, seq, strict=True))]).to(torch.int64)

        def tensor(values, dtype=torch.int32):
            return torch.tensor(values, dtype=dtype, device="cuda")

        fields = dict(
            forward_mode=forward_mode,
            batch_size=len(seq),
            input_ids=torch.zeros(len(out), dtype=torch.int64),
            req_pool_indices=pool,
            seq_lens=tensor(seq),
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int32),
            seq_lens_sum=sum(seq),
            out_cache_loc=out,
            positions=torch.cat([torch.arange(p, s) for p, s in zip(prefix, seq, strict=True)]).to(torch.int64),
            req_to_token_pool=self.server.req_pool,
            token_to_kv_pool=runner.token_to_kv_pool,
            attn_backend=backend or runner.attn_backend,
            spec_algorithm=runner.spec_algorithm,
            spec_info=spec_info,
            capture_hidden_mode=spec_info.capture_hidden_mode if spec_info is not None else CaptureHiddenMode.NULL,
            return_logprob=False,
        )
        if is_extend(forward_mode):
            fields.update(
                extend_num_tokens=len(out),
                extend_seq_lens=tensor(extend),
                extend_prefix_lens=tensor(prefix),
                extend_start_loc=tensor([sum(extend[:i]) for i in range(len(seq))]),
                extend_prefix_lens_cpu=list(prefix),
                extend_seq_lens_cpu=list(extend),
                extend_logprob_start_lens_cpu=list(extend),
            )
        declared = {f.name for f in dataclasses.fields(ForwardBatch)}
        batch = ForwardBatch(**{k: v for k, v in fields.items() if k in declared})
        for k, v in fields.items():  # what a release's ForwardBatch no longer declares is set as init_new sets it
            if k not in declared:
                setattr(batch, k, v)
        translator = getattr(runner, "kv_index_translator", None)
        if translator is not None and hasattr(translator, "bind_own_plan"):
            translator.bind_own_plan(batch)  # 0.5.23: production batches take their KV ids from a plan
        return batch

    def metadata(self, batch, backend=None):
        backend = backend or batch.attn_backend
        with in_forward(backend):
            backend.init_forward_metadata(batch)

    def target_forward(self, batch):
        with in_forward(batch.attn_backend):
            return self.target_model.model(batch.input_ids, batch.positions, batch)

    def draft_forward(self, batch):
        with in_forward(batch.attn_backend):
            return self.draft_model.model(batch.input_ids, batch.positions, batch)

    def target_hidden(self, tokens):
        """What the target hands the EAGLE-3 draft per token: its three captured layers' hidden states."""
        config = self.draft_model.config
        return torch.zeros(tokens, getattr(config, "target_hidden_size", config.hidden_size) * 3)

    def verify_input(self, prefix):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleVerifyInput

        bs, n = len(prefix), self.draft_tokens
        # A chain (topk 1): each draft token sees the ones before it. 0.5.9 spells the fields retrive_*.
        tree = dict(
            index=torch.arange(bs * n).view(bs, n),
            next_token=torch.full((bs, n), -1),
            next_sibling=torch.full((bs, n), -1),
            cum_len=None,
        )
        spelling = (
            "retrive_" if "retrive_index" in {f.name for f in dataclasses.fields(EagleVerifyInput)} else ("retrieve_")
        )
        return EagleVerifyInput(
            draft_token=torch.zeros(bs * n, dtype=torch.int64),
            custom_mask=torch.ones(sum(p * n + n * n for p in prefix), dtype=torch.bool),
            positions=torch.cat([torch.arange(p, p + n) for p in prefix]).to(torch.int64),
            **{spelling + k: v for k, v in tree.items()},
            spec_steps=self.steps,
            topk=self.topk,
            draft_token_num=n,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            seq_lens_sum=sum(prefix),
            seq_lens_cpu=torch.tensor(prefix),
        )

    def draft_input(self, bs, accept=None):
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        fields = dict(
            topk_p=torch.ones(bs, self.topk, dtype=torch.float32),
            topk_index=torch.zeros(bs, self.topk, dtype=torch.int64),
            hidden_states=torch.zeros(bs, self.draft_model.config.hidden_size),
            capture_hidden_mode=CaptureHiddenMode.LAST,
        )
        if accept is not None:
            fields.update(
                accept_length=torch.tensor(accept, dtype=torch.int32),
                accept_length_cpu=list(accept),
                verified_id=torch.zeros(sum(accept), dtype=torch.int64),
                hidden_states=self.target_hidden(sum(accept)),
                capture_hidden_mode=CaptureHiddenMode.FULL,
            )
        return EagleDraftInput(**fields)

    def extend_input(self, tokens, accept):
        """The draft's input for an extend (0.5.9 EagleDraftInput, 0.5.23 EagleDraftExtendInput)."""
        from sglang.srt.speculative import eagle_info

        if not hasattr(eagle_info, "EagleDraftExtendInput"):
            spec = self.draft_input(2)
            spec.hidden_states = self.target_hidden(tokens)
            return spec
        per_req = tokens // 2
        accept = accept or [per_req, per_req]
        return eagle_info.EagleDraftExtendInput(
            hidden_states=self.target_hidden(tokens),
            num_accept_tokens=torch.tensor(accept, dtype=torch.int32),
            num_correct_drafts=torch.tensor([a - 1 for a in accept], dtype=torch.int32),
            num_accept_tokens_cpu=list(accept),
            num_tokens_per_req=per_req,
            num_tokens_for_logprob_per_req=per_req,
        )


def graph_capture_and_replay(backend, batch, forward, legacy_capture, legacy_replay, replay_step):
    """What a CUDA-graph runner does with a backend: capture once, replay once. 0.5.23: out_graph(in_capture=True)
    before the capture, in_graph and the forward inside it, out_graph again before each replay. 0.5.9: the
    backend's init_forward_metadata_capture_cuda_graph, then _replay_cuda_graph."""
    with in_forward(backend):
        if hasattr(backend, "init_forward_metadata_out_graph"):
            backend.init_forward_metadata_out_graph(batch, in_capture=True)
            backend.init_forward_metadata_in_graph(batch)
            forward(batch)
            STEP["name"] = replay_step
            backend.init_forward_metadata_out_graph(batch)
            return
        legacy_capture()
        forward(batch)
        STEP["name"] = replay_step
        legacy_replay()


@step("target.prefill")
def _(flow):
    """The target's prefill of new prompts (EXTEND, no cached prefix)."""
    batch = flow.batch(mode("EXTEND"), flow.server.target, prefix=[0, 0], extend=[5, 7])
    flow.metadata(batch)
    flow.target_forward(batch)


@step("target.prefill.cached_prefix")
def _(flow):
    """A prefill whose prompts start with a prefix already in the radix cache, shorter than the MHA threshold."""
    batch = flow.batch(mode("EXTEND"), flow.server.target, prefix=[3, 4], extend=[2, 3])
    flow.metadata(batch)
    flow.target_forward(batch)


@step("target.prefill.long_cached_prefix")
def _(flow):
    """A cached prefix of SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD tokens: MLA's chunked-prefix (MHA) path."""
    from sglang.srt.environ import envs

    threshold = envs.SGLANG_CHUNKED_PREFIX_CACHE_THRESHOLD.get()
    batch = flow.batch(mode("EXTEND"), flow.server.target, prefix=[threshold], extend=[4])
    flow.metadata(batch)
    flow.target_forward(batch)
    return {"prefix_tokens": threshold}


@step("target.verify")
def _(flow):
    """The target verifies the draft tokens (TARGET_VERIFY)."""
    spec = flow.verify_input([6, 9])
    batch = flow.batch(
        mode("TARGET_VERIFY"), flow.server.target, prefix=[6, 9], extend=[flow.draft_tokens] * 2, spec_info=spec
    )
    flow.metadata(batch)
    flow.target_forward(batch)


@step("target.verify.cuda_graph")
def _(flow):
    """The target's CUDA-graph runner (capture mode TARGET_VERIFY): its state, one capture, one replay."""
    backend, bs, n = flow.server.target.attn_backend, 2, flow.draft_tokens
    backend.init_cuda_graph_state(bs, bs * n)
    spec = flow.verify_input([6, 9])
    batch = flow.batch(mode("TARGET_VERIFY"), flow.server.target, prefix=[6, 9], extend=[n] * 2, spec_info=spec)
    graph_capture_and_replay(
        backend,
        batch,
        flow.target_forward,
        lambda: backend.init_forward_metadata_capture_cuda_graph(
            bs, bs * n, batch.req_pool_indices, batch.seq_lens, None, batch.forward_mode, spec
        ),
        lambda: backend.init_forward_metadata_replay_cuda_graph(
            bs,
            batch.req_pool_indices,
            batch.seq_lens,
            int(batch.seq_lens.sum()),
            None,
            batch.forward_mode,
            spec,
            batch.seq_lens_cpu,
        ),
        "target.verify.cuda_graph_replay",
    )


@step("target.sample")
def _(flow):
    """The target samples a token for requests with top-k and top-p (Sampler.forward's _sample_from_probs when the
    batch is not all greedy): the first token after a prefill."""
    from sglang.srt.layers import sampler
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    # The sampler picks its kernels at import (0.5.9 `if is_cuda(): from sgl_kernel import ...`, 0.5.23
    # flashinfer.sampling through LazyImport): imported again, for the simulated GPU, as the server imports it.
    sampler = importlib.reload(sampler)
    bs, vocab = 2, flow.target_model.config.vocab_size
    values = dict(
        temperatures=torch.full((bs, 1), 0.7),
        top_ps=torch.full((bs,), 0.9),
        top_ks=torch.full((bs,), 50, dtype=torch.int32),
        min_ps=torch.zeros(bs),
        is_all_greedy=False,
        is_any_greedy=False,
        need_top_p_sampling=True,
        need_top_k_sampling=True,
        need_min_p_sampling=False,
        vocab_size=vocab,
    )
    fields = dataclasses.fields(SamplingBatchInfo)
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    info = SamplingBatchInfo(
        **{name: values.get(name) for name in required},
        **{f.name: values[f.name] for f in fields if f.name in values and f.name not in required},
    )
    probs = torch.softmax(torch.randn(bs, vocab, dtype=torch.float32), dim=-1)
    sampler.Sampler()._sample_from_probs(probs, info, torch.tensor([5, 7]), False)


@step("draft.extend")
def _(flow):
    """The draft's pass over new prompts after the target's prefill (EXTEND, the draft runner's backend)."""
    batch = flow.batch(
        mode("EXTEND"), flow.server.draft, prefix=[0, 0], extend=[5, 7], spec_info=flow.extend_input(12, accept=None)
    )
    flow.metadata(batch)
    flow.draft_forward(batch)


@step("draft.extend.cached_prefix")
def _(flow):
    """The draft's pass over prompts with a prefix in the radix cache: ragged and paged attention, states merged."""
    batch = flow.batch(
        mode("EXTEND"), flow.server.draft, prefix=[3, 4], extend=[2, 3], spec_info=flow.extend_input(5, accept=None)
    )
    flow.metadata(batch)
    flow.draft_forward(batch)


def draft_decode_batch(flow):
    return flow.batch(
        mode("DECODE"),
        flow.server.draft,
        prefix=[6, 9],
        extend=[1, 1],
        backend=flow.server.worker.draft_attn_backend,
        spec_info=flow.draft_input(2),
    )


def draft_decode_forwards(flow, batch):
    """The worker's draft_forward: one forward per draft step after the first, each with its step's backend."""
    multi = flow.server.worker.draft_attn_backend
    for i in range(flow.steps - 1):
        batch.attn_backend = multi.attn_backends[i]
        batch.spec_info.hidden_states = torch.zeros(batch.batch_size * flow.topk, flow.draft_model.config.hidden_size)
        flow.draft_forward(batch)


@step("draft.decode")
def _(flow):
    """The draft's decode steps (its multi-step backend; tensor cores when the draft's GQA group is 4 or more)."""
    batch = draft_decode_batch(flow)
    flow.metadata(batch, flow.server.worker.draft_attn_backend)
    draft_decode_forwards(flow, batch)
    return {"tensor_cores": flow.server.worker.draft_attn_backend.attn_backends[0].decode_use_tensor_cores}


@step("draft.decode.cuda_graph")
def _(flow):
    """The draft decode's CUDA-graph runner: its state, one capture, one replay."""
    multi, bs = flow.server.worker.draft_attn_backend, 2
    multi.init_cuda_graph_state(bs, bs * flow.topk)
    batch = draft_decode_batch(flow)
    graph_capture_and_replay(
        multi,
        batch,
        lambda b: draft_decode_forwards(flow, b),
        lambda: multi.init_forward_metadata_capture_cuda_graph(batch),
        lambda: multi.init_forward_metadata_replay_cuda_graph(batch, bs),
        "draft.decode.cuda_graph_replay",
    )


def draft_extend_batch(flow):
    """After a verification: 0.5.9 (EAGLEWorker) extends over each request's accepted tokens, DRAFT_EXTEND;
    0.5.23 (EAGLEWorkerV2) over the whole verify window, DRAFT_EXTEND_V2."""
    prefix = [6, 9]
    if flow.server.worker.worker_class.endswith("V2"):
        n = flow.draft_tokens
        return flow.batch(
            mode("DRAFT_EXTEND_V2"),
            flow.server.draft,
            prefix=prefix,
            extend=[n] * 2,
            backend=flow.server.draft.attn_backend,
            spec_info=flow.extend_input(2 * n, accept=[2, 3]),
        )
    return flow.batch(
        mode("DRAFT_EXTEND"),
        flow.server.draft,
        prefix=prefix,
        extend=[2, 3],
        backend=flow.server.worker.draft_extend_attn_backend,
        spec_info=flow.draft_input(2, accept=[2, 3]),
    )


@step("draft.draft_extend")
def _(flow):
    """The draft extends over the verified tokens after a verification."""
    batch = draft_extend_batch(flow)
    flow.metadata(batch)
    flow.draft_forward(batch)


@step("draft.draft_extend.cuda_graph")
def _(flow):
    """The draft extend's CUDA-graph runner: its state, one capture, one replay."""
    backend, bs = flow.server.worker.draft_extend_attn_backend, 2
    backend.init_cuda_graph_state(bs, bs * flow.draft_tokens)
    batch = draft_extend_batch(flow)
    graph_capture_and_replay(
        backend,
        batch,
        flow.draft_forward,
        lambda: backend.init_forward_metadata_capture_cuda_graph(
            bs,
            int(batch.extend_num_tokens),
            batch.req_pool_indices,
            batch.seq_lens,
            None,
            batch.forward_mode,
            batch.spec_info,
        ),
        lambda: backend.init_forward_metadata_replay_cuda_graph(
            bs,
            batch.req_pool_indices,
            batch.seq_lens,
            int(batch.seq_lens.sum()),
            None,
            batch.forward_mode,
            batch.spec_info,
            batch.seq_lens_cpu,
        ),
        "draft.draft_extend.cuda_graph_replay",
    )


def run_steps(flow, model, draft=None):
    """The steps of `model` ("target" or "draft"), with `draft`, the draft geometry's name, on the events."""
    results = {}
    for name, what, fn in STEPS:
        if not name.startswith(model + "."):
            continue
        STEP.update(name=name, draft=draft)
        try:
            with torch.inference_mode():  # as the model runner runs its forward passes
                results[name] = {"ok": True, **(fn(flow) or {})}
        except KernelPackageCall as call:  # SGLang's own kernel, not FlashInfer's: the path ends there
            results[name] = {"ok": True, "kernel_package": str(call)}
        except Exception as err:  # a failing step is data (SGLang's own error), reported, never hidden
            results[name] = {
                "ok": False,
                "error": f"{type(err).__name__}: {err}",
                "where": [line for line in traceback.format_exc().splitlines() if "File" in line][-4:],
            }
        results[name]["what"] = what
    return results


def main():
    import sglang.srt.utils as sglang_utils
    import sglang.srt.utils.common as common

    for module in (sglang_utils, common):  # the backends import FlashInfer's names only where it is available
        module.is_flashinfer_available = lambda: True
    torch.set_default_dtype(torch.bfloat16)
    with CudaOnCpu():
        import flashinfer

        for name in PREIMPORT:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.models.deepseek_v2 import DeepseekV3ForCausalLM
        from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

        install_recorder()
        simulate_device_queries()
        simulated_gpu(True)
        target_dir = write_config(REQUEST["target_config"])
        drafts = {name: write_config(config) for name, config in REQUEST["drafts"].items()}
        first = next(iter(drafts.values()))
        argv = [a.replace("{target}", target_dir).replace("{draft}", first) for a in REQUEST["argv"]]
        STEP["name"] = "server"
        server_args = server_args_for(argv)
        init_parallel(server_args, REQUEST["target_config"]["text_config"]["hidden_size"])
        target_config = ModelConfig.from_server_args(server_args)
        # The models are built as this machine builds them (their own kernels take CPU paths); the attention
        # backends and every forward pass see the simulated GPU. Kimi-K2.5's language model is built alone
        # (KimiK25ForConditionalGeneration.language_model): its vision tower attends with the multimodal backend.
        target_model = build_model(DeepseekV3ForCausalLM, target_config.hf_config.text_config)
        steps, servers = {"target": None, "drafts": {}}, {}
        for name, draft_dir in drafts.items():  # one server a draft geometry; the target's steps need only one
            draft_config = ModelConfig.from_server_args(server_args, model_path=draft_dir, is_draft_model=True)
            server = servers[name] = Server(server_args, target_config, draft_config)
            flow = Flow(server, target_model, build_model(LlamaForCausalLMEagle3, draft_config.hf_config))
            if steps["target"] is None:
                steps["target"] = run_steps(flow, "target")
            steps["drafts"][name] = run_steps(flow, "draft", name)
    server = next(iter(servers.values()))
    backends = {
        "target": server.target.attn_backend,
        "draft": server.draft.attn_backend,
        "draft_decode": server.worker.draft_attn_backend,
        "draft_extend": server.worker.draft_extend_attn_backend,
    }
    print(
        json.dumps(
            {
                "flashinfer": flashinfer.__version__,
                "capability": list(CAP),
                "worker": server.worker.worker_class,
                "backends": {k: type(v).__name__ for k, v in backends.items()},
                "steps": steps,
                "events": EVENTS,
                "specs": SPECS,
            }
        )
    )


def build_model(cls, config):
    """A model as this machine builds it, then what the loader runs after the weights (MLA's w_kc, w_vc)."""
    simulated_gpu(False)
    with torch.inference_mode():
        model = cls(config)
        if hasattr(model, "post_load_weights"):
            model.post_load_weights()
    simulated_gpu(True)
    return model


if __name__ == "__main__":
    main()
