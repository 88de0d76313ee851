# Tensor parallelism over two 8-GPU hosts (tp 16). This is rank 0; rank 1 is the same
# with nodeRank = 1. Rank 0 serves HTTP; both must reach distInitAddr and each other.
# With nnodes > 1 the module defaults settings.enable_flashinfer_allreduce_fusion to false:
# FlashInfer's all-reduce fusion works within one node only (preflight refuses it on).
{
  services.sglang-eagle3 = {
    enable = true;
    settings = {
      model_path = "/var/lib/models/Kimi-K2.5-NVFP4";
      speculative_draft_model_path = "/var/lib/models/Kimi-K25-eagle3";
      tp_size = 16;
    };
    gpus = [ 0 1 2 3 4 5 6 7 ];
    nnodes = 2;
    nodeRank = 0;
    distInitAddr = "10.0.0.1:50000";
    openRendezvousFirewall = true;
    environment.NCCL_SOCKET_IFNAME = "ens1f0";
  };
  networking.firewall.trustedInterfaces = [ "ens1f0" ];
}
