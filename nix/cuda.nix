# The CUDA 13 toolchain from nixpkgs' cudaPackages_13_0.
#   toolkit:     nvcc, headers and libraries in one tree, for CUDA_HOME (FlashInfer and
#                Triton compile kernels at run time) and the dev shell;
#   runtimeLibs: what autoPatchelf links the CUDA wheels against (as nixpkgs' torch-bin).
# libcuda.so.1 is the driver: it comes from the host at run time (/run/opengl-driver/lib).
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

  runtimeLibs = with cudaPackages; [
    cuda_cudart
    cuda_cupti
    cuda_nvrtc
    cuda_nvtx
    cudnn
    cusparselt
    libcublas
    libcufft
    libcufile
    libcurand
    libcusolver
    libcusparse
    nccl
  ];
}
