# One pinned serving stack for one system: CUDA 13 toolchain, the Python environment from
# the stack's uv.lock (0.5.9, the default: python/uv.lock, SGLang 0.5.9 patched, torch cu130,
# FlashInfer 0.6.3, sgl-kernel cu130; 0.5.23: nix/stacks/sglang-0.5.23/uv.lock), and the
# sglang-eagle3 command wrapped with what it needs at run time. Which stack: `version`, a key
# of nix/pins.json's "stacks" (null: the default); everything else is the same function.
{
  pkgs,
  lib,
  uv2nix,
  pyproject-nix,
  pyproject-build-systems,
  src,
  version ? null,
  # CUDA capabilities to build FlashInfer's attention modules for ahead of time (flashinfer-aot.nix),
  # e.g. [ "12.0" ]; null: the chosen cudaCapabilities, if any ([ ]: none, FlashInfer compiles them
  # at the first start).
  aotCapabilities ? null,
}:
let
  pins = import ./pins.nix;
  stack = pins.stackOf version;
  series = import ./patch-series.nix stack.version;
  # The uv project whose extras (server, test, router) are the environments: sglang-eagle3
  # itself for 0.5.9; for another stack, the project that pins its versions beside it.
  project = stack.project;
  python = pkgs."python${lib.replaceStrings [ "." ] [ "" ] pins.stack.python}";
  cuda = import ./cuda.nix { inherit pkgs lib; };
  # CUDA capabilities chosen for this stack, or [ ] (nixpkgs' default: its config option is
  # [ ] unless set). Unchosen, nixpkgs builds NCCL and NVSHMEM for its default capabilities
  # (which the CUDA binary cache serves, SM90 and SM120 among them) and FlashInfer and torch
  # compile for the GPUs they see at run time.
  cudaCapabilities = pkgs.config.cudaCapabilities or [ ];
  runtime = import ./runtime-env.nix {
    inherit
      pkgs
      lib
      cuda
      cudaCapabilities
      ;
    inherit (stack) version;
  };

  workspace = uv2nix.lib.workspace.loadWorkspace { workspaceRoot = src + "/${stack.workspace}"; };

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
              stack
              ;
          })
        ]
      );

  # FlashInfer's modules for SGLang's attention, built ahead of time for these capabilities (a
  # module lacking a GPU's code would be found and fail, so only for capabilities chosen).
  flashinferAot =
    capabilities:
    pkgs.callPackage ./flashinfer-aot.nix {
      inherit cuda capabilities;
      inherit (stack) version;
      calls = src + "/${stack.data}/flashinfer-calls.json";
      buildEnv = pythonSet.mkVirtualEnv "flashinfer-aot-build-env" { flashinfer-python = [ ]; };
    };
  aot =
    let
      chosen = if aotCapabilities != null then aotCapabilities else cudaCapabilities;
    in
    if chosen == [ ] then null else flashinferAot chosen;
  # The server's FlashInfer finds them as its data/aot directory.
  serverSet =
    if aot == null then
      pythonSet
    else
      pythonSet.overrideScope (
        _final: prev: {
          flashinfer-python = prev.flashinfer-python.overrideAttrs (old: {
            postInstall = (old.postInstall or "") + ''
              ln -s ${aot} $out/${python.sitePackages}/flashinfer/data/aot
            '';
            passthru = old.passthru // {
              flashinferAot = aot;
            };
          });
        }
      );

  serverEnv = serverSet.mkVirtualEnv "sglang-eagle3-env" { ${project} = [ "server" ]; };

  # The launcher, probe, patch tool and benchmark without the server stack: what the NixOS
  # module checks run, and enough to drive a server on another host.
  toolsEnv = (pythonSet.mkVirtualEnv "sglang-eagle3-tools-env" { sglang-eagle3 = [ ]; }).overrideAttrs (old: {
    meta = (old.meta or { }) // {
      mainProgram = "sglang-eagle3";
    };
  });

  # The router host's environment: the launcher (sglang-eagle3-router reads the API key from
  # a file) and the router, smg 1.13.0, without SGLang or CUDA.
  routerEnv = (pythonSet.mkVirtualEnv "sglang-eagle3-router-env" { ${project} = [ "router" ]; }).overrideAttrs (old: {
    meta = (old.meta or { }) // {
      mainProgram = "sglang-eagle3-router";
    };
  });

  # ruff at uv.lock's version, the one tests/run installs: the formatting check and the dev
  # shell agree with the tests about what is formatted.
  lintEnv = pythonSet.mkVirtualEnv "sglang-eagle3-lint-env" { ruff = [ ]; };

  # The CPU test suite imports SGLang from the trees it unpacks and replaces sgl_kernel by a
  # stand-in, so its environment leaves out the CUDA kernel package (sgl-kernel, renamed
  # sglang-kernel in 0.5.23), which both SGLang and the `server` extra list.
  withoutKernel = _final: prev: {
    sglang = prev.sglang.overrideAttrs (old: {
      passthru = old.passthru // {
        dependencies = removeAttrs old.passthru.dependencies [ stack.kernel ];
      };
    });
    ${project} = prev.${project}.overrideAttrs (old: {
      passthru = old.passthru // {
        optional-dependencies = old.passthru.optional-dependencies // {
          server = removeAttrs old.passthru.optional-dependencies.server [ stack.kernel ];
        };
      };
    });
  };
  testSet = pythonSet.overrideScope withoutKernel;
  testSpec = {
    ${project} = [
      "server"
      "test"
      "router"
    ];
  };
  testEnv = testSet.mkVirtualEnv "sglang-eagle3-test-env" testSpec;

  # `nix develop`: the test environment with sglang-eagle3 installed editable from the
  # working tree ($REPO_ROOT, set by the shell hook), as uv2nix's templates do, so tests and
  # the CLI run the code being edited, not a store copy. (uv2nix makes the path of
  # sglang-eagle3 relative to the workspace's root: $REPO_ROOT/python for 0.5.9.)
  devSet = testSet.overrideScope (
    lib.composeManyExtensions [
      (workspace.mkEditablePyprojectOverlay {
        root = "$REPO_ROOT/${stack.workspace}";
        members = [ "sglang-eagle3" ];
      })
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

  runtimeEnv = runtime.environment // {
    SGLANG_EAGLE3_PATCHES = "${series.dir}";
  };

  package = pkgs.symlinkJoin {
    # The default stack's package keeps its name; another stack's names its SGLang.
    name = "sglang-eagle3-${pythonSet.sglang-eagle3.version}" + lib.optionalString (!stack.isDefault) "-sglang-${stack.version}";
    paths = [ serverEnv ];
    nativeBuildInputs = [ pkgs.makeWrapper ];
    postBuild = ''
      wrapProgram $out/bin/sglang-eagle3 ${runtime.wrapperArgs} \
        --set-default SGLANG_EAGLE3_PATCHES ${series.dir}
    '';
    passthru = {
      inherit
        pythonSet
        serverEnv
        testEnv
        toolsEnv
        routerEnv
        lintEnv
        devEnv
        cuda
        runtime
        runtimeEnv
        series
        aot
        flashinferAot
        ;
      stack = removeAttrs stack [ "sglangPin" ];
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
    routerEnv
    lintEnv
    testEnv
    devEnv
    cuda
    runtime
    runtimeEnv
    python
    series
    aot
    flashinferAot
    serverSet
    ;
  inherit (stack) version;
  sglangWheel = pythonSet.sglang.src;
}
