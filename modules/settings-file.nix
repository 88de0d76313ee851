# The content of the server's settings file (`sglang-eagle3 serve --config`): `settings` plus
# the launcher fields that have their own options. A function of the evaluated
# services.sglang-eagle3 configuration: sglang-eagle3.nix writes the file with it, and the
# module checks and the test harness read with it what the file holds.
cfg:
cfg.settings
// {
  nnodes = cfg.nnodes;
  node_rank = cfg.nodeRank;
  dist_init_addr = cfg.distInitAddr;
  extra_args = cfg.extraArgs;
  # The server's variables travel in the settings file, not the unit's Environment=: preflight judges them
  # (SGLang's own checks read them too) and the launcher hands them to SGLang, one path for both.
  environment = cfg.environment;
}
