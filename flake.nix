{
  description = "Kimi-K2.5 + EAGLE-3 on SGLang 0.5.9 with CUDA 13: patched, pinned, tested, served";

  # One nixpkgs revision with cudaPackages_13_0, and the uv2nix stack that turns
  # python/uv.lock into derivations (poetry2nix is unmaintained; its README points to uv2nix).
  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

    pyproject-nix = {
      url = "github:pyproject-nix/pyproject.nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };

    uv2nix = {
      url = "github:pyproject-nix/uv2nix";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };

    pyproject-build-systems = {
      url = "github:pyproject-nix/build-system-pkgs";
      inputs.pyproject-nix.follows = "pyproject-nix";
      inputs.uv2nix.follows = "uv2nix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs =
    {
      self,
      nixpkgs,
      pyproject-nix,
      uv2nix,
      pyproject-build-systems,
    }:
    let
      inherit (nixpkgs) lib;
      system = "x86_64-linux";

      # nixpkgs with CUDA: unfree allowed, cudaSupport, and nixpkgs' default capabilities
      # (SM90 and SM120 among them; what the CUDA binary cache builds). Choosing a list, e.g.
      # [ "12.0" ], narrows FlashInfer's and torch's JIT targets and builds NCCL from source.
      mkPkgs =
        {
          system,
          cudaCapabilities ? null,
        }:
        import nixpkgs {
          inherit system;
          config = {
            allowUnfree = true;
            cudaSupport = true;
          }
          // lib.optionalAttrs (cudaCapabilities != null) { inherit cudaCapabilities; };
        };

      # One function, every pinned stack (nix/pins.json "stacks"); version null: the default.
      # args: version, aotCapabilities (nix/stack.nix).
      mkStackWith =
        pkgs: args:
        import ./nix/stack.nix (
          {
            inherit
              pkgs
              lib
              uv2nix
              pyproject-nix
              pyproject-build-systems
              ;
            src = ./.;
          }
          // args
        );
      mkStack = pkgs: version: mkStackWith pkgs { inherit version; };

      pins = import ./nix/pins.nix;
      pkgs = mkPkgs { inherit system; };
      stack = mkStack pkgs null;
      # Every pinned stack by version, for the versioned outputs. Their names carry the version
      # with "_" for "." (sglang-eagle3-0_5_23): a dot would split the attribute path of
      # `nix run .#serve-eagle3-0.5.23`.
      stacks = lib.mapAttrs (version: _: mkStack pkgs version) pins.stacks;
      suffix = version: lib.replaceStrings [ "." ] [ "_" ] version;
      versioned = prefix: f: lib.mapAttrs' (version: s: lib.nameValuePair "${prefix}-${suffix version}" (f s)) stacks;

      # The newest pinned stack: side B of `nix run .#upgrade-ab` (A is the default stack).
      newest = stacks.${lib.last (lib.sort lib.versionOlder (builtins.attrNames pins.stacks))};

      # OCI images of a stack (nix/image.nix): .server (`nix build .#image`) and .router.
      images =
        s:
        import ./nix/image.nix {
          inherit pkgs lib;
          stack = s;
          revision = self.rev or self.dirtyRev or "unknown";
        };

      app = package: name: args: {
        type = "app";
        program = "${pkgs.writeShellScript name ''exec ${lib.getExe package} ${args} "$@"''}";
        meta.description = "sglang-eagle3 ${args}";
      };
    in
    {
      lib = {
        # The stack for chosen GPU generations only: (lib.mkStack { cudaCapabilities = [ "12.0" ]; }).package;
        # another pinned stack: (lib.mkStack { version = "0.5.23"; }).package; FlashInfer's attention
        # modules built ahead of time for these GPUs, without choosing nixpkgs' capabilities:
        # (lib.mkStack { aotCapabilities = [ "12.0" ]; }).package (chosen capabilities imply it)
        mkStack =
          args:
          mkStackWith (mkPkgs ({ inherit system; } // removeAttrs args [ "version" "aotCapabilities" ])) (
            { version = args.version or null; } // lib.optionalAttrs (args ? aotCapabilities) { inherit (args) aotCapabilities; }
          );
        # The GPU A/B gate against other model directories.
        mkGpuCheck =
          args:
          pkgs.callPackage ./nix/gpu-check.nix ({ inherit (stack) package; } // args);
        # A model directory in the store from a model lock (sglang-eagle3 models lock):
        # lib.fetchModel { lockFile = ./Kimi-K25-eagle3.lock.json; }
        fetchModel = import ./nix/fetch-model.nix { inherit (pkgs) fetchurl linkFarm; };
        # The size of a package's run-time closure by component: lib.closureSize pkg
        closureSize = pkgs.callPackage ./nix/closure-size.nix { };
      };

      packages.${system} = {
        default = stack.package;
        sglang-eagle3 = stack.package;
        sglang-wheel = stack.sglangWheel;
        cuda-toolkit = stack.cuda.toolkit;
        # $out/closure-size.txt: the server package's closure by component.
        closure-size = self.lib.closureSize stack.package;
        # FlashInfer's modules for SGLang's attention built ahead of time for the users' GPUs (SM120),
        # with nvcc and no GPU (nix/flashinfer-aot.nix); lib.mkStack { aotCapabilities = [ ... ]; }
        # puts them in the server.
        flashinfer-aot = stack.flashinferAot [ "12.0" ];
        # The server's environment with those modules and without the wrapper's JIT toolchain (nvcc's
        # tree, the C++ compiler, ninja): what that toolchain costs next to closure-size. SGLang's own
        # JIT kernels still need it (docs/gpu-host.md), so the server keeps it.
        closure-size-without-jit-toolchain =
          self.lib.closureSize (mkStackWith pkgs { aotCapabilities = [ "12.0" ]; }).serverEnv;
        # The router host's environment (sglang-eagle3-router, smg 1.13.0; no CUDA).
        sglang-router = stack.routerEnv;
        # NixOS VM test of services.sglang-router (needs KVM: the nixos-test and kvm system
        # features); deliberately not in `checks`, so `nix flake check` passes without KVM.
        router-vm-test = pkgs.testers.runNixOSTest (
          import ./nix/tests/router-vm.nix { routerPackage = stack.routerEnv; }
        );
        # Needs GPUs (system feature "cuda"); deliberately not in `checks`.
        gpu-throughput-check = self.lib.mkGpuCheck { };
        # OCI images (docs/kubernetes.md): the server's and the router's; `./result | docker load`.
        image = (images stack).server;
        router-image = (images stack).router;
      }
      # Each pinned stack by its SGLang version: sglang-eagle3-0_5_23, sglang-wheel-0_5_23, image-0_5_23, ...
      // versioned "sglang-eagle3" (s: s.package)
      // versioned "sglang-wheel" (s: s.sglangWheel)
      // versioned "image" (s: (images s).server)
      // versioned "flashinfer-aot" (s: s.flashinferAot [ "12.0" ]);

      apps.${system} = {
        default = self.apps.${system}.serve-eagle3;
        serve-eagle3 = app stack.package "serve-eagle3" "serve";
        bench = app stack.package "bench" "bench";
        probe = app stack.package "probe" "probe";
      }
      # nix run .#serve-eagle3-0_5_23
      // versioned "serve-eagle3" (s: app s.package "serve-eagle3-${s.version}" "serve")
      // {
        # nix run .#upgrade-ab -- --config settings.json: the default stack (A) and the newest (B)
        # served one after the other with the same settings, each measured; exit 1 unless
        # B >= --threshold x A (sglang-eagle3 bench ab; tests/test_bench_ab.py).
        upgrade-ab = app stack.package "upgrade-ab" (
          lib.escapeShellArgs [
            "bench"
            "ab"
            "--a"
            (lib.getExe stack.package)
            "--a-label"
            "sglang-${stack.version}"
            "--b"
            (lib.getExe newest.package)
            "--b-label"
            "sglang-${newest.version}"
          ]
        )
        // {
          meta.description = "sglang-eagle3 bench ab: SGLang ${stack.version} (A) against ${newest.version} (B)";
        };
      };

      devShells.${system}.default = pkgs.mkShell {
        packages = [
          stack.devEnv
          pkgs.patch
          pkgs.uv
          pkgs.nixfmt
        ]
        ++ stack.runtime.path;
        env = stack.runtime.environment // {
          UV_NO_SYNC = "1";
          UV_PYTHON = stack.python.interpreter;
          UV_PYTHON_DOWNLOADS = "never";
        };
        # sglang-eagle3 is installed editable from $REPO_ROOT/python (uv2nix's editable
        # overlay), so the shell runs the working tree's code and finds its patches/.
        shellHook = ''
          unset PYTHONPATH
          export REPO_ROOT=$(git rev-parse --show-toplevel)
          . ${stack.runtime.hostDriver}
        '';
        passthru = { inherit (stack) devEnv; };
      };

      checks.${system} = import ./nix/checks.nix {
        inherit pkgs stack;
        src = ./.;
        moduleChecks = import ./nix/module-checks.nix {
          inherit pkgs lib nixpkgs;
          module = self.nixosModules.default;
          # The launcher without the CUDA stack: enough for the settings and unit checks.
          package = stack.toolsEnv;
          routerPackage = stack.routerEnv;
          # The other stacks' server packages, each given to services.sglang-eagle3.package.
          stackPackages = lib.mapAttrs' (version: s: lib.nameValuePair (suffix version) s.package) (
            lib.filterAttrs (_: s: s.version != stack.version) stacks
          );
        };
      }
      # Building another stack's patched wheel applies its series with no fuzz.
      // lib.mapAttrs' (version: s: lib.nameValuePair "patch-series-${suffix version}" s.sglangWheel) (
        lib.filterAttrs (_: s: s.version != stack.version) stacks
      );

      nixosModules = {
        default = self.nixosModules.sglang-eagle3;
        sglang-eagle3 =
          { pkgs, lib, ... }:
          let
            hostSystem = pkgs.stdenv.hostPlatform.system;
          in
          {
            imports = [ ./modules/sglang-eagle3.nix ];
            # The flake's environments for the host's system, unless the host sets its own.
            services.sglang-eagle3.package = lib.mkDefault (
              self.packages.${hostSystem}.default
                or (throw "sglang-eagle3: this flake builds for ${system} only, not ${hostSystem}; set services.sglang-eagle3.package")
            );
            services.sglang-router.package = lib.mkDefault (
              self.packages.${hostSystem}.sglang-router
                or (throw "sglang-eagle3: this flake builds for ${system} only, not ${hostSystem}; set services.sglang-router.package")
            );
          };
      };

      overlays.default = final: _prev: {
        sglang-eagle3 = (mkStack final null).package;
      };

      formatter.${system} = pkgs.nixfmt-tree;
    };
}
