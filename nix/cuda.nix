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
  driverLibcuda = "${pkgs.addDriverRunpath.driverLink}/lib/libcuda.so.1";
in
rec {
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
    #
    # cuda_cudart's stubs output also names its stub libcuda.so.1 (in lib/ and lib/stubs/). A
    # module linked at run time with -lcuda through nixpkgs' ld-wrapper gets an rpath to each -L
    # directory that supplied a -l library, so it would load that stub whenever nothing had
    # loaded the driver first (cuInit: CUDA_ERROR_STUB_LIBRARY, and the stub then stands for the
    # driver in the whole process). Here libcuda.so.1 is the driver's, in NixOS's driver
    # directory; libcuda.so, what -lcuda links against, stays the stub.
    postBuild = ''
      ln -s lib $out/lib64
      for dir in $out/lib $out/lib/stubs; do
        rm -f $dir/libcuda.so.1
        ln -s ${driverLibcuda} $dir/libcuda.so.1
      done
    '';
  };

  # libcuda.so for linking (-lcuda, Triton's -l:libcuda.so.1) without the driver: Triton's launcher
  # and FlashInfer's JIT link against it. Its libcuda.so.1 is the driver's (above).
  stubs = "${toolkit}/lib/stubs";
}
