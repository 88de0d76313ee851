# Stand-in for cudaPackages_13_0 (pkgs/top-level/cuda-packages.nix, CUDA 13.0.2;
# pkgs/development/cuda-modules/default.nix for the scope,
# pkgs/development/cuda-modules/buildRedist/default.nix for the redistributables,
# pkgs/development/cuda-modules/packages/*.nix for each package).
#
# What is mirrored: the attribute names; each package's outputs in the order buildRedist
# gives them (out, doc, samples, python, bin, dev, include, lib, static, stubs); names
# "cuda13.0-<pname>-<version>"; unfree NVIDIA licences (evaluating a drvPath needs
# config.allowUnfree) and `meta.broken` unless config.cudaSupport (a brokenAssertion of
# buildRedist); nccl and libnvshmem as the source builds they are (nccl BSD-3, libnvshmem
# out only). There is no `cudaVersion` in the real scope: use cudaMajorMinorVersion.
{
  lib,
  config,
  stdenv,
  hostPath,
  hostPrograms,
  backendCc,
  cudaMajorMinorPatchVersion,
}:
let
  cudaMajorMinorVersion = lib.versions.majorMinor cudaMajorMinorPatchVersion;
  expectedOutputs = [
    "out"
    "doc"
    "samples"
    "python"
    "bin"
    "dev"
    "include"
    "lib"
    "static"
    "stubs"
  ];

  package =
    {
      pname,
      version,
      outputs,
      license ? lib.licenses.nvidiaCudaRedist,
      redist ? true,
      # Executables in $out/bin, built here as wrappers of the host's (nvcc where CUDA is installed).
      programs ? [ ],
    }:
    stdenv.mkDerivation {
      name = "cuda${cudaMajorMinorVersion}-${pname}-${version}";
      inherit pname version programs;
      hostPath = hostPath ++ [ "/usr/local/cuda/bin" ];
      outputs = if redist then lib.intersectLists outputs expectedOutputs else outputs;
      __structuredAttrs = false;
      buildCommand = ''
        for o in $outputs; do mkdir -p "''${!o}"; done
      ''
      + lib.optionalString (programs != [ ]) (hostPrograms pname);
      passthru.programsByOutput = lib.optionalAttrs (programs != [ ]) { out = programs; };
      meta = {
        inherit license;
        # buildRedist's brokenAssertions: "CUDA support is enabled by config.cudaSupport".
        broken = redist && !config.cudaSupport;
        platforms = [
          "x86_64-linux"
          "aarch64-linux"
        ];
      };
    };
  r =
    pname: version: outputs:
    package { inherit pname version outputs; };
  full = [
    "out"
    "dev"
    "include"
    "lib"
    "static"
    "stubs"
  ];
in
lib.makeScope (extra: lib.callPackageWith extra) (self: {
  inherit cudaMajorMinorPatchVersion cudaMajorMinorVersion;
  cudaMajorVersion = lib.versions.major cudaMajorMinorPatchVersion;
  cudaNamePrefix = "cuda${cudaMajorMinorVersion}";
  cudaAtLeast = lib.versionAtLeast cudaMajorMinorPatchVersion;
  cudaOlder = lib.versionOlder cudaMajorMinorPatchVersion;
  backendStdenv = stdenv // {
    cc = backendCc // {
      inherit (stdenv.cc) cc libc isGNU;
    };
  };

  cuda_cccl = r "cuda_cccl" "13.0.85" [ "out" ];
  # packages/cuda_cudart.nix (read at 024ef1dc3076208119baaee8a2babec574573291), postInstall: the
  # stubs output has lib/stubs/libcuda.so with a libcuda.so.1 link to it ("Namelink may not be
  # enough, add a soname"), and both linked into its lib/.
  cuda_cudart = (r "cuda_cudart" "13.0.96" full).overrideAttrs (old: {
    buildCommand = old.buildCommand + ''
      mkdir -p $stubs/lib/stubs
      touch $stubs/lib/stubs/libcuda.so
      ln -s libcuda.so $stubs/lib/stubs/libcuda.so.1
      ln -s stubs/libcuda.so stubs/libcuda.so.1 -t $stubs/lib
    '';
  });
  # packages/cuda_crt.nix: nvcc's crt/ headers, a package of their own from CUDA 13 on.
  cuda_crt = r "cuda_crt" "13.0.88" [ "out" ];
  cuda_cupti = r "cuda_cupti" "13.0.85" [
    "out"
    "dev"
    "include"
    "lib"
    "samples"
    "static"
  ];
  cuda_nvcc = package {
    pname = "cuda_nvcc";
    version = "13.0.88";
    outputs = [ "out" ];
    programs = [
      "nvcc"
      "ptxas"
    ];
  };
  cuda_nvml_dev = r "cuda_nvml_dev" "13.0.87" [
    "out"
    "dev"
    "include"
    "stubs"
  ];
  cuda_nvrtc = r "cuda_nvrtc" "13.0.88" full;
  cuda_nvtx = r "cuda_nvtx" "13.0.85" [
    "out"
    "dev"
    "include"
    "lib"
  ];
  cuda_profiler_api = r "cuda_profiler_api" "13.0.85" [
    "out"
    "dev"
    "include"
  ];
  cudnn = r "cudnn" "9.13.0.50" [
    "out"
    "dev"
    "include"
    "lib"
    "static"
  ];
  libcusparse_lt = r "libcusparse_lt" "0.8.1.1" [
    "out"
    "dev"
    "include"
    "lib"
    "static"
  ];
  libcublas = r "libcublas" "13.1.0.3" full;
  libcufft = r "libcufft" "12.0.0.61" full;
  libcufile = r "libcufile" "1.15.1.6" [
    "out"
    "dev"
    "include"
    "lib"
    "static"
  ];
  libcurand = r "libcurand" "10.4.0.35" full;
  libcusolver = r "libcusolver" "12.0.4.66" full;
  libcusparse = r "libcusparse" "12.6.3.3" full;
  libnvjitlink = r "libnvjitlink" "13.0.88" full;
  # Source builds (packages/nccl.nix, packages/libnvshmem.nix).
  nccl = package {
    pname = "nccl";
    version = "2.28.7-1";
    outputs = [
      "out"
      "dev"
      "static"
    ];
    license = lib.licenses.bsd3;
    redist = false;
  };
  libnvshmem = package {
    pname = "libnvshmem";
    version = "3.4.5-0";
    outputs = [ "out" ];
    redist = false;
  };
}
# cuda-modules/aliases.nix (only with allowAliases, as in the real scope)
// lib.optionalAttrs config.allowAliases {
  cusparselt = self.libcusparse_lt;
})
