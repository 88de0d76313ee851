# The systemd sandbox of every unit of these modules, written once. `base` is what each unit
# starts from; a unit adds the layers it needs and nothing else:
#
#   sglang-eagle3 (the server)          base // cuda // gpu
#   sglang-eagle3-bench, -models        base // cuda
#   sglang-router                       base // router
#
# A layer only relaxes (cuda, gpu) or only tightens (router) what base says, each entry with
# its reason. Imported by sglang-eagle3.nix, sglang-eagle3-models.nix and sglang-router.nix;
# tests/test_hardening.py checks every rendered unit against it.
rec {
  base = {
    CapabilityBoundingSet = [ "" ];
    # No device nodes beyond the pseudo devices PrivateDevices gives; where a layer lifts
    # PrivateDevices (gpu), only what it lists in DeviceAllow.
    DevicePolicy = "closed";
    LockPersonality = true;
    NoNewPrivileges = true;
    PrivateDevices = true;
    PrivateIPC = true;
    PrivateMounts = true;
    PrivateTmp = true;
    PrivateUsers = true;
    ProcSubset = "pid";
    ProtectClock = true;
    ProtectControlGroups = true;
    ProtectHome = true;
    ProtectHostname = true;
    ProtectKernelLogs = true;
    ProtectKernelModules = true;
    ProtectKernelTunables = true;
    ProtectProc = "invisible";
    ProtectSystem = "strict";
    RemoveIPC = true;
    RestrictAddressFamilies = [
      "AF_INET"
      "AF_INET6"
      "AF_UNIX"
    ];
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [
      "@system-service"
      "~@privileged"
    ];
    UMask = "0077";
    # No MemoryDenyWriteExecute here: PyTorch, Triton and FlashInfer JIT-compile kernels and
    # need writable executable memory. The router adds it.
  };

  # Relaxations for the units that run the sglang-eagle3 program (PyTorch, CUDA, NCCL): the
  # server, and the benchmark and models units, which run the same program.
  cuda = {
    # psutil and torch read /proc/meminfo and /proc/cpuinfo.
    ProcSubset = "all";
    # AF_NETLINK: NCCL finds its network interfaces with getifaddrs(), which uses netlink.
    RestrictAddressFamilies = base.RestrictAddressFamilies ++ [ "AF_NETLINK" ];
    # @resources: CUDA and NCCL set NUMA policies and CPU affinity (mbind, sched_setaffinity).
    SystemCallFilter = [
      "@system-service @resources"
      "~@privileged"
    ];
  };

  # Relaxations for the server, which drives the GPUs.
  gpu = {
    # PrivateDevices would hide /dev/nvidia*.
    PrivateDevices = false;
    # Under base's DevicePolicy=closed, NVIDIA's devices only.
    DeviceAllow = [
      "char-nvidiactl"
      "char-nvidia-caps"
      "char-nvidia-frontend"
      "char-nvidia-uvm"
    ];
    # NCCL pins host buffers for GPU transfers.
    LimitMEMLOCK = "infinity";
  };

  # Tightenings for the router: a Rust network proxy with no GPU and no JIT.
  router = {
    # sglang-router compiles nothing at run time: no writable executable memory.
    MemoryDenyWriteExecute = true;
    # Nor does it set NUMA policies or CPU affinity: the @resources calls are refused too.
    SystemCallFilter = [
      "@system-service"
      "~@privileged @resources"
    ];
  };
}
