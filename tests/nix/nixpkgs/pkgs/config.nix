# nixpkgs' `config`, evaluated as pkgs/top-level/config.nix does: a module with declared
# options (the ones this project reads) and a freeform rest. The defaults matter:
# `cudaCapabilities` defaults to [ ] (so `pkgs.config.cudaCapabilities or X` never
# falls back to X), `cudaSupport` and `allowUnfree` to false.
{ lib, config }:
let
  inherit (lib) mkOption types;
  declarations = {
    _file = "nixpkgs/pkgs/top-level/config.nix (stand-in)";
    freeformType = types.attrsOf types.raw;
    options = {
      allowUnfree = mkOption {
        type = types.bool;
        default = false;
      };
      allowAliases = mkOption {
        type = types.bool;
        default = true;
      };
      cudaSupport = mkOption {
        type = types.bool;
        default = false;
      };
      cudaCapabilities = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      cudaForwardCompat = mkOption {
        type = types.bool;
        default = true;
      };
      rocmSupport = mkOption {
        type = types.bool;
        default = false;
      };
    };
  };
  evaluated = lib.evalModules {
    class = "nixpkgsConfig";
    modules = [
      declarations
      {
        _file = "nixpkgs.config";
        inherit config;
      }
    ];
  };
in
evaluated.config
