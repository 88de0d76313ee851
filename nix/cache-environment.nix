# The environment that points the server's caches at its writable directories: the variables of
# nix/runtime-env.json "caches" (what the code writes, read in the wheels by the lookup audit), each
# placed by its `unit` under modules/server-process.json's state or cache directory. One mapping
# for the NixOS unit and the OCI image; kubernetes/generate.py applies the same rule.
{ lib }:
let
  runtimeEnv = lib.importJSON ./runtime-env.json;
  process = lib.importJSON ../modules/server-process.json;
in
lib.mapAttrs (
  name: c:
  if c.unit == "state" then
    process.stateDirectory
  else if c.unit == "cache" then
    process.cacheDirectory
  else if lib.hasPrefix "cache/" c.unit then
    "${process.cacheDirectory}/${lib.removePrefix "cache/" c.unit}"
  else
    throw "nix/runtime-env.json caches.${name}.unit: '${c.unit}' is not state, cache or cache/<dir>"
) runtimeEnv.caches
