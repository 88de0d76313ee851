# The run-time environment, from its one definition (nix/runtime-env.json): what SGLang,
# Triton, FlashInfer and PyTorch find at run time by PATH, environment variables and fixed
# paths, beyond the libraries the dynamic linker loads (python-overrides.nix does those).
# Rendered here for every consumer: the sglang-eagle3 wrapper (`nix run`, the NixOS units,
# the GPU check), the dev shell and the server unit's `path`. A stack sees the shared entries
# plus its own additions (the file's "stacks", as sglang_eagle3_audits/runtime_lookups.py stack_env reads it).
{
  pkgs,
  lib,
  cuda,
  # Chosen CUDA capabilities ([ ] = not chosen: torch compiles for the GPUs it sees; FlashInfer
  # always does, as SGLang sets its target from the device).
  cudaCapabilities,
  # The stack (a key of nix/pins.json's "stacks") whose additions apply.
  version,
}:
let
  shared = lib.importJSON ./runtime-env.json;
  own = shared.stacks.${version} or { };
  sections = [
    "programs"
    "libraries"
    "environment"
    "paths"
    "caches" # the NixOS unit's (modules/sglang-eagle3.nix); the wrapper sets none
  ];
  # Defined once: an addition may not redefine a shared entry.
  merge =
    section:
    let
      extra = own.${section} or { };
      twice = lib.attrNames (lib.intersectAttrs extra shared.${section});
    in
    if twice != [ ] then
      throw "nix/runtime-env.json stacks.${version}.${section}: ${lib.concatStringsSep ", " twice} already defined for every stack; define it once"
    else
      shared.${section} // extra;
  spec = lib.genAttrs sections merge;
  cc = cuda.cudaPackages.backendStdenv.cc;

  values = {
    "cuda:toolkit" = "${cuda.toolkit}";
    "cuda:stubs" = cuda.stubs;
    cc = "${cc}/bin/cc";
    cxx = "${cc}/bin/c++";
    "capabilities:torch" = lib.concatStringsSep ";" cudaCapabilities;
    # An rpath to the driver's directory; -Xlinker, as nvcc (which links some modules) takes no -Wl,
    "driver:rpath" = "-Xlinker -rpath=${pkgs.addDriverRunpath.driverLink}/lib";
  };
  chosen = name: !(lib.hasPrefix "capabilities:" spec.environment.${name}.value) || cudaCapabilities != [ ];

  # What puts each program on PATH; "driver" programs come from the host (see below).
  providers = {
    cc = cc;
    "cuda:toolkit" = cuda.toolkit;
  };
  provider =
    from:
    if lib.hasPrefix "nixpkgs:" from then
      lib.getAttrFromPath (lib.splitString "." (lib.removePrefix "nixpkgs:" from)) pkgs
    else
      providers.${from}
        or (throw "nix/runtime-env.json: unknown provider '${from}' (known: driver, nixpkgs:<attr>, ${lib.concatStringsSep ", " (lib.attrNames providers)})");
  fromHost = lib.filterAttrs (_: p: p.from == "driver") spec.programs;
in
rec {
  inherit spec;

  environment = lib.mapAttrs (name: e: values.${e.value} or e.value) (
    lib.filterAttrs (name: _: chosen name) spec.environment
  );

  # Packages whose bin/ goes on PATH, ahead of the caller's.
  path = lib.unique (map (p: provider p.from) (lib.attrValues (lib.filterAttrs (_: p: p.from != "driver") spec.programs)));

  # Programs the host's NVIDIA driver provides (nvidia-smi): on PATH already for a person on
  # any distribution; the NixOS unit adds the driver package's bin/ (its PATH is minimal).
  driverPrograms = lib.attrNames fromHost;

  # Non-NixOS hosts: the driver's libraries are not in /run/opengl-driver/lib; the wrapper
  # links them from the host's library directory first (nix/scripts/host-driver.sh).
  hostDriver = ./scripts/host-driver.sh;

  # makeWrapper arguments: the caller's values win (--set-default), PATH is prefixed.
  wrapperArgs = lib.concatStringsSep " " (
    [
      "--prefix PATH : ${lib.makeBinPath path}"
      "--run '. ${hostDriver}'"
    ]
    ++ lib.mapAttrsToList (k: v: "--set-default ${k} ${lib.escapeShellArg v}") environment
  );
}
