# Several 8-GPU hosts, each serving a whole Kimi-K2.5 + EAGLE-3 replica (tp 8), behind one
# router host running the router (smg, SGLang's router continued). Add a host to serve more users at the same speed per
# user; see docs/router.md.
#
# A function of the GPU hosts (an attrset name -> address, or just how many), returning one
# NixOS module per host:
#
#   hosts = import ./cluster.nix { gpuHosts = { gpu-a = "10.0.0.11"; gpu-b = "10.0.0.12"; }; };
#   nixosConfigurations = builtins.mapAttrs (name: host: nixpkgs.lib.nixosSystem {
#     system = "x86_64-linux";
#     modules = [ sglang-eagle3.nixosModules.default host ./hardware/${name}.nix ];
#   }) hosts;   # { router = ...; gpu-a = ...; gpu-b = ...; }
{
  # name -> address, or a number N for gpu-1 .. gpu-N at 10.0.0.11, 10.0.0.12, ...
  gpuHosts ? 2,
  port ? 30000,
  # The same key on every host: the router (smg) sends its own key to the workers.
  apiKeyFile ? "/run/secrets/sglang-api-key",
}:
let
  hosts =
    if builtins.isInt gpuHosts then
      builtins.listToAttrs (
        builtins.genList (i: {
          name = "gpu-${toString (i + 1)}";
          value = "10.0.0.${toString (11 + i)}";
        }) gpuHosts
      )
    else
      gpuHosts;

  # Each GPU host is the single-host example, listening on the private network.
  gpuHost = _name: _address: {
    imports = [ ./8-gpu-host.nix ];
    services.sglang-eagle3 = {
      settings.port = port;
      inherit apiKeyFile;
    };
  };

  router = {
    services.sglang-router = {
      enable = true;
      host = "0.0.0.0";
      inherit port apiKeyFile;
      workers = map (address: "http://${address}:${toString port}") (builtins.attrValues hosts);
      policy = "cache_aware"; # conversations stay where their prefix is cached
      openFirewall = true;
      # A replica loads for up to the GPU hosts' settings.ready_timeout (7200 s): keep asking that long.
      workerStartupTimeoutSec = 7200 + 120;
      # Notice a host that went away within seconds, not the default minute.
      healthCheck.intervalSec = 10;
      metrics.host = "0.0.0.0"; # for the Prometheus server; open its port on the private network only
    };
  };
in
{ inherit router; } // builtins.mapAttrs gpuHost hosts
