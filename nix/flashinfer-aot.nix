# FlashInfer's modules for SGLang's EAGLE-3 path, built ahead of time for chosen CUDA capabilities by
# scripts/flashinfer-aot.py: the modules the stack's SGLang loads on those GPUs, as
# the FlashInfer call audit (python -m sglang_eagle3_audits) traced them (the stack's flashinfer-calls.json), plus the opt-in
# all-reduce modules of flashinfer-aot.json; nvcc and no GPU, FlashInfer's own generators and
# builder, as nixpkgs' flashinfer-jit-cache builds its cache. stack.nix links the
# result as the FlashInfer package's data/aot directory, where FlashInfer looks for a module
# before it compiles one (0.6.3: JitSpec.is_aot; 0.7.2: get_aot_artifacts); anything else still
# compiles into the writable JIT cache. A module is found there by name alone, so it must hold
# code for every GPU it will meet: build for the capabilities of the host.
{
  lib,
  stdenv,
  autoAddDriverRunpath,
  ninja,
  # nix/cuda.nix
  cuda,
  # A Python environment with the stack's FlashInfer (as locked: no data/aot), torch and tvm-ffi.
  buildEnv,
  # The stack (nix/pins.json "stacks") and its trace (nix/stacks/sglang-<version>/flashinfer-calls.json).
  version,
  calls,
  # CUDA capabilities, e.g. [ "12.0" ] or [ "9.0" "12.0" ].
  capabilities,
  # Settings whose modules are built too (flashinfer-aot.json "opt_in"), e.g. [ "enable_flashinfer_allreduce_fusion" ].
  optIn ? [ ],
}:
let
  cc = cuda.cudaPackages.backendStdenv.cc;
  tag = lib.concatMapStringsSep "-" (lib.replaceStrings [ "." ] [ "" ]) capabilities;
in
stdenv.mkDerivation {
  pname = "flashinfer-aot-sglang-${version}";
  version = "sm${tag}";
  dontUnpack = true;
  dontInstall = true;

  # autoAddDriverRunpath puts /run/opengl-driver/lib first in each module's RUNPATH: in a build
  # nixpkgs' ld-wrapper drops a -rpath outside the store, so FLASHINFER_EXTRA_LDFLAGS cannot.
  nativeBuildInputs = [
    buildEnv
    ninja
    autoAddDriverRunpath
  ];
  env = {
    CUDA_HOME = "${cuda.toolkit}";
    CC = "${cc}/bin/cc";
    CXX = "${cc}/bin/c++";
  };
  # FlashInfer leaves out template instantiations it never calls, so its modules carry undefined
  # symbols that lazy binding never resolves; -z now fails them at dlopen (nixpkgs'
  # python-modules/flashinfer-jit-cache does the same). The JIT at run time is not hardened.
  hardeningDisable = [ "bindnow" ];

  buildPhase = ''
    runHook preBuild
    export HOME=$TMPDIR
    python ${./scripts/flashinfer-aot.py} --plan ${./flashinfer-aot.json} --calls ${calls} --stack ${version} \
      --capabilities ${lib.escapeShellArg (toString capabilities)} \
      --opt-in ${lib.escapeShellArg (lib.concatStringsSep "," optIn)} \
      --out $out --build-dir $TMPDIR/build --jobs $NIX_BUILD_CORES \
      --runpath ${lib.getLib cuda.cudaPackages.cuda_cudart}/lib --drop-runpath ${cuda.toolkit}
    runHook postBuild
  '';

  # The point of building ahead of time: the modules need neither nvcc's tree nor a compiler.
  disallowedReferences = [
    cuda.toolkit
    cc
  ];

  passthru = { inherit capabilities optIn; };
  meta.platforms = [ "x86_64-linux" ];
}
