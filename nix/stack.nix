# The whole serving stack for one system: CUDA 13 toolchain, the Python environment from
# python/uv.lock (SGLang 0.5.9 patched, torch cu130, FlashInfer, sgl-kernel cu130), and
# the sglang-eagle3 command wrapped with what it needs at run time.
{
  pkgs,
  lib,
  uv2nix,
  pyproject-nix,
  pyproject-build-systems,
  src,
}:
let
  pins = import ./pins.nix;
  series = import ./patch-series.nix;
  python = pkgs."python${lib.replaceStrings [ "." ] [ "" ] pins.stack.python}";
  cuda = import ./cuda.nix { inherit pkgs lib; };
  # Capabilities FlashInfer/Triton compile for at run time; nixpkgs' config sets them
  # (default 12.0, RTX PRO 6000; e.g. 9.0 for H100/H200).
  cudaCapabilities = pkgs.config.cudaCapabilities or pins.stack.cudaCapabilities;

  workspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = src + "/python"; };

  pythonSet =
    (pkgs.callPackage pyproject-nix.build.packages { inherit python; }).overrideScope
      (
        lib.composeManyExtensions [
          pyproject-build-systems.overlays.wheel
          (workspace.mkPyprojectOverlay { sourcePreference = "wheel"; })
          (import ./python-overrides.nix { inherit pkgs lib cuda python src; })
        ]
      );

  serverEnv = pythonSet.mkVirtualEnv "sglang-eagle3-env" { sglang-eagle3 = [ "server" ]; };

  # The CPU test suite replaces sgl_kernel by a stand-in, so its environment does not
  # need the CUDA kernel package at all.
  testSet = pythonSet.overrideScope (
    _final: prev: {
      sglang = prev.sglang.overrideAttrs (old: {
        passthru = old.passthru // {
          dependencies = removeAttrs old.passthru.dependencies [ "sgl-kernel" ];
        };
      });
    }
  );
  testEnv = testSet.mkVirtualEnv "sglang-eagle3-test-env" {
    sglang-eagle3 = [
      "server"
      "test"
    ];
  };

  runtimeEnv = {
    CUDA_HOME = "${cuda.toolkit}";
    TORCH_CUDA_ARCH_LIST = lib.concatStringsSep ";" cudaCapabilities;
    SGLANG_EAGLE3_PATCHES = "${series.dir}";
  };

  package = pkgs.symlinkJoin {
    name = "sglang-eagle3-${pythonSet.sglang-eagle3.version}";
    paths = [ serverEnv ];
    nativeBuildInputs = [ pkgs.makeWrapper ];
    postBuild = ''
      wrapProgram $out/bin/sglang-eagle3 \
        ${lib.concatStrings (lib.mapAttrsToList (k: v: "--set-default ${k} '${v}' ") runtimeEnv)}
    '';
    passthru = {
      inherit
        pythonSet
        serverEnv
        testEnv
        cuda
        runtimeEnv
        ;
      sglangWheel = pythonSet.sglang.src;
    };
    meta = {
      description = "SGLang ${series.version} with the EAGLE-3 patch set, CUDA 13, and the sglang-eagle3 tools";
      mainProgram = "sglang-eagle3";
      platforms = [ "x86_64-linux" ];
    };
  };
in
{
  inherit
    package
    serverEnv
    testEnv
    cuda
    runtimeEnv
    python
    ;
  sglangWheel = pythonSet.sglang.src;
}
