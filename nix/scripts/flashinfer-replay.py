#!/usr/bin/env python3
"""Run each traced FlashInfer call of SGLang's EAGLE-3 path on the GPU, from prebuilt modules only, against float32.

    flashinfer-replay.py --stack 0.5.9 [--calls FILE] [--capability 9.0] [--steps a,b] [--json OUT] [--list]
                         [--allow-jit] [--timeout S]

The steps, and the modules each step loads, are the stack's trace (nix/stacks/sglang-<stack>/flashinfer-calls.json,
made on the CPU by python -m sglang_eagle3_audits --only flashinfer-calls): every step that makes a FlashInfer call on
the GPU's capability is replayed, once a draft geometry (mha: one KV head a query head, decode without tensor cores;
gqa: a group of 8, decode on tensor cores), each in a fresh process. A replay makes the calls SGLang's backends make in
that step (flashinfer_backend.py, flashinfer_mla_backend.py, sampler.py): the same wrappers and backends (ragged
prefill `auto`, paged prefill and decode `fa2`, MLA `auto`), the same plan arguments, the MLA cache read through the
`[:, :, :512]` / `[:, :, 512:]` views of one 576-wide buffer, page size 1 with scattered slots, and for the CUDA-graph
steps a capture, a new plan into the captured buffers and a replay. Each output is compared with the same attention
computed in float32 by torch; a step's log-sum-exp too, where SGLang asks for it.

A step passes when its outputs match and the process mapped exactly the modules the trace names for it, each from
FlashInfer's AOT directory. By default a child runs as the prebuilt server would with JIT off:
FLASHINFER_DISABLE_JIT=1, CUDA_HOME=/nonexistent/cuda and PATH=/nonexistent (nothing to compile with), so a
module that was not built fails the step with FlashInfer's own error (--allow-jit keeps the caller's environment).
The SGLang-only shortcuts (its fast_decode_plan and fast_mla_decode_plan, which call a module's plan directly)
are replayed through the wrapper's plan, which calls the same function of the same module.

--list prints the steps, geometries and expected modules and runs nothing (no GPU needed).
Exit status: 0 every step passed, 1 a step failed, loaded other modules or has no replay, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

NIX = Path(__file__).resolve().parents[1]
HEADS = 8  # one rank of tp_size 8: Kimi-K2.5's 64 heads, the draft's 64 query heads
KV_HEADS = {"mha": 8, "gqa": 1}  # the trace's drafts: 64 or 8 KV heads over 8 ranks
TOLERANCE = 2e-2  # bf16 inputs and outputs against a float32 reference


class BadInput(Exception):
    """A message for the user; exit status 2."""


# ---------------------------------------------------------------- the plan (no torch)


def run_label(label: str) -> tuple[str, str]:
    """'9.0/gqa replay' -> ('9.0', 'gqa'); '9.0' -> ('9.0', 'target')."""
    cap, _, geometry = label.split()[0].partition("/")
    return cap, geometry or "target"


def plan(trace: dict, capability: str, only: list[str] | None) -> list[dict]:
    """One entry a step and geometry the trace ran on this capability with a FlashInfer call in it."""
    runs: dict[tuple[str, str], dict] = {}
    for step, data in sorted(trace["steps"].items()):
        for call, labels in data["calls"].items():
            module, function, api, line = call.split(" | ")
            for label in labels:
                cap, geometry = run_label(label)
                if cap != capability:
                    continue
                entry = runs.setdefault((step, geometry), {"step": step, "geometry": geometry, "modules": set(),
                                                           "apis": set(), "sglang": set()})  # fmt: skip
                entry["modules"].add(module)
                entry["apis"].add(api)
                entry["sglang"].add(line)
    entries = [dict(e, modules=sorted(e["modules"]), apis=sorted(e["apis"]), sglang=sorted(e["sglang"]))
               for e in runs.values()]  # fmt: skip
    if only:
        unknown = sorted(set(only) - {e["step"] for e in entries})
        if unknown:
            raise BadInput(f"--steps: {', '.join(unknown)} made no FlashInfer call on {capability} in the trace; "
                           f"the traced steps: {', '.join(sorted({e['step'] for e in entries}))}")  # fmt: skip
        entries = [e for e in entries if e["step"] in only]
    return entries


# ---------------------------------------------------------------- the replays (in the child, on the GPU)


def replay(step: str, geometry: str, apis: list[str]) -> list[dict]:
    """Make the step's calls; return one check a compared output."""
    import flashinfer
    import flashinfer.cascade
    import flashinfer.sampling
    import torch

    dev, bf16 = "cuda", torch.bfloat16
    torch.manual_seed(0)
    ws = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
    checks: list[dict] = []

    def i32(values):
        return torch.tensor(values, dtype=torch.int32, device=dev)

    def indptr(lengths):
        out = [0]
        for n in lengths:
            out.append(out[-1] + n)
        return i32(out)

    def check(name, got, want, lse=None, want_lse=None):
        err = (got.float() - want).abs().max().item()
        bound = TOLERANCE + TOLERANCE * want.abs().max().item()
        entry = {"check": name, "max_abs_err": round(err, 5), "ok": err <= bound}
        if lse is not None:
            # FlashInfer's log-sum-exp is base 2; SGLang merges with it as given.
            lerr = (lse.float() - want_lse / torch.log(torch.tensor(2.0))).abs().max().item()
            entry.update(lse_max_abs_err=round(lerr, 5), ok=entry["ok"] and lerr <= 1e-1)
        checks.append(entry)

    def reference(q, k, v, q_lens, kv_lens, causal, scale):
        """Attention in float32, one request at a time; queries are the last q_len of the kv_len positions."""
        outs, lses, qo, kvo = [], [], 0, 0
        for lq, lk in zip(q_lens, kv_lens, strict=True):
            qb, kb, vb = q[qo:qo + lq].float(), k[kvo:kvo + lk].float(), v[kvo:kvo + lk].float()  # fmt: skip
            group = qb.shape[1] // kb.shape[1]
            kb, vb = kb.repeat_interleave(group, 1), vb.repeat_interleave(group, 1)
            s = torch.einsum("qhd,khd->hqk", qb, kb) * scale
            if causal:
                allowed = torch.arange(lk, device=dev)[None, :] <= (lk - lq + torch.arange(lq, device=dev))[:, None]
                s = s.masked_fill(~allowed[None], float("-inf"))
            outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), vb))
            lses.append(torch.logsumexp(s, -1).transpose(0, 1))
            qo, kvo = qo + lq, kvo + lk
        return torch.cat(outs), torch.cat(lses)

    def paged_kv(kv_lens, kv_heads, dim, pool=4096):
        """SGLang's token pool: page size 1, a request's tokens at scattered slots."""
        k_cache = torch.randn(pool, 1, kv_heads, dim, dtype=bf16, device=dev)
        v_cache = torch.randn(pool, 1, kv_heads, dim, dtype=bf16, device=dev)
        slots = torch.randperm(pool, device=dev)[: sum(kv_lens)].to(torch.int32)
        k_seq, v_seq = k_cache[slots.long(), 0], v_cache[slots.long(), 0]
        return (k_cache, v_cache), slots, k_seq, v_seq

    def q_of(n, dim, heads=HEADS):
        return torch.randn(n, heads, dim, dtype=bf16, device=dev)

    def replayed_in_a_graph(run, replan, q, pool, kv_lens):
        """SGLang's CUDA-graph step: run once (the runner's warm-up), capture, plan again into the captured buffers
        with the replay's lengths at new scattered slots, new queries, replay. Returns the output and the slots."""
        out = torch.empty_like(q)
        run(out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run(out)
        slots = torch.randperm(pool, device=dev)[: sum(kv_lens)].to(torch.int32)
        replan(kv_lens, slots)
        q.copy_(torch.randn_like(q))
        graph.replay()
        return out, slots

    # ---- the target: Kimi-K2.5's MLA (qk 192 = nope 128 + rope 64, v 128; absorbed: ckv 512, kpe 64)
    def mla_inputs(q_lens, kv_lens, pool=4096):
        k_buf = torch.randn(pool, 1, 576, dtype=bf16, device=dev)  # SGLang's MLA pool: one buffer, ckv | kpe
        slots = torch.randperm(pool, device=dev)[: sum(kv_lens)].to(torch.int32)
        n = sum(q_lens)
        q, q_rope = q_of(n, 512), q_of(n, 64)
        return k_buf, slots, q, q_rope

    def mla_reference(k_buf, slots, q, q_rope, q_lens, kv_lens, scale):
        kv = k_buf[slots.long(), 0].float()
        qcat = torch.cat([q, q_rope], -1)
        out, _ = reference(qcat, kv[:, None, :], kv[:, None, :512], q_lens, kv_lens, True, scale)
        return out

    mla_scale = 192**-0.5

    def mla_wrapper(cuda_graph=False, bs=2, max_pages=4096):
        if not cuda_graph:
            return flashinfer.mla.BatchMLAPagedAttentionWrapper(ws, backend="auto")
        return flashinfer.mla.BatchMLAPagedAttentionWrapper(
            ws, use_cuda_graph=True, qo_indptr=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
            kv_indptr=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
            kv_indices=torch.zeros(max_pages, dtype=torch.int32, device=dev),
            kv_len_arr=torch.zeros(bs, dtype=torch.int32, device=dev), backend="auto")  # fmt: skip

    def mla_plan(w, q_lens, kv_lens, slots):
        w.plan(indptr(q_lens), indptr(kv_lens), slots, i32(kv_lens), HEADS, 512, 64, 1, True, mla_scale, bf16, bf16)

    def mla_run(w, k_buf, q, q_rope, out=None):
        out = out if out is not None else torch.empty_like(q)
        return w.run(q, q_rope, k_buf[:, :, :512], k_buf[:, :, 512:], out=out)

    def ragged_target(q_lens, kv_lens, causal, return_lse):
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto")
        w.plan(indptr(q_lens), indptr(kv_lens), HEADS, HEADS, 192, head_dim_vo=128, q_data_type=bf16, causal=causal)
        q, k, v = q_of(sum(q_lens), 192), q_of(sum(kv_lens), 192), q_of(sum(kv_lens), 128)
        got = w.run(q, k, v, return_lse=return_lse)
        want, want_lse = reference(q, k, v, q_lens, kv_lens, causal, mla_scale)
        return got, want, want_lse

    if step == "target.prefill":
        got, want, _ = ragged_target([23, 61], [23, 61], True, False)
        check("ragged prefill qk 192 vo 128, causal", got, want)
    elif step in ("target.prefill.cached_prefix", "target.verify"):
        q_lens, kv_lens = ([5, 17], [42, 147]) if step.endswith("prefix") else ([4, 4], [61, 203])
        k_buf, slots, q, q_rope = mla_inputs(q_lens, kv_lens)
        w = mla_wrapper()
        mla_plan(w, q_lens, kv_lens, slots)
        check("MLA paged ckv 512 kpe 64, causal", mla_run(w, k_buf, q, q_rope),
              mla_reference(k_buf, slots, q, q_rope, q_lens, kv_lens, mla_scale))  # fmt: skip
    elif step == "target.prefill.long_cached_prefix":
        # The MLA wrapper is planned as for any extend; the chunked-prefix (MHA) path then runs the ragged kernel
        # over the whole sequence, the cached prefix and the new tokens (the trace's one-shot forward, no chunk
        # wrappers, no merge), with LSE only where the trace has forward_return_lse.
        q_lens, kv_lens = [5, 17], [42, 147]
        k_buf, slots, q, q_rope = mla_inputs(q_lens, kv_lens)
        mla_plan(mla_wrapper(), q_lens, kv_lens, slots)
        if "BatchPrefillWithRaggedKVCacheWrapper.forward_return_lse" in apis:
            (got, lse), want, want_lse = ragged_target(q_lens, kv_lens, True, True)
            check("ragged prefill over prefix and new tokens with LSE, causal", got, want, lse, want_lse)
        else:
            got, want, _ = ragged_target(q_lens, kv_lens, True, False)
            check("ragged prefill over prefix and new tokens, causal", got, want)
    elif step == "target.verify.cuda_graph":
        q_lens = [4, 4]
        k_buf, slots, q, q_rope = mla_inputs(q_lens, [61, 203])
        w = mla_wrapper(cuda_graph=True)
        mla_plan(w, q_lens, [61, 203], slots)
        kv_lens = [77, 150]  # the replay's batch
        out, slots = replayed_in_a_graph(
            lambda o: mla_run(w, k_buf, q, q_rope, o),
            lambda lens, s: mla_plan(w, q_lens, lens, s),
            q,
            k_buf.shape[0],
            kv_lens,
        )
        check("MLA paged, CUDA graph replayed with a new plan", out,
              mla_reference(k_buf, slots, q, q_rope, q_lens, kv_lens, mla_scale))  # fmt: skip
    elif step == "target.sample":
        # As sampler.py calls it: per-request int32 top-k and float32 top-p tensors, filter_apply_order="joint"
        # (the default "top_k_first" runs other kernels: top_k_renorm_probs then top_p sampling, or top-k's own
        # module for a scalar k over a large vocabulary).
        probs = torch.softmax(torch.randn(4, 1000, device=dev) * 3, -1)
        ones = torch.ones(4, dtype=torch.int32, device=dev)
        sample = flashinfer.sampling.top_k_top_p_sampling_from_probs
        greedy = sample(probs, ones, ones.float(), filter_apply_order="joint")
        checks.append({"check": "top-k 1 samples the argmax", "ok": bool((greedy.long() == probs.argmax(-1)).all())})
        top_k, top_p = 20, 0.8
        top_ks, top_ps = torch.full_like(ones, top_k), torch.full_like(ones.float(), top_p)
        drawn = sample(probs, top_ks, top_ps, filter_apply_order="joint")
        order = probs.sort(-1, descending=True)
        keep = (order.values.cumsum(-1) - order.values) < top_p
        keep[:, top_k:] = False
        allowed = torch.zeros_like(probs, dtype=torch.bool).scatter(1, order.indices, keep)
        inside = bool(allowed.gather(1, drawn.long()[:, None]).all())
        checks.append({"check": "top-k 20 top-p 0.8 samples inside both", "ok": inside})
    # ---- the draft: Llama EAGLE-3, head dim 128
    elif step.startswith("draft."):
        kv_heads = KV_HEADS[geometry]
        scale = 128**-0.5

        def paged_wrapper(cuda_graph=False, bs=2, max_tokens=4096):
            if not cuda_graph:
                return flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
            return flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                ws, "NHD", use_cuda_graph=True, backend="fa2",
                qo_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                paged_kv_indptr_buf=torch.zeros(bs + 1, dtype=torch.int32, device=dev),
                paged_kv_indices_buf=torch.zeros(max_tokens, dtype=torch.int32, device=dev),
                paged_kv_last_page_len_buf=torch.ones(bs, dtype=torch.int32, device=dev))  # fmt: skip

        def paged_plan(w, q_lens, kv_lens, slots, causal):
            w.plan(indptr(q_lens), indptr(kv_lens), slots, i32([1] * len(q_lens)), HEADS, kv_heads, 128, 1,
                   causal=causal, q_data_type=bf16, kv_data_type=bf16)  # fmt: skip

        def ragged(q_lens):
            w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto")
            w.plan(indptr(q_lens), indptr(q_lens), HEADS, kv_heads, 128, q_data_type=bf16, causal=True)
            return w

        def split_extend(q_lens, prefix_lens):
            """SGLang's extend over a cached prefix: the new tokens ragged (causal), the prefix paged, then merged."""
            cache, slots, k_pre, v_pre = paged_kv(prefix_lens, kv_heads, 128)
            pw = paged_wrapper()
            paged_plan(pw, q_lens, prefix_lens, slots, causal=False)
            rw = ragged(q_lens)
            q, k, v = q_of(sum(q_lens), 128), q_of(sum(q_lens), 128, kv_heads), q_of(sum(q_lens), 128, kv_heads)
            o1, s1 = rw.run(q, k, v, return_lse=True)
            o2, s2 = pw.run(q, cache, return_lse=True)
            o, _ = flashinfer.cascade.merge_state(o1, s1, o2, s2)
            # the reference: each request's prefix then its new tokens, one causal attention
            ks, vs, po, qo = [], [], 0, 0
            for lq, lp in zip(q_lens, prefix_lens, strict=True):
                ks += [k_pre[po:po + lp], k[qo:qo + lq]]  # fmt: skip
                vs += [v_pre[po:po + lp], v[qo:qo + lq]]  # fmt: skip
                po, qo = po + lp, qo + lq
            kv_lens = [a + b for a, b in zip(q_lens, prefix_lens, strict=True)]
            want, _ = reference(q, torch.cat(ks), torch.cat(vs), q_lens, kv_lens, True, scale)
            return o, want

        if step == "draft.extend":
            q_lens = [23, 61]
            cache, slots, _, _ = paged_kv(q_lens, kv_heads, 128)
            paged_plan(paged_wrapper(), q_lens, q_lens, slots, causal=True)  # planned beside the ragged one
            q, k, v = q_of(84, 128), q_of(84, 128, kv_heads), q_of(84, 128, kv_heads)
            got = ragged(q_lens).run(q, k, v)
            check("ragged prefill head 128, causal", got, reference(q, k, v, q_lens, q_lens, True, scale)[0])
        elif step == "draft.extend.cached_prefix" or (
            step == "draft.draft_extend" and "BatchPrefillWithRaggedKVCacheWrapper.forward_return_lse" in apis
        ):
            check("ragged + paged with LSE, merge_state", *split_extend([5, 17] if step.endswith("prefix") else [4, 4],
                                                                       [37, 130]))  # fmt: skip
        elif step in ("draft.draft_extend", "draft.draft_extend.cuda_graph"):
            q_lens, kv_lens = [4, 4], [41, 134]
            cache, slots, k_seq, v_seq = paged_kv(kv_lens, kv_heads, 128)
            q = q_of(8, 128)
            if step == "draft.draft_extend":
                w = paged_wrapper()
                paged_plan(w, q_lens, kv_lens, slots, causal=True)
                got = w.run(q, cache)
            else:
                w = paged_wrapper(cuda_graph=True)
                paged_plan(w, q_lens, kv_lens, slots, causal=True)
                kv_lens = [63, 98]
                got, slots = replayed_in_a_graph(
                    lambda o: w.run(q, cache, out=o),
                    lambda lens, s: paged_plan(w, q_lens, lens, s, causal=True),
                    q,
                    cache[0].shape[0],
                    kv_lens,
                )
                k_seq, v_seq = cache[0][slots.long(), 0], cache[1][slots.long(), 0]
            check("paged prefill head 128, causal" + (", CUDA graph replayed" if "cuda_graph" in step else ""),
                  got, reference(q, k_seq, v_seq, q_lens, kv_lens, True, scale)[0])  # fmt: skip
        elif step in ("draft.decode", "draft.decode.cuda_graph"):
            tensor_cores = geometry == "gqa"  # SGLang's should_use_tensor_core: a GQA group of 4 or more
            kv_lens = [45, 300]
            cache, slots, k_seq, v_seq = paged_kv(kv_lens, kv_heads, 128)
            q = q_of(2, 128)
            last = i32([1, 1])

            def decode_plan(w, kv_lens, slots):
                w.plan(indptr(kv_lens), slots, last, HEADS, kv_heads, 128, 1, q_data_type=bf16, kv_data_type=bf16)

            if step == "draft.decode":
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    ws, "NHD", backend="fa2", use_tensor_cores=tensor_cores
                )
                decode_plan(w, kv_lens, slots)
                got = w.run(q, cache)
            else:
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    ws, "NHD", backend="fa2", use_cuda_graph=True, use_tensor_cores=tensor_cores,
                    paged_kv_indptr_buffer=torch.zeros(3, dtype=torch.int32, device=dev),
                    paged_kv_indices_buffer=torch.zeros(4096, dtype=torch.int32, device=dev),
                    paged_kv_last_page_len_buffer=torch.ones(2, dtype=torch.int32, device=dev))  # fmt: skip
                decode_plan(w, kv_lens, slots)
                kv_lens = [71, 222]
                got, slots = replayed_in_a_graph(
                    lambda o: w.run(q, cache, out=o),
                    lambda lens, s: decode_plan(w, lens, s),
                    q,
                    cache[0].shape[0],
                    kv_lens,
                )
                k_seq, v_seq = cache[0][slots.long(), 0], cache[1][slots.long(), 0]
            check(f"decode head 128, {'tensor cores' if tensor_cores else 'no tensor cores'}"
                  + (", CUDA graph replayed" if "cuda_graph" in step else ""),
                  got, reference(q, k_seq, v_seq, [1, 1], kv_lens, True, scale)[0])  # fmt: skip
        else:
            raise LookupError(step)
    else:
        raise LookupError(step)
    torch.cuda.synchronize()
    return checks


REPLAYED = {
    "target.prefill", "target.prefill.cached_prefix", "target.prefill.long_cached_prefix", "target.verify",
    "target.verify.cuda_graph", "target.sample", "draft.extend", "draft.extend.cached_prefix", "draft.draft_extend",
    "draft.draft_extend.cuda_graph", "draft.decode", "draft.decode.cuda_graph",
}  # fmt: skip


def mapped_modules() -> list[str]:
    """The FlashInfer modules this process mapped, as 'name (where)': FlashInfer's AOT directory or a JIT cache."""
    found = set()
    for line in open("/proc/self/maps"):
        path = line.rstrip().split(" ")[-1]
        if path.endswith(".so") and ("/aot/" in path or "/cached_ops/" in path):
            found.add((Path(path).parent.name, "aot" if "/aot/" in path else "jit"))
    return [f"{name} ({where})" for name, where in sorted(found)]


def child(step: str, geometry: str, apis: list[str]) -> int:
    result = {"step": step, "geometry": geometry}
    started = time.perf_counter()
    try:
        result["checks"] = replay(step, geometry, apis)
    except Exception as err:  # the step's failure is its result; the parent judges it
        result["error"] = f"{type(err).__name__}: {str(err)[-1500:]}"
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["mapped"] = mapped_modules()
    print("REPLAY " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- the parent


def judge(entry: dict, result: dict) -> list[str]:
    """What is wrong with a step's result, in words; empty when it passed."""
    problems = []
    if "error" in result:
        problems.append(result["error"])
    problems += [f"{c['check']}: {c}" for c in result.get("checks", []) if not c["ok"]]
    if not result.get("checks") and "error" not in result:
        problems.append("no output was compared")
    mapped = result.get("mapped", [])
    names = sorted(m.split(" (")[0] for m in mapped)
    if names != entry["modules"]:
        problems.append(f"mapped {names}, the trace names {entry['modules']}")
    problems += [f"{m}: not from the prebuilt set" for m in mapped if m.endswith("(jit)")]
    return problems


def detect_capability() -> str:
    code = "import torch; print('%d.%d' % torch.cuda.get_device_capability())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        raise BadInput(f"no GPU to replay on ({out.stderr.strip().splitlines()[-1:]}); give --capability with --list")
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stack", help="a stack of nix/pins.json: 0.5.9 or 0.5.23")
    p.add_argument("--calls", type=Path, help="the trace (default nix/stacks/sglang-<stack>/flashinfer-calls.json)")
    p.add_argument("--capability", help="the GPU's capability, e.g. 9.0 (default: the GPU's own)")
    p.add_argument("--steps", default="", help="only these steps, comma-separated")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--list", action="store_true", help="print the steps and expected modules, run nothing")
    p.add_argument("--allow-jit", action="store_true", help="keep JIT and the caller's environment in the children")
    p.add_argument("--timeout", type=float, default=300, help="seconds a step may take (default 300)")
    p.add_argument("--child", nargs=3, metavar=("STEP", "GEOMETRY", "APIS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child[0], args.child[1], json.loads(args.child[2]))
    try:
        if not args.stack and not args.calls:
            raise BadInput("give --stack (0.5.9 or 0.5.23) or --calls FILE")
        calls = args.calls or NIX / "stacks" / f"sglang-{args.stack}" / "flashinfer-calls.json"
        try:
            trace = json.loads(calls.read_text())
            trace["steps"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise BadInput(f"{calls}: not a FlashInfer call trace ({err}); python -m sglang_eagle3_audits "
                           "--write --only flashinfer-calls makes one") from None  # fmt: skip
        capability = args.capability or detect_capability()
        entries = plan(trace, capability, [s for s in args.steps.split(",") if s])
    except BadInput as err:
        print(f"flashinfer-replay: {err}", file=sys.stderr)
        return 2
    if not entries:
        traced = ", ".join(trace.get("traced_on", {}))
        print(f"flashinfer-replay: the trace ran nothing on {capability}; traced: {traced}", file=sys.stderr)
        return 1
    missing = sorted({e["step"] for e in entries} - REPLAYED)
    if missing:
        print(f"flashinfer-replay: no replay for the traced step(s) {', '.join(missing)}: add one to replay()",
              file=sys.stderr)  # fmt: skip
        return 1
    if args.list:
        for e in entries:
            print(f"{e['step']} [{e['geometry']}]: {', '.join(e['modules'])}")
        return 0
    env = dict(os.environ)
    if not args.allow_jit:
        env.update(FLASHINFER_DISABLE_JIT="1", CUDA_HOME="/nonexistent/cuda", PATH="/nonexistent")
    results, failed = [], 0
    jit = "allowed" if args.allow_jit else "off"
    print(f"flashinfer-replay: {len(entries)} steps of SGLang {trace.get('sglang')} (FlashInfer "
          f"{trace.get('flashinfer')}) on {capability}, JIT {jit}", flush=True)  # fmt: skip
    for n, entry in enumerate(entries, 1):
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", entry["step"], entry["geometry"],
                json.dumps(entry["apis"])]  # fmt: skip
        try:
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("REPLAY ")]
            result = json.loads(lines[-1][7:]) if lines else {"error": f"exit {out.returncode}: {out.stderr[-1500:]}"}
        except subprocess.TimeoutExpired:
            result = {"error": f"timed out after {args.timeout} s"}
        problems = judge(entry, result)
        failed += bool(problems)
        results.append({**entry, **result, "problems": problems})
        errs = ", ".join(f"{c.get('max_abs_err', '-')}" for c in result.get("checks", []))
        print(f"[{n}/{len(entries)}] {entry['step']} [{entry['geometry']}]: {'ok' if not problems else 'FAIL'}"
              f" ({result.get('seconds', '-')} s; max abs err {errs or '-'})", flush=True)  # fmt: skip
        for problem in problems:
            print(f"    {problem}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"capability": capability, "stack": trace.get("sglang"),
                                         "flashinfer": trace.get("flashinfer"), "jit": args.allow_jit,
                                         "steps": results}, indent=1))  # fmt: skip
    print(f"flashinfer-replay: {len(entries) - failed} of {len(entries)} steps passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
