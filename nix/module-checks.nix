# The NixOS module, evaluated with the real NixOS module system in example hosts (the
# 8-GPU host, rank 0 of a two-host deployment, and broken configurations). Each check
# inspects the generated unit and the assertions; no GPU needed.
{
  pkgs,
  lib,
  nixpkgs,
  module,
  package,
}:
let
  evalHost =
    modules:
    nixpkgs.lib.nixosSystem {
      system = "x86_64-linux";
      modules = [
        module
        { services.sglang-eagle3.package = package; }
      ]
      ++ modules;
    };
  failedAssertions =
    host: map (a: a.message) (lib.filter (a: !a.assertion) host.config.assertions);
  unitFile = host: name: "${host.config.systemd.units.${name}.unit}/${name}";

  host8 = evalHost [ ../modules/examples/8-gpu-host.nix ];
  twoNode = evalHost [ ../modules/examples/two-node.nix ];
  broken = {
    "needs distInitAddr" = evalHost [
      ../modules/examples/two-node.nix
      { services.sglang-eagle3.distInitAddr = lib.mkForce null; }
    ];
    "GPUs per host" = evalHost [
      ../modules/examples/8-gpu-host.nix
      { services.sglang-eagle3.gpus = lib.mkForce [ 0 1 2 3 ]; }
    ];
    "must be below nnodes" = evalHost [
      ../modules/examples/two-node.nix
      { services.sglang-eagle3.nodeRank = lib.mkForce 2; }
    ];
  };
in
{
  module-8-gpu-host =
    pkgs.runCommand "sglang-eagle3-module-8-gpu-host"
      {
        nativeBuildInputs = [
          pkgs.systemd
          pkgs.jq
        ];
        unit = unitFile host8 "sglang-eagle3.service";
        bench = unitFile host8 "sglang-eagle3-bench.service";
        failed = builtins.toJSON (failedAssertions host8);
        ports = builtins.toJSON host8.config.networking.firewall.allowedTCPPorts;
        mounts = builtins.toJSON host8.config.programs.nix-required-mounts.allowedPatterns.sglang-eagle3-models.paths;
      }
      ''
        set -x
        [ "$failed" = "[]" ]
        grep -qx 'Type=notify' $unit
        grep -qx 'LoadCredential=api-key:/run/secrets/sglang-api-key' $unit
        grep -q  'CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7' $unit
        grep -qx 'PrivateDevices=false' $unit
        grep -qx 'ProtectSystem=strict' $unit
        grep -qx 'LimitMEMLOCK=infinity' $unit
        ! grep -q 'MemoryDenyWriteExecute' $unit
        grep -q '^After=.*sglang-eagle3.service' $bench
        [ "$ports" = "[30000]" ]
        [ "$mounts" = '["/var/lib/models/Kimi-K2.5-NVFP4","/var/lib/models/Kimi-K25-eagle3"]' ]
        # The settings file the launcher reads: the tuned defaults plus the host's values.
        settings=$(grep -o -- '--config [^ ]*' $unit | cut -d' ' -f2)
        jq -e '.tp_size == 8 and .speculative_algorithm == "EAGLE3"' $settings
        jq -e '.model_path == "/var/lib/models/Kimi-K2.5-NVFP4"' $settings
        jq -e 'has("api_key_file") | not' $settings
        systemd-analyze verify --man=no --recursive-errors=no $unit
        systemd-analyze security --offline=true $unit | tail -1
        touch $out
      '';

  module-two-node =
    pkgs.runCommand "sglang-eagle3-module-two-node"
      {
        nativeBuildInputs = [ pkgs.jq ];
        unit = unitFile twoNode "sglang-eagle3.service";
        failed = builtins.toJSON (failedAssertions twoNode);
        ports = builtins.toJSON twoNode.config.networking.firewall.allowedTCPPorts;
      }
      ''
        [ "$failed" = "[]" ]
        [ "$ports" = "[50000]" ]
        settings=$(grep -o -- '--config [^ ]*' $unit | cut -d' ' -f2)
        jq -e '.nnodes == 2 and .node_rank == 0 and .dist_init_addr == "10.0.0.1:50000"' $settings
        touch $out
      '';

  # Each broken host must fail with the expected assertion message.
  module-assertions =
    let
      results = lib.mapAttrs (expected: host: lib.any (lib.hasInfix expected) (failedAssertions host)) broken;
    in
    pkgs.runCommand "sglang-eagle3-module-assertions" { results = builtins.toJSON results; } ''
      echo "$results"
      ! echo "$results" | grep -q false
      touch $out
    '';
}
