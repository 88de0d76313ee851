#!/usr/bin/env python3
"""All-reduce across the GPUs of one host with the stack's run-time environment: NCCL through
torch.distributed, and FlashInfer's custom all-reduce paths where the installed FlashInfer has them.

One process a GPU, started by torchrun or by the script itself:
  torchrun --nproc-per-node 8 nix/scripts/allreduce-check.py --json allreduce.json
  python3 nix/scripts/allreduce-check.py --nproc 8 --json allreduce.json

Parts (--parts, comma-separated):
  nccl      bf16 all-reduce through torch.distributed, sizes 4 KiB to 256 MiB (--min-bytes, --max-bytes):
            each rank adds a known pattern whose sum is exact in bf16, the sum is compared element by
            element; then time per size, algorithm bandwidth (bytes / time) and bus bandwidth (nccl-tests:
            algbw x 2(n-1)/n). Also the NCCL baseline at decode sizes: the all-reduce alone, and followed
            by the residual add and RMSNorm in torch (unfused).
  fusion    FlashInfer's TRT-LLM all-reduce + residual + RMSNorm (kARResidualRMSNorm) as SGLang calls it
            (FlashInfer 0.6: trtllm_create_ipc_workspace_for_all_reduce_fusion + trtllm_allreduce_fusion,
            as SGLang 0.5.9; 0.7: create_allreduce_fusion_workspace(backend="trtllm") + allreduce_fusion,
            as SGLang 0.5.23), against torch.distributed in fp32 within bf16 tolerance, and its latency
            against NCCL at decode sizes
  pcie_ipc  FlashInfer 0.7's PCIe-IPC all-reduce (PcieIpcAllReduceWorkspace, gen_pcie_ipc_comm_module, as
            SGLang 0.5.23's SGLANG_ENABLE_PCIE_IPC_ALLREDUCE): exact sums, torch.distributed within bf16
            tolerance, latency against NCCL at decode sizes
Decode sizes: hidden 7168 (Kimi-K2.5), batch 1 to 64 tokens (--hidden, --batches); latency eager and,
on GPUs, replayed from a CUDA graph (as SGLang decodes).

NVLink multicast stays off in every rank before anything loads: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 (the lent machines' rule: a program that
uses it can put the host's shared GPUs out of service), and FlashInfer's multicast setup is refused.
The wrapper's variables (nix/runtime-env.json "environment") are set where unset, from this host, as
the wrapper's --set-default does; the JSON says which and from where.

A path the installed FlashInfer lacks, or that this world size or device cannot run, is recorded as
skipped with the reason. Prints a plain table; --json writes every figure. Exit status: 0 when every
check that ran passed, 1 when one failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
PARTS = ("nccl", "fusion", "pcie_ipc")
RUNTIME_ENV = Path(__file__).resolve().parents[1] / "runtime-env.json"
MAX_RANKS = 12  # the exact bf16 pattern's limit (pattern_period)
BF16_STEP = 2.0**-8  # bf16 keeps 8 significant bits: round-to-nearest moves a value by at most 2^-8 of it
RMS_EPS = 1e-6


# ---------------------------------------------------------------- arguments


def parse_size(text: str) -> int:
    """'4K', '256M', '4096' -> bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes, or a number with K, M or G (4K, 256M)")
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2).upper()]


def parse_batches(text: str) -> list[int]:
    try:
        batches = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give token counts separated by commas, e.g. 1,2,4,8") from None
    if not batches or min(batches) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least one token count, each 1 or more")
    return batches


def size_ladder(lo: int, hi: int) -> list[int]:
    """The message sizes in bytes, doubling from lo to hi; both powers of two, as nccl-tests steps them."""
    for name, value in (("--min-bytes", lo), ("--max-bytes", hi)):
        if value < 2 or value & (value - 1):
            raise ValueError(f"{name} {value}: must be a power of two of at least 2 bytes (one bf16 element)")
    if lo > hi:
        raise ValueError(f"--min-bytes {lo} is larger than --max-bytes {hi}")
    sizes = [lo]
    while sizes[-1] < hi:
        sizes.append(sizes[-1] * 2)
    return sizes


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}")
    p.add_argument("--nproc", type=int, default=None, help="start this many ranks here (without torchrun)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl with GPUs, else gloo")
    p.add_argument("--min-bytes", type=parse_size, default=4 << 10, help="smallest message (default 4K)")
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20, help="largest message (default 256M)")
    p.add_argument("--iters", type=int, default=50, help="timed all-reduces per size (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces before each timing (default 5)")
    p.add_argument("--hidden", type=int, default=7168, help="decode hidden size (default 7168, Kimi-K2.5)")
    p.add_argument("--batches", type=parse_batches, default=[1, 2, 4, 8, 16, 32, 64], help="decode token counts")
    p.add_argument("--no-graphs", action="store_true", help="time decode sizes eagerly only")
    p.add_argument("--cuda-home", default=os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    p.add_argument("--runtime-env", default=str(RUNTIME_ENV), help="the wrapper's variables (nix/runtime-env.json)")
    p.add_argument("--kind", default=None, help="the machine's name for the record (e.g. nvidia-h200-x8)")
    p.add_argument(
        "--timeout", type=int, default=120, help="seconds a collective may wait before failing (default 120)"
    )
    p.add_argument("--json", dest="json_out", default=None, help="write the figures here")
    args = p.parse_args(argv)
    args.parts = [s for s in args.parts.split(",") if s]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s): {', '.join(unknown)} (known: {', '.join(PARTS)})")
    try:
        args.sizes = size_ladder(args.min_bytes, args.max_bytes)
    except ValueError as err:
        p.error(str(err))
    if args.nproc is not None and args.nproc < 1:
        p.error(f"--nproc {args.nproc}: give 1 or more ranks")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be 1 or more and --warmup 0 or more")
    if args.hidden < 8 or args.hidden % 8:
        p.error(f"--hidden {args.hidden}: must be a positive multiple of 8 (16-byte bf16 packs)")
    if args.nproc is not None and args.nproc > MAX_RANKS:
        p.error(f"--nproc {args.nproc}: the exact bf16 sums allow at most {MAX_RANKS} ranks")
    if args.timeout < 1:
        p.error(f"--timeout {args.timeout}: give 1 second or more")
    try:
        args.runtime_spec = runtime_spec(Path(args.runtime_env))
    except ValueError as err:
        p.error(f"--runtime-env {args.runtime_env}: {err}")
    if args.json_out:
        parent = Path(args.json_out).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            p.error(
                f"--json {args.json_out}: {parent} is not a directory this user can write; create it or choose another"
            )
    return args


def runtime_spec(path: Path) -> dict:
    """nix/runtime-env.json's "environment", each value a kind this script resolves here (ValueError: why not)."""
    try:
        spec = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError("no such file (nix/runtime-env.json of this repository)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not readable JSON ({err})") from None
    environment = spec.get("environment") if isinstance(spec, dict) else None
    if not isinstance(environment, dict):
        raise ValueError('has no "environment" object (nix/runtime-env.json of this repository has)')
    for name, entry in environment.items():
        kind = entry.get("value") if isinstance(entry, dict) else None
        if kind not in HOST_VALUE_KINDS and not is_literal(kind):
            raise ValueError(
                f"{name}: value {kind!r} has no host equivalent here (known: {', '.join(HOST_VALUE_KINDS)})"
            )
    return spec


# ---------------------------------------------------------------- figures


def bus_factor(n: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor: each rank sends and receives 2(n-1)/n of the message."""
    return 2 * (n - 1) / n


def bandwidths(nbytes: int, seconds: float, n: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in GB/s (10^9 bytes, as nccl-tests prints them)."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(n)


def pattern_period(n: int) -> int:
    """Rank r contributes (r+1) * (1 + i % period) at element i: integers whose every partial sum stays at
    most 256, exact in bf16 whatever the order of the additions. Odd, so a chunk moved by a power of two shows."""
    total = n * (n + 1) // 2
    for period in (7, 5, 3):
        if period * total <= 256:
            return period
    raise ValueError(f"{n} ranks: the exact bf16 pattern needs (n(n+1)/2) x 3 <= 256, i.e. at most 12 ranks")


def fill_pattern(t, rank: int, period: int):
    import torch

    index = torch.arange(t.numel(), device=t.device, dtype=torch.int32)
    t.copy_(((index % period + 1) * (rank + 1)).to(t.dtype).view_as(t))
    return t


def check_sum(got, n: int, period: int) -> dict:
    """Compare an all-reduced pattern with its exact sum; on a mismatch, the first wrong element."""
    import torch

    index = torch.arange(got.numel(), device=got.device, dtype=torch.int32)
    want = ((index % period + 1) * (n * (n + 1) // 2)).to(got.dtype)
    wrong = (got.reshape(-1) != want).nonzero()
    result = {"ok": wrong.numel() == 0, "mismatches": int(wrong.numel())}
    if wrong.numel():
        i = int(wrong[0])
        result.update(first_wrong=i, got=float(got.reshape(-1)[i]), want=float(want[i]))
    return result


def within(got, ref, bound) -> dict:
    """Elementwise |got - ref| <= bound (all fp32): the worst element and how far it is against its bound."""
    err = (got.float() - ref).abs()
    ratio = err / bound.clamp_min(1e-30)
    worst = int(ratio.argmax())
    return {
        "ok": bool((err <= bound).all()),
        "max_abs_err": float(err.max()),
        "worst_err_over_bound": round(float(ratio.reshape(-1)[worst]), 4),
        "bad": int((err > bound).sum()),
    }


def sum_bound(abs_sum, n: int):
    """How far a bf16 sum of n terms may be from the exact one: each of the n - 1 partial sums and the final
    value rounded once, each by at most 2^-8 of a partial, which is at most the sum of the terms' magnitudes."""
    return (n + 1) * BF16_STEP * abs_sum


def rmsnorm(r, gamma):
    return r * (r.pow(2).mean(-1, keepdim=True) + RMS_EPS).rsqrt() * gamma


def norm_bound(ref):
    """RMSNorm of the same residual in bf16 against fp32: two rounding steps of each value, two of the mean
    magnitude for values near zero."""
    return 2 * 2 * BF16_STEP * (ref.abs() + ref.abs().mean())


# ---------------------------------------------------------------- FlashInfer, read from its files


def flashinfer_offers(root: Path) -> dict:
    """What the FlashInfer package at root offers for all-reduce, read from its files (flashinfer.comm itself
    cannot be imported without CUDA): its version, the comm APIs it exports, the rank counts each kernel takes."""
    meta = (root / "_build_meta.py").read_text() if (root / "_build_meta.py").is_file() else ""
    version = re.search(r'__version__\s*=\s*"([^"]+)"', meta)
    init = root / "comm" / "__init__.py"
    exported = init.read_text() if init.is_file() else ""
    header = root / "data" / "include" / "flashinfer" / "comm" / "trtllm_allreduce_fusion.cuh"
    ranks = re.search(r"Supported ranks: ([\d, ]+)", header.read_text()) if header.is_file() else None
    pcie_ranks = None
    pcie = root / "comm" / "pcie_ipc_ar.py"
    if pcie.is_file():
        for node in ast.parse(pcie.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", "") == "_SUPPORTED_WORLD_SIZES" for t in node.targets
            ):
                pcie_ranks = list(ast.literal_eval(node.value))
    return {
        "version": version.group(1) if version else None,
        "path": str(root),
        "fusion_legacy_api": "trtllm_create_ipc_workspace_for_all_reduce_fusion" in exported,
        "fusion_unified_api": "create_allreduce_fusion_workspace" in exported,
        "fusion_ranks": [int(x) for x in ranks.group(1).replace(" ", "").split(",") if x] if ranks else None,
        "fusion_ranks_from": str(header.relative_to(root)) if ranks else None,
        "pcie_ipc": "PcieIpcAllReduceWorkspace" in exported,
        "pcie_ipc_ranks": pcie_ranks,
    }


def fusion_api(offers: dict) -> str | None:
    """The API SGLang uses with this FlashInfer: 0.5.9 (FlashInfer 0.6) the legacy one, 0.5.23 (0.7) the unified."""
    major_minor = tuple(int(x) for x in re.findall(r"\d+", offers["version"] or "0.0")[:2])
    if major_minor < (0, 7) and offers["fusion_legacy_api"]:
        return "legacy"
    return "unified" if offers["fusion_unified_api"] else ("legacy" if offers["fusion_legacy_api"] else None)


def skip_reason(part: str, offers: dict | None, n: int, device: str) -> str | None:
    """Why a FlashInfer path cannot run here, or None: the path missing from this FlashInfer first, then a world
    size its kernel refuses, then no GPU. Refusals FlashInfer itself makes cheaply (the PCIe-IPC workspace's
    world-size check, before any build) are left to it, so its own message is recorded."""
    if offers is None:
        return "FlashInfer is not installed here (no flashinfer package on sys.path)"
    version = offers["version"]
    if part == "fusion":
        if fusion_api(offers) is None:
            return f"FlashInfer {version} exports no TRT-LLM all-reduce fusion"
        if offers["fusion_ranks"] is not None and n not in offers["fusion_ranks"]:
            return (
                f"world size {n}: the fused kernel dispatches on {offers['fusion_ranks']} ranks only "
                f"({offers['fusion_ranks_from']}; building its module takes minutes, so it is not built to be "
                "refused); SGLang calls no fusion below 2 ranks"
            )
    if part == "pcie_ipc" and not offers["pcie_ipc"]:
        return f"FlashInfer {version} has no PcieIpcAllReduceWorkspace (gen_pcie_ipc_comm_module: FlashInfer 0.7)"
    if device != "cuda":
        return "needs CUDA GPUs (this run is on CPU)"
    return None


# ---------------------------------------------------------------- the run-time environment


def gpu_runtime_check():
    """nix/scripts/gpu-runtime-check.py, beside this script: where the driver is searched for is written once."""
    spec = importlib.util.spec_from_file_location("gpu_runtime_check", Path(__file__).with_name("gpu-runtime-check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOST_VALUE_KINDS = ("cuda:toolkit", "cuda:stubs", "cc", "cxx", "driver:rpath", "capabilities:torch")


def is_literal(value) -> bool:
    """A value nix/runtime-env.nix sets as it is (FLASHINFER_NO_DOWNLOAD's "1"): a string that names no kind and
    no provider (a provider reads `<source>:<what>`)."""
    return isinstance(value, str) and value not in HOST_VALUE_KINDS and ":" not in value


def wrapper_environment(spec: dict, cuda_home: str, environ) -> list[dict]:
    """Set nix/runtime-env.json's variables where unset (makeWrapper --set-default), from this host: the values
    runtime-env.nix gives them are Nix store paths, so each provider is looked up here. Returns the record."""
    driver = gpu_runtime_check()
    libcuda = driver.find_libcuda(None)
    toolkit = cuda_home if Path(cuda_home, "bin", "nvcc").exists() else None
    cc, cxx = shutil.which("cc") or shutil.which("gcc"), shutil.which("c++") or shutil.which("g++")
    host = {  # value kind -> (this host's value, where it came from, or why there is none)
        "cuda:toolkit": (toolkit, f"the CUDA toolkit at {cuda_home}", f"no bin/nvcc under {cuda_home}"),
        "cuda:stubs": (libcuda, "the driver's directory", f"no libcuda.so.1 in {', '.join(driver.LIBCUDA_DIRS)}"),
        "cc": (cc, "cc on PATH", "no cc or gcc on PATH"),
        "cxx": (cxx, "c++ on PATH", "no c++ or g++ on PATH"),
        "driver:rpath": (libcuda and f"-Xlinker -rpath={libcuda}", "the driver's directory", "no driver found"),
        "capabilities:torch": (None, "", "only when capabilities are chosen (lib.mkStack { cudaCapabilities })"),
    }
    record = []
    for name, entry in spec["environment"].items():
        if is_literal(entry["value"]):
            host[entry["value"]] = (entry["value"], "nix/runtime-env.json, as it is", "")
        if entry["value"] not in host:
            raise ValueError(f"{name}: value {entry['value']!r} of nix/runtime-env.json has no host equivalent here")
        value, source, none = host[entry["value"]]
        if name in environ:
            record.append({"name": name, "value": environ[name], "how": "already set"})
        elif value is None:
            record.append({"name": name, "value": None, "how": f"left unset: {none}"})
        else:
            environ[name] = value
            record.append({"name": name, "value": value, "how": f"set from {source}"})
    return record


def nccl_library() -> dict:
    """The libnccl this process mapped, and whose it is: nixpkgs' build or the NVIDIA wheel torch depends on."""
    maps = {line.split()[-1] for line in open("/proc/self/maps") if "libnccl" in line and "/" in line}
    path = sorted(maps)[0] if maps else None
    wheels = {}
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            wheels[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    if path is None:
        source = "no libnccl mapped (linked into torch, or not loaded)"
    elif "/nix/store/" in path:
        source = "nixpkgs' nccl" if "-nccl-" in path else "a Nix store path"
    elif re.search(r"/site-packages/nvidia/", path):
        source = f"the NVIDIA wheel ({', '.join(f'{k} {v}' for k, v in wheels.items()) or 'nvidia-nccl'})"
    else:
        source = "other"
    return {"library": path, "source": source, "wheels": wheels}


def host_facts(n: int) -> dict:
    facts = {"gpus": [], "driver": None, "topology": None}
    smi = shutil.which("nvidia-smi")
    if smi:
        q = ["--query-gpu=index,name,driver_version,memory.total,compute_cap", "--format=csv,noheader"]
        rows = subprocess.run([smi, *q], capture_output=True, text=True).stdout.strip().splitlines()
        facts["gpus"] = [r.strip() for r in rows]
        facts["driver"] = rows[0].split(",")[2].strip() if rows else None
        topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True).stdout
        facts["topology"] = re.sub(r"\x1b\[[0-9;]*m", "", topo).rstrip()  # its header carries ANSI escapes
    return facts


# ---------------------------------------------------------------- ranks and timing


class Ranks:
    """This process's place in the group, and the collectives the harness itself needs."""

    def __init__(self, backend: str, timeout: int):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.device = "cuda" if backend == "nccl" else "cpu"
        if self.device == "cuda":
            local, count = int(os.environ.get("LOCAL_RANK", self.rank)), torch.cuda.device_count()
            if local >= count:
                print(f"allreduce-check: rank {self.rank} wants GPU {local}, but this host shows {count}: start "
                      f"at most {count} ranks a host (--nproc-per-node / --nproc)", file=sys.stderr)  # fmt: skip
                sys.exit(2)
            torch.cuda.set_device(local)
        device_id = torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else None
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout), device_id=device_id)

    def all_true(self, ok: bool) -> bool:
        flag = self.torch.tensor([1 if ok else 0], device=self.device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item())

    def slowest(self, seconds: float) -> float:
        value = self.torch.tensor([seconds], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(value, op=self.dist.ReduceOp.MAX)
        return float(value.item())

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def time_eager(self, fn, iters: int, warmup: int) -> float:
        """Seconds per call on the slowest rank, the calls issued back to back."""
        for _ in range(warmup):
            fn()
        self.sync()
        self.dist.barrier()
        if self.device == "cuda":
            start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            took = start.elapsed_time(end) / 1e3
        else:
            t = time.perf_counter()
            for _ in range(iters):
                fn()
            took = time.perf_counter() - t
        return self.slowest(took / iters)

    def time_graph(self, fn, iters: int) -> float:
        """Seconds per call replayed from one CUDA graph of `iters` calls, as SGLang's decode replays them."""
        torch = self.torch
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with torch.cuda.graph(graph):
                for _ in range(iters):
                    fn()
        if any("Graph is empty" in str(w.message) for w in said):  # NCCL launches nothing at world size 1
            raise RuntimeError("the captured graph is empty: the call launched no kernel, so there is nothing to time")
        graph.replay()
        torch.cuda.synchronize()
        self.dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return self.slowest(start.elapsed_time(end) / 1e3 / iters)


def timings(ranks: Ranks, fn, args, prefix: str = "") -> dict:
    """Eager and, on GPUs, graph-replayed microseconds per call; a capture that fails is recorded."""
    out = {f"{prefix}us": round(ranks.time_eager(fn, args.iters, args.warmup) * 1e6, 2)}
    if ranks.device == "cuda" and not args.no_graphs:
        try:
            out[f"{prefix}graph_us"] = round(ranks.time_graph(fn, args.iters) * 1e6, 2)
        except Exception as err:  # noqa: BLE001 - recorded, the eager figure stands
            out[f"{prefix}graph_error"] = f"{type(err).__name__}: {str(err)[:300]}"
    return out


# ---------------------------------------------------------------- the parts


def run_nccl(ranks: Ranks, args) -> dict:
    torch, dist, n = ranks.torch, ranks.dist, ranks.n
    period = pattern_period(n)
    rows = []
    for nbytes in args.sizes:
        buf = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=ranks.device)
        dist.all_reduce(fill_pattern(buf, ranks.rank, period))
        check = check_sum(buf, n, period)
        correct = ranks.all_true(check["ok"])
        buf.zero_()  # timed on zeros: the sums stay finite whatever the count
        seconds = ranks.time_eager(lambda b=buf: dist.all_reduce(b), args.iters, args.warmup)
        algbw, busbw = bandwidths(nbytes, seconds, n)
        row = {"bytes": nbytes, "correct": correct, "us": round(seconds * 1e6, 2),
               "algbw_gbps": round(algbw, 2), "busbw_gbps": round(busbw, 2)}  # fmt: skip
        if not correct:  # every rank's own account of what was wrong
            row["checks"] = [None] * n
            dist.all_gather_object(row["checks"], check)
        rows.append(row)
        del buf
    # The check itself, shown able to fail: one element of a right sum changed must be found.
    buf = torch.empty(args.sizes[0] // 2, dtype=torch.bfloat16, device=ranks.device)
    dist.all_reduce(fill_pattern(buf, ranks.rank, period))
    buf[buf.numel() // 3] += 1
    control = check_sum(buf, n, period)
    caught = ranks.all_true(not control["ok"] and control.get("first_wrong") == buf.numel() // 3)
    failed = [r["bytes"] for r in rows if not r["correct"]]
    return {
        "status": "failed" if failed or not caught else "passed",
        "pattern": f"rank r adds (r+1) x (1 + i % {period}); the sum is exact in bf16",
        "bus_factor": round(bus_factor(n), 4),
        "sizes": rows,
        "wrong_sizes": failed,
        "negative_control": {"changed_element": buf.numel() // 3, "caught": caught, "check": control},
    }


def decode_inputs(ranks: Ranks, batch: int, hidden: int, seed: int):
    """Each rank's share and the shared residual and gamma, as a decode step has them, and the fp32 truth:
    the exact sum over ranks (torch.distributed in fp32) and the sum of the magnitudes, for the bound."""
    torch = ranks.torch
    gen = torch.Generator(device=ranks.device)
    gen.manual_seed(seed * 1000 + ranks.rank)
    x = torch.randn(batch, hidden, generator=gen, device=ranks.device).to(torch.bfloat16)
    gen.manual_seed(seed)  # the same residual and gamma on every rank, as the model has them
    residual = torch.randn(batch, hidden, generator=gen, device=ranks.device).to(torch.bfloat16)
    gamma = (1 + 0.1 * torch.randn(hidden, generator=gen, device=ranks.device)).to(torch.bfloat16)
    exact, magnitude = x.float(), x.float().abs()
    ranks.dist.all_reduce(exact)
    ranks.dist.all_reduce(magnitude)
    return x, residual, gamma, exact, magnitude


def run_decode_nccl(ranks: Ranks, args) -> dict:
    """The NCCL baseline at decode sizes: the all-reduce alone, then with the residual add and RMSNorm."""
    torch, dist = ranks.torch, ranks.dist
    rows = []
    for batch in args.batches:
        x, residual, gamma, exact, magnitude = decode_inputs(ranks, batch, args.hidden, seed=batch)
        out = x.clone()
        dist.all_reduce(out)
        check = within(out, exact, sum_bound(magnitude, ranks.n))
        buf = torch.zeros_like(x)

        def add_norm(b=buf, r=residual, g=gamma):
            dist.all_reduce(b)
            s = b + r
            return (s.float() * (s.float().pow(2).mean(-1, keepdim=True) + RMS_EPS).rsqrt()).to(b.dtype) * g

        row = {"batch": batch, "bytes": x.numel() * 2, "within_bound": ranks.all_true(check["ok"]), **check}
        row.update(timings(ranks, lambda b=buf: dist.all_reduce(b), args))
        row.update(timings(ranks, add_norm, args, prefix="add_rmsnorm_"))
        rows.append(row)
    bad = [r["batch"] for r in rows if not r["within_bound"]]
    return {"status": "failed" if bad else "passed", "rows": rows, "outside_bound": bad}


def refuse_multicast(comm) -> None:
    """FlashInfer's symmetric memory sets up NVLink multicast when asked; the lent machines forbid it, so any
    attempt raises instead of calling cuMulticastCreate (the TRT-LLM fusion asks for none: enable_multicast=False)."""
    mnnvl = getattr(comm, "mnnvl", None)
    cls = getattr(mnnvl, "SymmDeviceMemory", None)
    if cls is not None and hasattr(cls, "_setup_multicast"):

        def refused(self, *a, **k):
            raise RuntimeError("NVLink multicast refused by allreduce-check.py (KINDS.md: keep it off)")

        cls._setup_multicast = refused


def run_fusion(ranks: Ranks, args, offers: dict, baseline: dict) -> dict:
    import flashinfer.comm as comm

    torch, dist, n, rank = ranks.torch, ranks.dist, ranks.n, ranks.rank
    refuse_multicast(comm)
    api, max_tokens = fusion_api(offers), max(args.batches)
    t = time.perf_counter()
    if api == "legacy":  # SGLang 0.5.9 (srt/layers/flashinfer_comm_fusion.py)
        handles, workspace = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
            rank, n, max_tokens, args.hidden, group=dist.group.WORLD
        )
    else:  # SGLang 0.5.23: backend "auto" resolves to "trtllm" on SM90 single-node
        workspace = comm.create_allreduce_fusion_workspace(
            backend="trtllm", world_size=n, rank=rank, max_token_num=max_tokens, hidden_dim=args.hidden,
            dtype=torch.bfloat16, gpus_per_node=n, group=dist.group.WORLD,
        )  # fmt: skip
    setup_s = ranks.slowest(time.perf_counter() - t)

    def fused(x, residual, gamma, residual_out, norm_out):
        pattern = comm.AllReduceFusionPattern.kARResidualRMSNorm
        if api == "legacy":
            comm.trtllm_allreduce_fusion(
                allreduce_in=x, world_size=n, world_rank=rank, token_num=x.shape[0], hidden_dim=x.shape[1],
                workspace_ptrs=workspace, launch_with_pdl=True, use_oneshot=None, trigger_completion_at_end=False,
                fp32_acc=False, pattern_code=pattern, allreduce_out=None, residual_in=residual,
                residual_out=residual_out, norm_out=norm_out, quant_out=None, scale_out=None, rms_gamma=gamma,
                rms_eps=RMS_EPS, scale_factor=None, layout_code=None,
            )  # fmt: skip
        else:
            comm.allreduce_fusion(
                input=x, workspace=workspace, pattern=pattern, launch_with_pdl=True, residual_out=residual_out,
                norm_out=norm_out, residual_in=residual, rms_gamma=gamma, rms_eps=RMS_EPS, use_oneshot=None,
                fp32_acc=False, trigger_completion_at_end=False,
            )  # fmt: skip

    rows = []
    try:
        for batch, nccl in zip(args.batches, baseline["rows"], strict=True):
            x, residual, gamma, exact, magnitude = decode_inputs(ranks, batch, args.hidden, seed=batch)
            residual_out, norm_out = torch.empty_like(residual), torch.empty_like(x)
            fused(x, residual, gamma, residual_out, norm_out)
            torch.cuda.synchronize()
            res = within(residual_out, exact + residual.float(), sum_bound(magnitude + residual.float().abs(), n))
            norm_ref = rmsnorm(residual_out.float(), gamma.float())
            norm = within(norm_out, norm_ref, norm_bound(norm_ref))
            row = {"batch": batch, "residual_out": res, "norm_out": norm,
                   "correct": ranks.all_true(res["ok"] and norm["ok"])}  # fmt: skip
            row.update(timings(ranks, lambda a=(x, residual, gamma, residual_out, norm_out): fused(*a), args))
            row["vs_nccl_add_rmsnorm"] = speedup(nccl, row, "add_rmsnorm_")
            rows.append(row)
    finally:
        if api == "legacy":
            comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(handles, group=dist.group.WORLD)
        else:
            workspace.destroy()
    bad = [r["batch"] for r in rows if not r["correct"]]
    return {"status": "failed" if bad else "passed", "api": api, "setup_s": round(setup_s, 1), "rows": rows,
            "wrong_batches": bad}  # fmt: skip


def speedup(nccl: dict, row: dict, prefix: str = "") -> dict:
    """NCCL's time over this path's, eager and graph: above 1, this path is faster."""
    out = {}
    for kind in ("us", "graph_us"):
        if f"{prefix}{kind}" in nccl and kind in row and row[kind] > 0:
            out[kind] = round(nccl[f"{prefix}{kind}"] / row[kind], 2)
    return out


def run_pcie_ipc(ranks: Ranks, args, offers: dict, baseline: dict) -> dict:
    import flashinfer.comm as comm

    torch, dist, n = ranks.torch, ranks.dist, ranks.n
    t = time.perf_counter()
    try:
        workspace = comm.PcieIpcAllReduceWorkspace(
            group=dist.group.WORLD, max_numel=max(args.batches) * args.hidden, dtype=torch.bfloat16
        )
    except Exception as err:  # noqa: BLE001 - FlashInfer's own refusal is the record
        if offers["pcie_ipc_ranks"] is not None and n not in offers["pcie_ipc_ranks"]:
            return {"status": "skipped", "reason": f"refused by FlashInfer at world size {n}: {err}"}
        raise
    setup_s = ranks.slowest(time.perf_counter() - t)
    period = pattern_period(n)
    rows = []
    try:
        for batch, nccl in zip(args.batches, baseline["rows"], strict=True):
            x, _, _, exact, magnitude = decode_inputs(ranks, batch, args.hidden, seed=batch)
            if not ranks.all_true(workspace.supports(x)):
                rows.append({"batch": batch, "status": "skipped", "reason": "workspace.supports() is False"})
                continue
            workspace.rebind_stream()  # one stream at a time, moved as SGLang moves it
            pattern = fill_pattern(torch.empty_like(x), ranks.rank, period)
            exact_check = check_sum(workspace.all_reduce(pattern), n, period)
            close = within(workspace.all_reduce(x), exact, sum_bound(magnitude, n))
            row = {"batch": batch, "exact_pattern": exact_check, "random": close,
                   "correct": ranks.all_true(exact_check["ok"] and close["ok"])}  # fmt: skip
            out = torch.empty_like(x)
            row.update(timings(ranks, lambda a=x, o=out: workspace.all_reduce(a, out=o), args))
            workspace.rebind_stream()
            row["vs_nccl"] = speedup(nccl, row)
            rows.append(row)
    finally:
        workspace.destroy()
    bad = [r["batch"] for r in rows if r.get("correct") is False]
    return {"status": "failed" if bad else "passed", "setup_s": round(setup_s, 1), "profile": workspace.profile,
            "profile_reason": workspace.profile_reason, "tuned": False, "rows": rows, "wrong_batches": bad}  # fmt: skip


# ---------------------------------------------------------------- a rank, and the report


def command_line() -> str:
    script = " ".join([sys.argv[0], *sys.argv[1:]])
    if "ALLREDUCE_CHECK_COMMAND" in os.environ:  # ranks this script started (--nproc)
        return os.environ["ALLREDUCE_CHECK_COMMAND"]
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return f"torchrun --nproc-per-node {os.environ.get('LOCAL_WORLD_SIZE', '?')} {script}"
    return f"{Path(sys.executable).name} {script}"


def rank_main(args) -> int:
    os.environ.update(MULTICAST_OFF)  # before torch, NCCL or FlashInfer load
    wrapper = wrapper_environment(args.runtime_spec, args.cuda_home, os.environ)
    began = time.perf_counter()
    import torch

    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    ranks = Ranks(backend, args.timeout)
    # Located, not imported: what it offers is read from its files; a path imports flashinfer.comm when it runs.
    spec = importlib.util.find_spec("flashinfer")
    offers = flashinfer_offers(Path(spec.origin).parent) if spec and spec.origin else None
    report = {
        "command": command_line(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "world_size": ranks.n,
        "backend": backend,
        "kind": args.kind,
        "sizes": {"min_bytes": args.sizes[0], "max_bytes": args.sizes[-1], "count": len(args.sizes)},
        "decode": {
            "hidden": args.hidden,
            "batches": args.batches,
            "graphs": ranks.device == "cuda" and not args.no_graphs,
        },
        "iters": args.iters,
        "warmup": args.warmup,
        "environment": {
            "multicast_off": MULTICAST_OFF,
            "wrapper": wrapper,
            "nccl_variables": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        },
        "software": {"python": sys.version.split()[0], "torch": torch.__version__, "flashinfer": offers},
    }
    results = {}
    try:
        results["nccl"] = run_nccl(ranks, args) if "nccl" in args.parts else None
        results["decode_nccl"] = run_decode_nccl(ranks, args)
    except Exception as err:  # noqa: BLE001 - recorded; the FlashInfer paths need this baseline
        results.setdefault("nccl", None)
        results["decode_nccl"] = {"status": "failed", "error": f"{type(err).__name__}: {str(err)[-1500:]}"}
    for part, runner in (("fusion", run_fusion), ("pcie_ipc", run_pcie_ipc)):
        if part not in args.parts:
            continue
        reason = skip_reason(part, offers, ranks.n, ranks.device)
        if reason is None and "rows" not in results["decode_nccl"]:
            reason = "the NCCL baseline at decode sizes failed"
        if reason:
            results[part] = {"status": "skipped", "reason": reason}
            continue
        try:
            results[part] = runner(ranks, args, offers, results["decode_nccl"])
        except Exception as err:  # noqa: BLE001 - a failure is a figure too
            results[part] = {"status": "failed", "error": f"{type(err).__name__}: {str(err)[-1500:]}"}
    nccl_version = None
    if backend == "nccl":
        nccl_version = ".".join(map(str, torch.cuda.nccl.version()))
        report["software"]["nccl"] = {"version": nccl_version, **nccl_library()}
    report.update({k: v for k, v in results.items() if v is not None})
    report["failures"] = [k for k, v in results.items() if v and v.get("status") == "failed"]
    report["seconds"] = round(time.perf_counter() - began, 1)
    if ranks.rank == 0:
        report["host"] = host_facts(ranks.n)
        if args.json_out:  # first: the figures stay written whatever the table makes of them
            Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")
        print_table(report)
    ranks.dist.barrier()
    ranks.dist.destroy_process_group()
    return 1 if report["failures"] else 0


def print_table(report: dict) -> None:
    nccl = report.get("software", {}).get("nccl") or {}
    print(f"world size {report['world_size']} ({report['backend']}), NCCL {nccl.get('version', '-')} "
          f"from {nccl.get('library') or '-'} [{nccl.get('source', '-')}]")  # fmt: skip
    if report.get("nccl"):
        print(f"\n{'bytes':>12} {'correct':>8} {'us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
        for r in report["nccl"]["sizes"]:
            print(f"{r['bytes']:>12} {str(r['correct']):>8} {r['us']:>10} {r['algbw_gbps']:>11} {r['busbw_gbps']:>11}")
        print(f"negative control caught: {report['nccl']['negative_control']['caught']}")
    decode = report.get("decode_nccl")
    if decode:
        print(f"\ndecode sizes, hidden {report['decode']['hidden']} (us per call; graph = replayed from a CUDA graph)")
        paths = {p: {r["batch"]: r for r in report[p].get("rows", [])} for p in ("fusion", "pcie_ipc") if p in report}
        print(f"{'batch':>6} {'nccl':>8} {'graph':>8} {'nccl+norm':>10} {'graph':>8} {'fusion':>8} {'graph':>8} "
              f"{'pcie_ipc':>9} {'graph':>8}")  # fmt: skip
        for r in decode.get("rows", []):  # none when the baseline failed (its error is printed below)
            f = paths.get("fusion", {}).get(r["batch"], {})
            p = paths.get("pcie_ipc", {}).get(r["batch"], {})
            cells = [r.get("us"), r.get("graph_us"), r.get("add_rmsnorm_us"), r.get("add_rmsnorm_graph_us"),
                     f.get("us"), f.get("graph_us"), p.get("us"), p.get("graph_us")]  # fmt: skip
            print(f"{r['batch']:>6} " + " ".join(f"{'-' if c is None else c:>8}" for c in cells))
    for part in ("nccl", "decode_nccl", "fusion", "pcie_ipc"):
        if part in report:
            entry = report[part]
            why = entry.get("reason") or entry.get("error") or ""
            print(f"{part}: {entry['status']}{': ' + why if why else ''}")
    print(f"{len(report['failures'])} failed: {', '.join(report['failures']) or '-'}")


def run_status(codes: list[int | None]) -> int:
    """The run's exit status from its ranks' (None: still running): the first failure's, 1 for a rank killed by
    a signal (a negative code), 0 when every rank passed."""
    failed = [code for code in codes if code]
    return (failed[0] if failed[0] > 0 else 1) if failed else 0


def spawn(args) -> int:
    """Start args.nproc ranks here, one process each, as torchrun would (env:// rendezvous on a free port).
    The first rank to fail stops the others: they would wait for it in a collective until --timeout."""
    if (args.backend or "nccl") == "nccl":
        import torch

        count = torch.cuda.device_count()
        if count and args.nproc > count:
            print(f"allreduce-check: --nproc {args.nproc}, but this host shows {count} GPU(s): one rank a GPU, "
                  f"give --nproc {count} or less", file=sys.stderr)  # fmt: skip
            return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a for a in sys.argv[1:] if not a.startswith("--nproc=")]
    if "--nproc" in argv:
        i = argv.index("--nproc")
        del argv[i : i + 2]
    procs = []
    for rank in range(args.nproc):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": str(args.nproc), "LOCAL_WORLD_SIZE": str(args.nproc),
               "ALLREDUCE_CHECK_COMMAND": command_line()}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, __file__, *argv], env=env))
    while any(p.poll() is None for p in procs) and not run_status([p.poll() for p in procs]):
        time.sleep(0.2)
    status = run_status([p.poll() for p in procs])
    if status:
        stopped = [rank for rank, p in enumerate(procs) if p.poll() is None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        print(f"allreduce-check: a rank failed (exit {status}); stopped the ranks still running: {stopped or '-'}",
              file=sys.stderr)  # fmt: skip
    return status


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.nproc is not None and "RANK" not in os.environ:
        return spawn(args)
    if int(os.environ.get("WORLD_SIZE", "1")) > MAX_RANKS:  # torchrun's
        print(f"allreduce-check: world size {os.environ['WORLD_SIZE']}: the exact bf16 sums allow at most "
              f"{MAX_RANKS} ranks", file=sys.stderr)  # fmt: skip
        return 2
    if "RANK" not in os.environ:  # one rank, no launcher
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    return rank_main(args)


if __name__ == "__main__":
    sys.exit(main())
