#!/usr/bin/env bash
# The GPU half of the prebuilt FlashInfer set (docs/gpu-host.md (j)), on a GPU host with nvcc, ninja and torch:
#
#   nix/scripts/flashinfer-gpu-proof.sh STACK SITE OUT [PHASES] [BUDGET_SECONDS]
#
# SITE: a directory (or .tar.xz of one) holding the stack's FlashInfer and tvm-ffi, put first on PYTHONPATH.
# PHASES: "9.0" (build and replay), "12.0" (build and read), or "all" (default; both builds at once, half the jobs
# each: a device command has 10 minutes, so one phase a command is the safe split).
# 1. builds the stack's 9.0 and 12.0 sets with nix/scripts/flashinfer-aot.py, no GPU visible;
# 2. replays every traced call on this GPU from the 9.0 set with JIT off and no compiler
#    (nix/scripts/flashinfer-replay.py), the set linked where FlashInfer looks first (flashinfer/data/aot);
# 3. lists the machine code of each 12.0 module (cuobjdump --list-elf): each must hold sm_120 code.
# Writes its logs, the manifests and the replay's JSON to OUT; exit status 1 when any step failed.
set -uo pipefail
stack=$1 site=$2 out=$3 phases=${4:-all} budget=${5:-540}
case $phases in all | 9.0 | 12.0) ;; *) echo "PHASES must be all, 9.0 or 12.0, not '$phases'" >&2; exit 2 ;; esac
jobs=$(nproc)
[ "$phases" = all ] && jobs=$((jobs / 2 > 0 ? jobs / 2 : 1))  # both builds at once: nvcc's fa3 units take GBs each
here=$(cd "$(dirname "$0")" && pwd)
start=$SECONDS
mkdir -p "$out"
work=$(mktemp -d /tmp/flashinfer-proof.XXXXXX)
if [ -f "$site" ]; then
  mkdir -p "$work/site" && tar -C "$work/site" -xJf "$site" && site=$work/site
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
echo "== $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(nvcc --version | tail -1); python $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"

build() {  # CAPABILITY: the set, built as the Nix derivation builds it, with no GPU visible
  local cap=$1 t=$SECONDS
  CUDA_VISIBLE_DEVICES= timeout $((budget - 60)) python3 "$here/flashinfer-aot.py" --stack "$stack" --capabilities "$cap" \
    --out "$work/sm$cap/aot" --build-dir "$work/build-$cap" --jobs "$jobs" > "$out/build-$cap.log" 2>&1
  local rc=$?
  cp "$work/sm$cap/aot/manifest.json" "$out/manifest-$cap.json" 2>/dev/null
  echo "== build $cap: exit $rc in $((SECONDS - t)) s" | tee -a "$out/build-$cap.log"
  return $rc
}

failed=0
[ "$phases" != 9.0 ] && { build 12.0 & pid12=$!; }
if [ "$phases" != 12.0 ]; then
  build 9.0; rc9=$?
  failed=$rc9
  if [ $rc9 -eq 0 ]; then
    aot=$(python3 -c 'import flashinfer, os; print(os.path.join(os.path.dirname(flashinfer.__file__), "data", "aot"))')
    ln -sfn "$work/sm9.0/aot" "$aot"
    # FlashInfer must look where the set is linked (0.6.3: a flashinfer-jit-cache package would move it)
    looks=$(python3 -c 'from flashinfer.jit import env; print(env.FLASHINFER_AOT_DIR.resolve())')
    if [ "$looks" != "$(readlink -f "$work/sm9.0/aot")" ]; then
      echo "== FlashInfer looks for prebuilt modules in $looks, not in the linked set $work/sm9.0/aot" | tee "$out/replay-9.0.log"
      failed=1
    else
      t=$SECONDS
      left=$((budget - (SECONDS - start))); [ $left -lt 60 ] && left=60  # the log keeps each step's line if cut
      timeout $left python3 "$here/flashinfer-replay.py" --stack "$stack" --json "$out/replay-9.0.json" --timeout 120 2>&1 |
        tee "$out/replay-9.0.log"
      rc=${PIPESTATUS[0]}
      echo "== replay 9.0: exit $rc in $((SECONDS - t)) s" | tee -a "$out/replay-9.0.log"
      failed=$((failed | rc))
    fi
    rm -f "$aot"
  fi
fi
if [ "$phases" != 9.0 ]; then
  wait $pid12; rc12=$?
  failed=$((failed | rc12))
  if [ $rc12 -eq 0 ]; then
    for so in "$work"/sm12.0/aot/*/*.so; do
      elves=$(cuobjdump --list-elf "$so" 2>&1)
      arches=$(grep -o 'sm_[0-9]*[af]\?' <<<"$elves" | sort -u | tr '\n' ' ')
      verdict=ok; grep -q 'sm_120' <<<"$elves" || verdict=FAIL
      echo "$verdict $(basename "$so") $(stat -c %s "$so") bytes: ${arches:-no device code}"
    done | tee "$out/cuobjdump-12.0.txt"
    grep -q '^FAIL' "$out/cuobjdump-12.0.txt" && failed=1
  fi
fi
echo "== $stack ($phases): $([ $failed -eq 0 ] && echo ok || echo FAILED) in $((SECONDS - start)) s"
exit $((failed != 0))
