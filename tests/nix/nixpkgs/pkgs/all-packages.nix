# The stand-in package set (what pkgs/top-level/all-packages.nix provides), limited to
# what this project's flake, uv2nix, pyproject.nix and build-system-pkgs use.
{
  lib,
  system,
  config,
}:
self:
let
  stdenv = import ./stdenv.nix { inherit lib config system; };

  # Directories searched for host programs when a leaf package is built here, and the shell
  # that starts the wrappers: the test that assembles the stand-in may write host-tools.json
  # ({ "path": [ ... ], "shell": "/usr/bin/dash" }). A shell by its real path keeps the wrappers
  # runnable in an image's root, whose /bin/sh is the image's own (tests/test_image.py).
  hostTools = if builtins.pathExists ../host-tools.json then builtins.fromJSON (builtins.readFile ../host-tools.json) else { };
  hostPath =
    hostTools.path or [
      "/usr/local/bin"
      "/usr/bin"
      "/bin"
    ];
  hostShell = hostTools.shell or "/bin/sh";

  # A leaf package (a program nixpkgs builds from source). Evaluated like the real one
  # (name, version, its outputs in nixpkgs' order, meta.mainProgram); built here as wrappers
  # of the host's programs, each in the output nixpkgs installs it to, so the derivations
  # around it can run, and fail where a real build would (promtool is in prometheus' `cli`).
  # Each program is a wrapper that finds the host's program when it runs (so a store path
  # built once follows the host's tools), started by its host path: a Python virtual
  # environment is found from the path its interpreter is started by.
  # `hostPrograms pname` writes the wrappers of $programs into $out/bin.
  hostPrograms = pname: hostProgramsInto pname "$out" "$programs";
  hostProgramsInto = pname: dir: programs: ''
    mkdir -p ${dir}/bin
    for program in ${programs}; do
      cat > "${dir}/bin/$program" <<EOS
    #!${hostShell}
    for dir in $hostPath; do
      # not this wrapper itself (an image's /bin links the wrappers, and hostPath may hold /bin)
      if [ -x "\$dir/$program" ] && ! [ "\$dir/$program" -ef "\$0" ]; then exec "\$dir/$program" "\$@"; fi
    done
    echo "nixpkgs stand-in: this host has no '$program' for ${pname} (searched $hostPath)" >&2
    exit 127
    EOS
      chmod +x "${dir}/bin/$program"
    done
  '';

  # hostToolWith { pname; version; outputs; programs = { <output> = [ program ... ]; }; }.
  # As pkgs/build-support/setup-hooks/multiple-outputs.sh does, a `dev` output propagates the
  # outputs holding the programs and libraries (nix-support/propagated-build-inputs), so a
  # package in nativeBuildInputs (which brings in its `dev`, lib.getDev) puts them on PATH.
  hostToolWith =
    {
      pname,
      version,
      outputs ? [ "out" ],
      programs ? { },
    }:
    let
      unknown = lib.subtractLists outputs (builtins.attrNames programs);
      binOutput = if lib.elem "bin" outputs then "bin" else "out";
    in
    assert lib.assertMsg (unknown == [ ]) "nixpkgs stand-in: ${pname} has no output ${toString unknown}";
    stdenv.mkDerivation {
      inherit pname version outputs;
      hostPath = hostPath;
      buildCommand =
        lib.concatMapStrings (o: ''
          mkdir -p "''${${o}}"
        '') outputs
        + lib.concatStrings (
          lib.mapAttrsToList (
            o: ps: lib.optionalString (ps != [ ]) (hostProgramsInto pname "\${${o}}" (toString ps))
          ) programs
        )
        + lib.optionalString (lib.elem "dev" outputs) ''
          mkdir -p "$dev/nix-support"
          echo "''${${binOutput}}" > "$dev/nix-support/propagated-build-inputs"
        '';
      passthru.programsByOutput = programs;
      meta.mainProgram = builtins.head (programs.${binOutput} or [ pname ] ++ [ pname ]);
    };

  # A leaf package with one output, `out`, holding `programs`.
  hostTool =
    pname: version: programs:
    hostToolWith {
      inherit pname version;
      programs.out = programs;
    };

  trivial = import ./trivial-builders.nix { inherit lib stdenv hostTool; };

  # A setup hook package: only its name and the attributes mkDerivation users set matter.
  setupHook =
    name:
    trivial.makeSetupHook { inherit name; } (
      builtins.toFile "${name}.sh" "# ${name}: nixpkgs stand-in (evaluation only)\n"
    );

  # nixpkgs' aliases that warn (pkgs/top-level/aliases.nix); absent when allowAliases is false.
  warnAlias = msg: value: if config.allowAliases then lib.warnOnInstantiate msg value else null;
in
trivial
// {
  inherit lib config stdenv;
  # pkgs/top-level/aliases.nix: `pkgs.system` warns (use stdenv.hostPlatform.system).
  system = lib.warn "'system' has been renamed to/replaced by 'stdenv.hostPlatform.system'" system;
  pkgs = self;
  buildPackages = self;
  pkgsBuildHost = self;
  callPackage = lib.callPackageWith self;
  newScope = extra: lib.callPackageWith (self // extra);

  fetchurl = import ./fetchurl.nix {
    inherit lib stdenv;
    inherit (self) curl;
  };

  # pkgs/shells/bash/5.nix (`bash = callPackage ../shells/bash/5.nix { }`): outputs out dev man
  # doc info, and debug (separateDebugInfo); bin/bash in out (the image's /bin, the stand-in
  # image's wrapper).
  bash = hostToolWith {
    pname = "bash";
    version = "5.3";
    outputs = [
      "out"
      "dev"
      "man"
      "doc"
      "info"
      "debug"
    ];
    programs.out = [ "bash" ];
  };
  # pkgs/tools/misc/coreutils/default.nix: outputs out info, and debug (separateDebugInfo); the
  # programs the flake's derivations and the image's /bin use, all in out.
  coreutils = hostToolWith {
    pname = "coreutils";
    version = "9.8";
    outputs = [
      "out"
      "info"
      "debug"
    ];
    programs.out = [
      "basename"
      "cat"
      "chmod"
      "cp"
      "cut"
      "dirname"
      "env"
      "false"
      "head"
      "id"
      "install"
      "ln"
      "ls"
      "mkdir"
      "mv"
      "readlink"
      "rm"
      "sleep"
      "true"
    ];
  };
  # pkgs/tools/text/gawk/default.nix: outputs out info man (not interactive); bin/awk and
  # bin/gawk in out (nix/image.nix links them into the image's /bin).
  gawk = hostToolWith {
    pname = "gawk";
    version = "5.3.2";
    outputs = [
      "out"
      "info"
      "man"
    ];
    programs.out = [
      "awk"
      "gawk"
    ];
  };
  # pkgs/development/libraries/glibc/common.nix and default.nix: outputs out bin dev static
  # getent, and debug (separateDebugInfo); ldconfig is installed to $bin/sbin (sbindir) and
  # moved to $bin/bin by stdenv's _moveSbin hook (lib.getExe' glibc "ldconfig").
  glibc = hostToolWith {
    pname = "glibc";
    version = "2.40-66";
    outputs = [
      "out"
      "bin"
      "dev"
      "static"
      "getent"
      "debug"
    ];
    programs.bin = [ "ldconfig" ];
  };
  # pkgs/build-support/docker (streamLayeredImage) and dockerAutoLayer: ./docker/default.nix says what is mirrored.
  inherit (self.callPackage ./docker { }) dockerAutoLayer;
  dockerTools = {
    inherit (self.callPackage ./docker { }) streamLayeredImage;
  };
  # pkgs/by-name/cu/curl/package.nix, an override of curlMinimal (pkgs/by-name/cu/curlMinimal/
  # package.nix): outputs bin dev out man devdoc, and debug (separateDebugInfo); bin/curl in bin.
  # fetchurl's nativeBuildInputs take its dev, which propagates bin onto the builder's PATH.
  curl = hostToolWith {
    pname = "curl";
    version = "8.17.0";
    outputs = [
      "bin"
      "dev"
      "out"
      "man"
      "devdoc"
      "debug"
    ];
    programs.bin = [ "curl" ];
  };
  git = hostTool "git" "2.52.0" [ "git" ];
  gnupatch = hostTool "patch" "2.8" [ "patch" ];
  patch = self.gnupatch;
  # pkgs/by-name/jq/jq/package.nix: outputs bin doc man dev out, jq in bin.
  jq = hostToolWith {
    pname = "jq";
    version = "1.8.1";
    outputs = [
      "bin"
      "doc"
      "man"
      "dev"
      "out"
    ];
    programs.bin = [ "jq" ];
  };
  nix = hostTool "nix" "2.31.2" [
    "nix"
    "nix-instantiate"
    "nix-store"
  ];
  # pkgs/by-name/ni/nixfmt; `nixfmt-rfc-style` is an alias that warns on use
  # (pkgs/top-level/aliases.nix); nixfmt-tree wraps it in treefmt for `nix fmt`.
  nixfmt = hostTool "nixfmt" "1.2.0" [ "nixfmt" ];
  nixfmt-rfc-style = warnAlias "nixfmt-rfc-style is now the same as pkgs.nixfmt which should be used instead." self.nixfmt;
  nixfmt-tree = hostTool "nixfmt-tree" "1.2.0" [ "treefmt" ];
  # pkgs/by-name/ni/ninja/package.nix
  ninja = hostTool "ninja" "1.13.2" [ "ninja" ];
  # pkgs/by-name/nu/numactl/package.nix: outputs out dev man.
  numactl = hostToolWith {
    pname = "numactl";
    version = "2.0.19";
    outputs = [
      "out"
      "dev"
      "man"
    ];
    programs.out = [ "numactl" ];
  };
  # pkgs/by-name/pr/prometheus/package.nix: outputs out, doc, cli; `moveToOutput bin/promtool $cli`.
  prometheus = hostToolWith {
    pname = "prometheus";
    version = "3.9.1";
    outputs = [
      "out"
      "doc"
      "cli"
    ];
    programs = {
      out = [ "prometheus" ];
      cli = [ "promtool" ];
    };
  };
  ruff = hostTool "ruff" "0.14.14" [ "ruff" ];
  # pkgs/os-specific/linux/systemd/default.nix: outputs out man dev.
  systemd = hostToolWith {
    pname = "systemd";
    version = "258.3";
    outputs = [
      "out"
      "man"
      "dev"
    ];
    programs.out = [ "systemd-analyze" ];
  };
  ugrep = hostTool "ugrep" "7.5.0" [ "ugrep" ];
  unzip = hostTool "unzip" "6.0" [ "unzip" ];
  uv = hostTool "uv" "0.9.28" [ "uv" ];
  # pkgs/development/libraries/zlib/default.nix: outputs out dev static.
  zlib = hostToolWith {
    pname = "zlib";
    version = "1.3.1";
    outputs = [
      "out"
      "dev"
      "static"
    ];
  };
  findutils = hostTool "findutils" "4.10.0" [ "find" ];
  gnugrep = hostTool "gnugrep" "3.12" [ "grep" ];
  gnused = hostTool "gnused" "4.9" [ "sed" ];
  glibcLocales = hostTool "glibc-locales" "2.40-66" [ ];
  tzdata = hostTool "tzdata" "2025b" [ ];
  mesa = hostTool "mesa" "25.3.3" [ ];
  grafana = hostTool "grafana" "12.3.2" [ "grafana" ];
  # pkgs/by-name/pr/prometheus-node-exporter/package.nix (commit 0145c6da): pname node_exporter, 1.12.0.
  prometheus-node-exporter = hostTool "node_exporter" "1.12.0" [ "node_exporter" ];
  nix-required-mounts = hostTool "nix-required-mounts" "0.0.1" [ "nix-required-mounts" ];
  # pkgs/os-specific/linux/nvidia-x11/default.nix via linuxPackages.nvidiaPackages; generic.nix
  # gives the driver a `bin` output with nvidia-smi (what lib.getBin picks).
  linuxPackages =
    let
      driver =
        version:
        (hostTool "nvidia-x11" version [ ])
        // {
          inherit version;
          bin = hostTool "nvidia-x11-bin" version [ "nvidia-smi" ];
          open = hostTool "nvidia-open" version [ ];
        };
    in
    {
      kernel = hostTool "linux" "6.12.68" [ ];
      nvidiaPackages = rec {
        production = driver "580.126.09";
        latest = driver "590.48.01";
        stable = production;
        beta = latest;
        dc = driver "580.126.09";
      };
    };

  makeWrapper = setupHook "make-shell-wrapper-hook";
  # pkgs/build-support/setup-hooks/auto-patchelf.sh: reads autoPatchelfIgnoreMissingDeps,
  # appendRunpaths, runtimeDependencies; provides addAutoPatchelfSearchPath.
  autoPatchelfHook = setupHook "auto-patchelf-hook";
  # pkgs/development/cuda-modules/packages/autoAddDriverRunpath.nix
  autoAddDriverRunpath = setupHook "auto-add-driver-runpath-hook";
  addDriverRunpath = {
    driverLink = "/run/opengl-driver";
  };

  # pkgs/development/interpreters/python/manylinux/default.nix
  pythonManylinuxPackages =
    let
      libs = [
        stdenv.cc.cc.lib
        self.zlib
      ];
    in
    {
      manylinux1 = libs;
      manylinux2010 = libs;
      manylinux2014 = libs;
    };

  # pkgs/top-level/all-packages.nix: the interpreters of pkgs/development/interpreters/python,
  # and `python3 = python313;` (the default since NixOS 25.05).
  python312 = import ./python.nix {
    inherit lib stdenv hostTool;
    sourceVersion = {
      major = "3";
      minor = "12";
      patch = "12";
      suffix = "";
    };
  };
  python313 = import ./python.nix {
    inherit lib stdenv hostTool;
    sourceVersion = {
      major = "3";
      minor = "13";
      patch = "11";
      suffix = "";
    };
  };
  python3 = self.python313;
  python312Packages = self.python312.pkgs;
  python313Packages = self.python313.pkgs;
  python3Packages = self.python313.pkgs;

  cudaPackages_13_0 = import ./cuda.nix {
    inherit lib config stdenv;
    inherit hostPath hostPrograms;
    # pkgs/build-support/cc-wrapper: the gcc nvcc 13.0 supports, wrapped (finds its own
    # assembler and linker); cuda-modules/packages/backendStdenv.nix picks it.
    backendCc = hostTool "gcc-wrapper" "14.3.0" [
      "cc"
      "c++"
      "gcc"
      "g++"
    ];
    cudaMajorMinorPatchVersion = "13.0.2";
  };
  cudaPackages = self.cudaPackages_13_0;

  testers = import ./testers.nix {
    inherit lib;
    pkgs = self;
  };
}
