# OCI images of one stack: the server (`sglang-eagle3 serve`, preflight first, settings from a
# mounted file) and the router (`sglang-eagle3-router`), from the stack's own closure, with
# nixpkgs' dockerTools.streamLayeredImage (docs/kubernetes.md says why not nix2container):
#
#   nix build .#image && ./result | docker load        (or: ./result | skopeo copy docker-archive:/dev/stdin ...)
#
# Layers: streamLayeredImage's default layering (nixpkgs' auto-layer) gives the largest store
# paths layers of their own, each with the dependencies nothing else uses. What a patch touches
# (the patched SGLang package, sglang-eagle3 with its copy of the series, the environment and the
# wrapper) is depended on by no large path, so a patch change rebuilds those layers and the
# customisation layer only; torch, CUDA and the other wheels keep theirs (tests/test_image.py,
# benchmarks/image_layers.py). The image's own files: nix/scripts/image-root.sh.
{
  pkgs,
  lib,
  # nix/stack.nix's result (version, package, routerEnv, series), or nix/tests/image-stand-in.nix's
  stack,
  # The flake's revision, for the label (self.rev, else self.dirtyRev)
  revision,
}:
let
  process = lib.importJSON ../modules/server-process.json;
  pins = import ./pins.nix;
  version = (builtins.fromTOML (builtins.readFile ../python/pyproject.toml)).project.version;
  user = 1000;
  # The image's /bin: a shell and what the wrapper's host-driver.sh runs (awk, ln, mkdir, id); the
  # Kubernetes manifests' credentials init container runs `install`.
  tools = [
    pkgs.bash
    pkgs.coreutils
    pkgs.gawk
  ];

  image =
    {
      name,
      entrypoint,
      cmd ? [ ],
      environment,
      workingDir,
      writable,
      programs,
      labels,
    }:
    let
      config = {
        User = "${toString user}:${toString user}";
        Entrypoint = entrypoint;
        Cmd = cmd;
        Env = lib.mapAttrsToList (k: v: "${k}=${v}") environment;
        WorkingDir = workingDir;
        Labels = {
          "org.opencontainers.image.title" = name;
          "org.opencontainers.image.version" = version;
          "org.opencontainers.image.revision" = revision;
        }
        // labels;
      };
    in
    pkgs.dockerTools.streamLayeredImage {
      inherit name config;
      # No tag of our own: given none, streamLayeredImage tags the image with the hash of its conf.json's store
      # path (nixpkgs pkgs/build-support/docker/default.nix, passthru.imageTag; the stand-in
      # tests/nix/nixpkgs/pkgs/docker/default.nix mirrors it), and conf.json names every layer's store path and
      # the config. So any change to what is in the image (a patch, a lock, a label) gives a new tag, and a
      # node never keeps an old image under a name it already has. `nix eval --raw .#image.imageTag` prints it;
      # docs/kubernetes.md shows how the manifests get it (kustomize `images:`).
      tag = null;
      # Fixed: the same inputs give the same image, byte for byte, whenever it is built.
      created = "1970-01-01T00:00:01Z";
      extraCommands = ''
        bash ${./scripts/image-root.sh} ${toString user} ${workingDir} ${lib.getExe' pkgs.glibc "ldconfig"} \
          ${lib.concatStringsSep "," writable} -- ${toString (map (t: "${lib.getBin t}/bin") tools ++ programs)}
      '';
      passthru = { inherit config; };
    };

  server = lib.getExe' stack.package "sglang-eagle3";
in
{
  server = image {
    name = "sglang-eagle3";
    entrypoint = [
      server
      "serve"
    ];
    cmd = [
      "--config"
      process.settingsFile
    ];
    environment = import ./cache-environment.nix { inherit lib; } // {
      # The toolkit's nvidia-smi lands in /usr/bin (both modes), nvidia-docker 1's in /usr/local/nvidia/bin.
      PATH = "/bin:/usr/bin:/usr/local/nvidia/bin";
      # Unset, the NVIDIA Container Toolkit injects only `utility` (nvidia-smi, NVML): no libcuda.
      NVIDIA_DRIVER_CAPABILITIES = "compute,utility";
    };
    workingDir = process.stateDirectory;
    writable = [
      process.stateDirectory
      process.cacheDirectory
    ];
    programs = [ server ];
    labels = {
      "org.opencontainers.image.description" = "SGLang ${stack.version} with EAGLE-3 for Kimi-K2.5, CUDA ${pins.stack.cuda}";
      "sglang-eagle3.sglang-version" = stack.version;
      "sglang-eagle3.patch-series" = lib.concatStringsSep " " stack.series.names;
      "sglang-eagle3.cuda-version" = pins.stack.cuda;
    };
  };

  router =
    let
      cache = "/var/cache/sglang-router";
      router = lib.getExe' stack.routerEnv "sglang-eagle3-router";
    in
    image {
      name = "sglang-eagle3-router";
      entrypoint = [ router ];
      # services.sglang-router's environment (modules/sglang-router.nix)
      environment = {
        HOME = cache;
        PATH = "/bin";
      };
      workingDir = cache;
      writable = [ cache ];
      programs = [ router ];
      labels."org.opencontainers.image.description" = "The router (smg) in front of SGLang ${stack.version} servers";
    };
}
