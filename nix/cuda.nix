# The CUDA 13 toolchain from nixpkgs' cudaPackages_13_0, for CUDA_HOME (FlashInfer and
# Triton compile kernels at run time) and the dev shell: nvcc, headers and libraries in one
# tree, joined the way nixpkgs' cuda-modules/packages/cudatoolkit.nix joins them (every
# output except `static`, which nothing links at run time and which would only grow the
# closure; cuda_crt from CUDA 13 on, where NVIDIA moved nvcc's crt/ headers). The libraries
# the wheels link are chosen per wheel from data (python-overrides.nix); libcuda.so.1 is the
# driver, from the host at run time.
{ pkgs, lib }:
let
  stack = (import ./pins.nix).stack;
  cudaPackages = pkgs.${stack.cudaPackages};
  runtimeOutputs = p: map (o: p.${o}) (lib.filter (o: o != "static") p.outputs);
in
{
  inherit cudaPackages;

  toolkit = pkgs.symlinkJoin {
    name = "cuda-toolkit-${cudaPackages.cudaMajorMinorVersion}";
    paths = lib.concatMap runtimeOutputs (
      with cudaPackages;
      [
        cuda_nvcc
        cuda_cudart
        cuda_cccl
        cuda_nvrtc
        cuda_profiler_api
        libcublas
        libcurand
      ]
      ++ lib.optional (cudaPackages.cudaAtLeast "13") cuda_crt
    );
    # FlashInfer's JIT links with -L$CUDA_HOME/lib64 and -L$CUDA_HOME/lib64/stubs (jit/cpp_ext.py);
    # nixpkgs' CUDA packages have lib/ only.
    postBuild = ''
      ln -s lib $out/lib64
    '';
  };

  # libcuda.so for linking (-lcuda) without the driver: Triton's driver module and FlashInfer's
  # JIT link against it; at run time the process already has the driver's libcuda.so.1 loaded.
  stubs = "${lib.getOutput "stubs" cudaPackages.cuda_cudart}/lib/stubs";
}
