# The throughput A/B gate on real GPUs: start the baseline server, measure, stop; start
# the EAGLE-3 server, measure, stop; fail unless EAGLE-3 single-stream decode tok/s is
# at least `threshold` x the baseline's (sglang-eagle3 bench compare).
#
# It needs GPUs inside the build sandbox, so, like nixpkgs' gpuCheck, it requires the
# "cuda" system feature: a host with programs.nix-required-mounts (NVIDIA preset) mounts
# the driver and /dev/nvidia* into it, and the model directories (the NixOS module's
# gpuChecks option adds them). It is not in `checks`, so `nix flake check` passes on
# hosts without GPUs. SGLang runs nvidia-smi at start, which the sandbox only has from the
# host's own driver package (a build input, so its closure is in the sandbox; another driver
# version would not match the kernel module): services.sglang-eagle3.gpuChecks.package passes
# config.hardware.nvidia.package. Build it with: nix build .#gpu-throughput-check
{
  pkgs,
  lib,
  package,
  # The host's NVIDIA driver package (config.hardware.nvidia.package), for nvidia-smi.
  nvidiaDriver ? null,
  # The example host's model directories (modules/examples/8-gpu-host.nix), which the
  # module's gpuChecks expose to the sandbox by default.
  modelPath ? "/var/lib/models/Kimi-K2.5-NVFP4",
  draftModelPath ? "/var/lib/models/Kimi-K25-eagle3",
  threshold ? 1.0,
  requests ? 8,
}:
pkgs.runCommand "sglang-eagle3-gpu-throughput-check"
  {
    nativeBuildInputs = [
      package
      pkgs.curl
    ]
    ++ lib.optional (nvidiaDriver != null) (lib.getBin nvidiaDriver);
    requiredSystemFeatures = [ "cuda" ];
    # Model directories come from the host through nix-required-mounts, not the store.
    inherit modelPath draftModelPath;
  }
  ''
    export HOME=$TMPDIR HF_HUB_OFFLINE=1
    command -v nvidia-smi > /dev/null || {
      echo "gpu-throughput-check: no nvidia-smi (SGLang needs it at start): build the check with the host's driver," >&2
      echo "  services.sglang-eagle3.gpuChecks.package, or lib.mkGpuCheck { nvidiaDriver = config.hardware.nvidia.package; }" >&2
      exit 1
    }
    mkdir -p $out
    common=(--set model_path="$modelPath" --set speculative_draft_model_path="$draftModelPath" --set ready_timeout=5400)

    measure() {  # profile port label
      sglang-eagle3 serve --profile "$1" "''${common[@]}" --set port="$2" > $out/"$3"-server.log 2>&1 &
      local server=$!
      until curl -sf "http://127.0.0.1:$2/health_generate" > /dev/null; do
        kill -0 $server 2> /dev/null || { cat $out/"$3"-server.log; exit 1; }
        sleep 10
      done
      sglang-eagle3 bench run --url "http://127.0.0.1:$2" --label "$3" --requests ${toString requests} \
        --output $out/"$3".jsonl
      kill -TERM $server; wait $server || true
    }

    measure baseline 30001 baseline
    measure eagle3 30000 eagle3
    sglang-eagle3 bench compare $out/baseline.jsonl $out/eagle3.jsonl --threshold ${toString threshold} \
      | tee $out/verdict.txt
  ''
