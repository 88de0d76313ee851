# The throughput A/B gate on real GPUs: start the baseline server, measure, stop; start
# the EAGLE-3 server, measure, stop; fail unless EAGLE-3 single-stream decode tok/s is
# at least `threshold` x the baseline's (sglang-eagle3 bench ab, tests/test_bench_ab.py).
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
    ]
    ++ lib.optional (nvidiaDriver != null) (lib.getBin nvidiaDriver);
    requiredSystemFeatures = [ "cuda" ];
    # SGLang compiles FlashInfer's and its own kernels here with the stdenv's compiler wrapper, which
    # in a build applies the default hardening: -z now fails FlashInfer's modules at dlopen (they
    # carry undefined symbols of instantiations they never call; nixpkgs' flashinfer-jit-cache too).
    hardeningDisable = [ "bindnow" ];
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
    # The baseline profile, then EAGLE-3, one after the other on this host's GPUs (bench ab: each
    # side through `serve`, ready, measured, stopped); the gate is EAGLE-3 >= threshold x baseline.
    sglang-eagle3 bench ab --output-dir $out --threshold ${toString threshold} --requests ${toString requests} \
      --a sglang-eagle3 --a-label baseline --a-profile baseline \
      --b sglang-eagle3 --b-label EAGLE-3 --b-profile eagle3 \
      --set model_path="$modelPath" --set speculative_draft_model_path="$draftModelPath" --set ready_timeout=5400 \
      | tee $out/verdict.txt
  ''
