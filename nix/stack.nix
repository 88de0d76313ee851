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
  # Capabilities FlashInfer/Triton compile for at run time. nixpkgs' config.cudaCapabilities
  # defaults to [ ] (never missing), so an empty list means "not chosen": then RTX PRO 6000's
  # 12.0 from nix/pins.json; e.g. [ "9.0" ] for H100/H200.
  cudaCapabilities =
    let
      chosen = pkgs.config.cudaCapabilities or [ ];
    in
    if chosen != [ ] then chosen else pins.stack.cudaCapabilities;

  workspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = src + "/python"; };

  pythonSet =
    (pkgs.callPackage pyproject-nix.build.packages { inherit python; }).overrideScope
      (
        lib.composeManyExtensions [
          pyproject-build-systems.overlays.wheel
          (workspace.mkPyprojectOverlay { sourcePreference = "wheel"; })
          (import ./python-overrides.nix {
            inherit
              pkgs
              lib
              cuda
              python
              src
              ;
          })
        ]
      );

  serverEnv = pythonSet.mkVirtualEnv "sglang-eagle3-env" { sglang-eagle3 = [ "server" ]; };

  # The launcher, probe, patch tool and benchmark without the server stack: what the NixOS
  # module checks run, and enough to drive a server on another host.
  toolsEnv = (pythonSet.mkVirtualEnv "sglang-eagle3-tools-env" { sglang-eagle3 = [ ]; }).overrideAttrs (old: {
    meta = (old.meta or { }) // {
      mainProgram = "sglang-eagle3";
    };
  });

  # The CPU test suite imports SGLang from the trees it unpacks and replaces sgl_kernel by a
  # stand-in, so its environment leaves out the CUDA kernel package, which both SGLang and
  # the `server` extra list.
  withoutKernel = _final: prev: {
    sglang = prev.sglang.overrideAttrs (old: {
      passthru = old.passthru // {
        dependencies = removeAttrs old.passthru.dependencies [ "sgl-kernel" ];
      };
    });
    sglang-eagle3 = prev.sglang-eagle3.overrideAttrs (old: {
      passthru = old.passthru // {
        optional-dependencies = old.passthru.optional-dependencies // {
          server = removeAttrs old.passthru.optional-dependencies.server [ "sgl-kernel" ];
        };
      };
    });
  };
  testSet = pythonSet.overrideScope withoutKernel;
  testSpec = {
    sglang-eagle3 = [
      "server"
      "test"
    ];
  };
  testEnv = testSet.mkVirtualEnv "sglang-eagle3-test-env" testSpec;

  # `nix develop`: the test environment with sglang-eagle3 installed editable from the
  # working tree ($REPO_ROOT, set by the shell hook), as uv2nix's templates do, so tests and
  # the CLI run the code being edited, not a store copy.
  devSet = testSet.overrideScope (
    lib.composeManyExtensions [
      (workspace.mkEditablePyprojectOverlay { root = "$REPO_ROOT/python"; })
      (final: prev: {
        sglang-eagle3 = prev.sglang-eagle3.overrideAttrs (old: {
          # Built from the same files as the non-editable package (hatch's force-include
          # of ../patches must exist), with the build system editable wheels need.
          inherit (pythonSet.sglang-eagle3) src sourceRoot;
          nativeBuildInputs = old.nativeBuildInputs ++ final.resolveBuildSystem { editables = [ ]; };
        });
      })
    ]
  );
  devEnv = devSet.mkVirtualEnv "sglang-eagle3-dev-env" testSpec;

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
        toolsEnv
        devEnv
        cuda
        runtimeEnv
        ;
      sglangWheel = pythonSet.sglang.src;
      editablePackage = devSet.sglang-eagle3;
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
    toolsEnv
    testEnv
    devEnv
    cuda
    runtimeEnv
    python
    ;
  sglangWheel = pythonSet.sglang.src;
}
