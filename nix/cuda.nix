# The CUDA 13 toolchain from nixpkgs' cudaPackages_13_0, for CUDA_HOME (FlashInfer and
# Triton compile kernels at run time) and the dev shell: nvcc, headers and libraries in one
# tree. The libraries the wheels link are chosen per wheel from data (python-overrides.nix);
# libcuda.so.1 is the driver, from the host at run time (/run/opengl-driver/lib).
{ pkgs, lib }:
let
  stack = (import ./pins.nix).stack;
  cudaPackages = pkgs.${stack.cudaPackages};
  allOutputs = p: map (o: p.${o}) p.outputs;
in
{
  inherit cudaPackages;

  toolkit = pkgs.symlinkJoin {
    name = "cuda-toolkit-${cudaPackages.cudaMajorMinorVersion}";
    paths = lib.concatMap allOutputs (
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
    );
  };
}
