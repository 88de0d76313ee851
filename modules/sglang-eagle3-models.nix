# services.sglang-eagle3.models: the model weights pinned by lock files
# (`sglang-eagle3 models lock REPO@REV --output x.lock.json`), fetched and verified by a
# oneshot unit before the server starts. The server then loads those local directories
# with the hub offline (HF_HUB_OFFLINE=1): it never downloads and never sees the token.
#
# Imported by sglang-eagle3.nix.
{ config, lib, ... }:
let
  inherit (lib) mkOption types literalExpression;
  top = config.services.sglang-eagle3;
  cfg = top.models;
  process = lib.importJSON ./server-process.json;
  modelsDir = process.modelsDirectory;
  staticUser = top.user != null;
  # The server's sandbox (the same program runs here), with PrivateDevices: no GPU needed.
  hardening = import ./hardening.nix;

  modelOption =
    role: example:
    mkOption {
      default = { };
      description = "The ${role} model, pinned by its lock file.";
      type = types.submodule (
        { config, ... }:
        {
          options = {
            lockFile = mkOption {
              type = types.nullOr types.path;
              default = null;
              example = literalExpression "./locks/${example}.lock.json";
              description = ''
                The model's lock (`sglang-eagle3 models lock`): repository, commit, and every
                file's size and sha256. Copied to the store (it holds no secret). When set, the
                server's settings point at the fetched directory.
              '';
            };
            name = mkOption {
              type = types.nullOr (types.strMatching "[A-Za-z0-9][A-Za-z0-9._-]*");
              default =
                if config.lockFile == null then
                  null
                else
                  baseNameOf (builtins.fromJSON (builtins.readFile config.lockFile)).repo;
              defaultText = literalExpression "the repository name in the lock, e.g. \"${example}\"";
              description = "Directory under ${modelsDir} the model is fetched into.";
            };
          };
        }
      );
    };

  # The configured models as { role, lockFile, dir, settings }, target first.
  models = lib.filter (m: m.lockFile != null) [
    {
      role = "target";
      inherit (cfg.target) lockFile;
      dir = "${modelsDir}/${toString cfg.target.name}";
      pathSetting = "model_path";
      revisionSetting = "revision";
    }
    {
      role = "draft";
      inherit (cfg.draft) lockFile;
      dir = "${modelsDir}/${toString cfg.draft.name}";
      pathSetting = "speculative_draft_model_path";
      revisionSetting = "speculative_draft_model_revision";
    }
  ];
  exe = lib.getExe top.package;
  # fetch downloads what is missing or wrong (resuming partial downloads), verify checks all of it.
  commands = m: [
    "${exe} models fetch --lock ${m.lockFile} --dir ${m.dir} --jobs ${toString cfg.jobs}"
    "${exe} models verify --lock ${m.lockFile} --dir ${m.dir}${lib.optionalString (cfg.verify == "quick") " --quick"}"
  ];
in
{
  options.services.sglang-eagle3.models = {
    target = modelOption "target" "Kimi-K2.5-NVFP4";
    draft = modelOption "EAGLE-3 draft" "Kimi-K25-eagle3";

    tokenFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = null;
      example = "/run/secrets/hf-token";
      description = ''
        File holding a Hugging Face token, for gated or private repositories, as an absolute
        path string (never copied to the store). Delivered to the models unit only, with
        LoadCredential; the server never sees it.
      '';
    };

    verify = mkOption {
      type = types.enum [
        "full"
        "quick"
      ];
      default = "full";
      description = ''
        What the models unit checks after fetching, each time it starts: "full" hashes every
        file (minutes for 600 GB on NVMe), "quick" compares sizes only (fetch has already
        hashed what it downloaded).
      '';
    };

    jobs = mkOption {
      type = types.ints.between 1 64;
      default = 8;
      description = "Files downloaded in parallel.";
    };

    environment = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = {
        HF_ENDPOINT = "https://hf-mirror.example.org";
        HTTPS_PROXY = "http://proxy:3128";
      };
      description = "Extra environment of the models unit (a mirror, a proxy). Not for the token: see tokenFile.";
    };
  };

  config = lib.mkIf (top.enable && models != [ ]) {
    assertions =
      map (m: {
        assertion = top.settings.${m.revisionSetting} == null;
        message = "services.sglang-eagle3: settings.${m.revisionSetting} is set, but models.${m.role}.lockFile pins that model by its lock; remove settings.${m.revisionSetting}.";
      }) models
      ++ [
        {
          assertion = lib.length (lib.unique (map (m: m.dir) models)) == lib.length models;
          message = "services.sglang-eagle3: models.target and models.draft would both be fetched into ${modelsDir}/${toString cfg.target.name}; give one of them another name (models.draft.name).";
        }
      ];

    # The server loads the fetched directories.
    services.sglang-eagle3.settings = lib.listToAttrs (map (m: lib.nameValuePair m.pathSetting m.dir) models);

    systemd.services.sglang-eagle3-models = {
      description = "Fetch and verify the SGLang EAGLE-3 model weights pinned by their locks";
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      # Writable places only: huggingface_hub's caches (Xet chunks included) go to the cache directory.
      environment = cfg.environment // process.modelsEnvironment;
      serviceConfig =
        hardening.base
        // hardening.cuda
        // {
          Type = "oneshot";
          # Stays active: the server Requires= it, and a new lock restarts both.
          RemainAfterExit = true;
          ExecStart = lib.concatMap commands models;
          # The server's user, so the server reads what this unit writes. A DynamicUser's
          # name is its unit's name unless User= says otherwise.
          DynamicUser = !staticUser;
          User = if staticUser then top.user else "sglang-eagle3";
          StateDirectory = "sglang-eagle3/models";
          CacheDirectory = "sglang-eagle3";
          LoadCredential = lib.optional (cfg.tokenFile != null) "hf-token:${cfg.tokenFile}";
          # A first download of 600 GB takes hours; huggingface_hub's read timeouts end a stalled one.
          TimeoutStartSec = "infinity";
        }
        // lib.optionalAttrs staticUser { Group = top.group; };
    };

    systemd.services.sglang-eagle3 = {
      requires = [ "sglang-eagle3-models.service" ];
      after = [ "sglang-eagle3-models.service" ];
      environment.HF_HUB_OFFLINE = "1";
      # The weights are verified; the server only reads them.
      serviceConfig.ReadOnlyPaths = [ modelsDir ];
    };
  };
}
