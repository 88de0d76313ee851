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
      pins = import ./nix/pins.nix;

      # nixpkgs with CUDA: unfree allowed, cudaSupport, capabilities 12.0 by default
      # (RTX PRO 6000); pass e.g. [ "9.0" ] for H100/H200.
      mkPkgs =
        {
          system,
          cudaCapabilities ? pins.stack.cudaCapabilities,
        }:
        import nixpkgs {
          inherit system;
          config = {
            allowUnfree = true;
            cudaSupport = true;
            inherit cudaCapabilities;
          };
        };

      mkStack =
        pkgs:
        import ./nix/stack.nix {
          inherit
            pkgs
            lib
            uv2nix
            pyproject-nix
            pyproject-build-systems
            ;
          src = ./.;
        };

      pkgs = mkPkgs { inherit system; };
      stack = mkStack pkgs;

      app = name: args: {
        type = "app";
        program = "${pkgs.writeShellScript name ''exec ${lib.getExe stack.package} ${args} "$@"''}";
        meta.description = "sglang-eagle3 ${args}";
      };
    in
    {
      lib = {
        # The stack for another GPU generation: (lib.mkStack { cudaCapabilities = [ "9.0" ]; }).package
        mkStack = args: mkStack (mkPkgs ({ inherit system; } // args));
        # The GPU A/B gate against other model directories.
        mkGpuCheck =
          args:
          pkgs.callPackage ./nix/gpu-check.nix ({ inherit (stack) package; } // args);
      };

      packages.${system} = {
        default = stack.package;
        sglang-eagle3 = stack.package;
        sglang-wheel = stack.sglangWheel;
        cuda-toolkit = stack.cuda.toolkit;
        # Needs GPUs (system feature "cuda"); deliberately not in `checks`.
        gpu-throughput-check = self.lib.mkGpuCheck { };
      };

      apps.${system} = {
        default = self.apps.${system}.serve-eagle3;
        serve-eagle3 = app "serve-eagle3" "serve";
        bench = app "bench" "bench";
        probe = app "probe" "probe";
      };

      devShells.${system}.default = pkgs.mkShell {
        packages = [
          stack.devEnv
          stack.cuda.toolkit
          pkgs.patch
          pkgs.uv
          pkgs.ruff
          pkgs.nixfmt
        ];
        env = removeAttrs stack.runtimeEnv [ "SGLANG_EAGLE3_PATCHES" ] // {
          UV_NO_SYNC = "1";
          UV_PYTHON = stack.python.interpreter;
          UV_PYTHON_DOWNLOADS = "never";
        };
        # sglang-eagle3 is installed editable from $REPO_ROOT/python (uv2nix's editable
        # overlay), so the shell runs the working tree's code and finds its patches/.
        shellHook = ''
          unset PYTHONPATH
          export REPO_ROOT=$(git rev-parse --show-toplevel)
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
        };
      };

      nixosModules = {
        default = self.nixosModules.sglang-eagle3;
        sglang-eagle3 =
          { pkgs, lib, ... }:
          let
            hostSystem = pkgs.stdenv.hostPlatform.system;
          in
          {
            imports = [ ./modules/sglang-eagle3.nix ];
            # The flake's environment for the host's system, unless the host sets its own.
            services.sglang-eagle3.package = lib.mkDefault (
              self.packages.${hostSystem}.default
                or (throw "sglang-eagle3: this flake builds for ${system} only, not ${hostSystem}; set services.sglang-eagle3.package")
            );
          };
      };

      overlays.default = final: _prev: {
        sglang-eagle3 = (mkStack final).package;
      };

      formatter.${system} = pkgs.nixfmt-tree;
    };
}
