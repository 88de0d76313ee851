"""Generate the Kubernetes manifests in this folder from the definitions the NixOS unit is made of.

    .venv/bin/python kubernetes/generate.py            # write them
    .venv/bin/python kubernetes/generate.py --check    # exit 1 when a committed file differs
    .venv/bin/python kubernetes/generate.py --target-lock my-target.lock.json --draft-lock my-draft.lock.json

What comes from where (one definition each; tests/test_kubernetes.py proves the manifests agree with the
evaluated NixOS unit on argv, environment and probes):
- the settings file: every field of python/src/sglang_eagle3/serving/settings.py at its default (as the
  module's `settings` options are; for several nodes, its multi-node default where it has one, as the module
  sets it: settings.multi_node_defaults()), the few set here (host, model directories, tp_size, nnodes), and
  the fields the module owns (modules/settings-file.nix);
- environment, state and cache directories, the supervisor's grace: modules/server-process.json;
- the weights: the model locks (`sglang-eagle3 models lock`), fetched by one init container per model
  into /var/lib/sglang-eagle3/models/<repository name>, as services.sglang-eagle3.models does;
- the API key: a Secret, copied by an init container into a memory volume that CREDENTIALS_DIRECTORY
  names, as systemd's LoadCredential hands it to the unit (the launcher reads it the same way);
- probes: the launcher's readiness URL (/health_generate) and ready_timeout, SGLang's /health, timed from each stack's
  health handler (STACKS);
- alert rules: modules/monitoring (the same files the monitoring module loads);
- securityContext: modules/hardening.nix, key by key as kubernetes/hardening.json maps it;
- the router: services.sglang-router's defaults (its command line, environment and stop grace), but for its
  servers, which it finds itself (smg's Kubernetes service discovery, ROUTER_DISCOVERY);
- the GPU nodes (placement, requests, images, the Prometheus release): Cluster, every field an option of this script.

Layout (kustomize base and overlays; every file is plain YAML, `kubectl apply -k kubernetes/one-node`):
  base/        model locks, NetworkPolicy
  monitoring/  a kustomize Component: ServiceMonitors and the PrometheusRule (needs the Prometheus Operator's CRDs;
               add it with `components: [../monitoring]` in a kustomization of yours, docs/kubernetes.md)
  rdma/        a kustomize Component for multi-node/: NCCL over InfiniBand or RoCE (an RDMA device, IPC_LOCK)
  one-node/    settings, a StatefulSet of one-node replicas (8 GPUs each), the router in front
  multi-node/  settings, a LeaderWorkerSet (two 8-GPU nodes per replica, tp 16), the router in front
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import yaml
from sglang_eagle3 import redaction, stacks
from sglang_eagle3.models import ModelsError, lockfile
from sglang_eagle3.serving import credentials, launch_plan, settings

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROCESS = json.loads((REPO / "modules" / "server-process.json").read_text())
CACHES = json.loads((REPO / "nix" / "runtime-env.json").read_text())["caches"]
HARDENING = json.loads((HERE / "hardening.json").read_text())
MONITORING = REPO / "modules" / "monitoring"
EXAMPLE_LOCKS = {
    "target": REPO / "nix/tests/example-target.lock.json",
    "draft": REPO / "nix/tests/example-draft.lock.json",
}

NAME = "sglang-eagle3"
# The oldest release of each controller whose CRD takes every field the manifests use, read from the projects' own
# tags (tests/test_kubernetes.py validates against these and shows the release before each refuses them):
# LeaderWorkerSet's leaderWorkerTemplate.volumeClaimTemplates is in its CRD from v0.8.0 on (v0.7.0's refuses it);
# the ServiceMonitor's fallbackScrapeProtocol from prometheus-operator v0.80.0 on (v0.79.0's lacks it).
MINIMUM_VERSIONS = {
    "lws": {
        "repo": "kubernetes-sigs/lws", "minimum": "v0.8.0", "before": "v0.7.0",
        "kinds": ["LeaderWorkerSet"], "field": "volumeClaimTemplates",
    },
    "prometheus-operator": {
        "repo": "prometheus-operator/prometheus-operator", "minimum": "v0.80.0", "before": "v0.79.0",
        "kinds": ["ServiceMonitor", "PrometheusRule"], "field": "fallbackScrapeProtocol",
    },
}  # fmt: skip
ROUTER = "sglang-router"
# The images nix/image.nix builds (`nix build .#image`, `.#image-0_5_23`, `.#router-image`). Their tags are
# the hash of their content (`nix eval --raw .#image.imageTag`): a new patch series is a new tag. The manifests
# name them with a tag that is no image's, so that a pod never starts an image nobody chose: set the real one with
# kustomize `images:` (newName: your registry, newTag: the imageTag, or digest once pushed), or with
# generate.py --image / --router-image. A tag names one content, so IfNotPresent is the right pull policy.
IMAGE_UNSET = "sglang-eagle3:unset-sglang-{sglang}-set-by-kustomize-images"
ROUTER_IMAGE_UNSET = "sglang-eagle3-router:unset-set-by-kustomize-images"
PULL_POLICY = "IfNotPresent"
USER = 1000  # the images' user (nix/image.nix)
GPUS_PER_NODE = 8
HTTP_PORT = settings.default("port")
ROUTER_METRICS_PORT = 29000  # services.sglang-router.metrics.port's default
RENDEZVOUS_PORT = 20000  # rank 0's torch.distributed rendezvous (LeaderWorkerSet's SGLang example)
# SGLang --dist-timeout: how long torch.distributed's rendezvous waits for the other ranks (0.5.9
# srt/model_executor/model_runner.py:804-811, init_distributed_environment's timeout). It does not cover the fetch:
# a pod starts SGLang once every member of its group has verified weights (GROUP_GATE), so the ranks start
# within seconds of each other. Once loading, SGLang fails when ranks finish more than 480 s apart (:245
# UNBALANCED_MODEL_LOADING_TIMEOUT_S, its monitored_barrier at :1072): each rank reads its own disk.
DIST_TIMEOUT = 1800
SETTINGS_FILE = PROCESS["settingsFile"]  # where the image looks for its settings (nix/image.nix)
CONFIG_DIR = str(Path(SETTINGS_FILE).parent)
LOCKS_DIR = "/etc/sglang-eagle3-locks"
SECRETS_DIR = "/run/secrets/sglang-eagle3"  # the Secret, as Kubernetes mounts it (group-readable)
CREDENTIALS_DIR = "/run/credentials/sglang-eagle3"  # the key copied private to the server's user
DNS_PORTS = (53, 5353)  # the DNS pods' ports a NetworkPolicy sees (kube-dns/CoreDNS 53; OpenShift's DNS 5353)
NODE_LOCAL_DNS = "169.254.20.10/32"  # NodeLocal DNSCache's default listen address (the node's, not a pod's)
WEIGHTS_SIZE = "1200Gi"  # Kimi-K2.5 NVFP4 (~600 GB) and the draft, with room for a second revision
SHM_SIZE = "32Gi"
PROBE_PERIOD = 30  # seconds between startup probes
# SGLang's health handler, per stack (nix/stacks/sglang-<version>/http-server.json): where it is, SGLang's health-check
# wait (SGLANG_HEALTH_CHECK_TIMEOUT, default 20) and its watchdog (--watchdog-timeout, default 300). A probe's timeout
# must exceed that wait, or a slow but healthy server fails it before SGLang has answered; liveness allows longer than
# the watchdog, which ends a forward batch that hangs and says why.
STACKS = {
    version: json.loads((REPO / stack.data / "http-server.json").read_text())
    for version, stack in stacks.stacks().items()
}
LIVENESS_PERIOD = 60
# A LeaderWorkerSet group starts SGLang only when every member's weights are verified: each pod's
# `weights-verified` sidecar starts only after its fetch containers have hashed every file against the lock, and
# answers on this port; `wait-for-group`, the next init container, waits until every member's does. The sidecar is
# an init container with restartPolicy Always, active by default from Kubernetes 1.29; the kubelet starts the
# next init container once it runs (kubernetes.io/docs/concepts/workloads/pods/sidecar-containers). gawk and
# bash are in the image's /bin (nix/image.nix `tools`).
GROUP_GATE_PORT = 20001
GROUP_GATE_LISTEN = (
    f'BEGIN {{ while (1) {{ s = "/inet/tcp/{GROUP_GATE_PORT}/0/0"; print "verified" |& s; close(s) }} }}'
)
# The members: the leader (LWS_LEADER_ADDRESS, `<set>-<group>.<subdomain>.<namespace>`: kubernetes-sigs/lws v0.8.0
# pkg/utils/pod/pod_utils.go:143-146) and workers 1..size-1, each `<leader>-<index>` in the leader's subdomain
# (pkg/utils/accelerators/tpu.go:158); LeaderWorkerSet's headless Service publishes pods before they are ready
# (PublishNotReadyAddresses: pkg/utils/controller/controller_utils.go:50).
GROUP_GATE_WAIT = f"""\
leader=${{LWS_LEADER_ADDRESS%%.*}} domain=${{LWS_LEADER_ADDRESS#*.}}
members=("$LWS_LEADER_ADDRESS")
for ((i = 1; i < LWS_GROUP_SIZE; i++)); do members+=("$leader-$i.$domain"); done
for member in "${{members[@]}}"; do
  echo "waiting for $member's weights to be verified"
  until (exec 3<>"/dev/tcp/$member/{GROUP_GATE_PORT}") 2>/dev/null; do sleep 5; done
  echo "$member: weights verified"
done
"""
FETCH_JOBS = 8  # `models fetch --jobs`: files fetched and hashed at once, one core each


# -- the cluster: what the GPU nodes have (each field an option of this script; defaults: the tuned host) -------


@dataclass(frozen=True)
class Cluster:
    """What the operator's GPU nodes have, in the NVIDIA GPU Operator's words. The defaults are the tuned host's:
    8x NVIDIA RTX PRO 6000 Blackwell (96 GB, SM120, PCIe) per node, the GPU Operator's own names."""

    # GPU Feature Discovery's `nvidia.com/gpu.product` label: NVML's device name, spaces turned into '-' and any
    # character outside [A-Za-z0-9-_. ] dropped (NVIDIA/k8s-device-plugin internal/lm/resource.go, getProductName
    # and sanitise, commit aaccdfd2). The RTX PRO 6000 Blackwell editions' names; `kubectl get nodes
    # -L nvidia.com/gpu.product` shows what your nodes carry.
    gpu_products: tuple[str, ...] = (
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
    )
    # `nvidia.com/gpu.memory`: one GPU's total memory in MiB as NVML reports it (same file, GetTotalMemoryMB).
    # Kimi-K2.5 NVFP4 is ~600 GB over 8 GPUs (75 GB each before the KV cache and the draft): the 96 GB cards pass,
    # 80 GB-class cards do not, so a pod cannot land on them and fail after hours of fetching.
    min_gpu_memory_mib: int = 90000
    # The taint GPU nodes carry; the GPU Operator's own daemonsets tolerate `nvidia.com/gpu` (Exists, NoSchedule)
    # (NVIDIA/gpu-operator deployments/gpu-operator/values.yaml, daemonsets.tolerations, commit d7413be9).
    gpu_taint: str = "nvidia.com/gpu"
    # The RuntimeClass the GPU Operator creates (values.yaml operator.runtimeClass: nvidia, same commit). Needed
    # where nvidia is not containerd's default runtime (CDI mode); "" leaves runtimeClassName out (a cluster
    # without that RuntimeClass refuses pods naming it).
    runtime_class: str = "nvidia"
    # Host memory one scheduler process (one per GPU) holds besides the GPU's: the CUDA context, torch and its
    # libraries, NCCL's pinned buffers. An estimate, not a measurement: compare with `kubectl top pod` and set it.
    host_memory_per_gpu_gib: int = 12
    # Where the images are: registry/name:tag or @digest ("": a placeholder for kustomize `images:`, above).
    image: str = ""
    router_image: str = ""
    # The SGLang stack of the image (nix/image.nix: `.#image` is 0.5.9, `.#image-0_5_23` 0.5.23): its image and
    # the probes its health handler calls for (STACKS).
    sglang: str = stacks.default().version
    # kube-prometheus-stack's default selectors pick ServiceMonitors and PrometheusRules labelled
    # `release: <its Helm release name>`: the monitoring component's objects carry it.
    prometheus_release: str = "kube-prometheus-stack"
    # The API server's addresses (CIDRs) the router's egress may reach on API_SERVER_PORTS; none: any address on those
    # ports. `kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes` lists them (and the
    # `kubernetes` Service's clusterIP, where the CNI applies the policy before the Service's translation).
    api_server_cidrs: tuple[str, ...] = ()
    # "burstable": the server pods request CPU and memory and set no limit on them (a limit reached during a two-hour
    # load would throttle or kill it). "guaranteed": every container's limits equal its requests, in whole CPUs for
    # the server, so that the pods are the last evicted under memory pressure and the kubelet's static CPU manager
    # gives the server exclusive cores (which its topology manager can align with the GPUs' NUMA nodes).
    qos: str = "burstable"
    # The RDMA component's device resource, an extended resource name: by default the k8s-rdma-shared-dev-plugin's,
    # which the NVIDIA Network Operator deploys (see RDMA_ENV).
    rdma_resource: str = "rdma/rdma_shared_device_a"

    def check(self) -> None:
        """Refuse values Kubernetes would refuse later, or that place nothing, with the option to change."""
        label_value = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
        dns_label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
        problems = [f"--gpu-product {p!r} is not a label value" for p in self.gpu_products if not label_value.match(p)]
        if not self.gpu_products:
            problems.append("--gpu-product: name at least one GPU product")
        if self.min_gpu_memory_mib <= 0 or self.host_memory_per_gpu_gib <= 0:
            problems.append("--min-gpu-memory-mib and --host-memory-per-gpu-gib must be positive")
        if self.runtime_class and not dns_label.match(self.runtime_class):
            problems.append(f'--runtime-class {self.runtime_class!r} is not a RuntimeClass name (or "" for none)')
        for option, ref in (("--image", self.image), ("--router-image", self.router_image)):
            if ref and not re.search(r"(:[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$", ref.rsplit("/", 1)[-1]):
                problems.append(f"{option} {ref!r} names no tag or digest (it would mean :latest)")
        if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                        self.rdma_resource) or "/" not in self.rdma_resource:  # fmt: skip
            problems.append(f"--rdma-resource {self.rdma_resource!r} is not an extended resource name (vendor/name)")
        if self.qos not in QOS_CLASSES:
            problems.append(f"--qos {self.qos!r}: one of {', '.join(QOS_CLASSES)}")
        if self.sglang not in STACKS:
            problems.append(f"--sglang {self.sglang!r}: one of {', '.join(STACKS)}")
        for cidr in self.api_server_cidrs:
            try:
                ipaddress.ip_network(cidr)
            except ValueError:
                problems.append(f"--api-server-cidr {cidr!r} is not a CIDR (10.0.0.1/32, fd00::1/128)")
        if not label_value.match(self.prometheus_release):
            problems.append(f"--prometheus-release {self.prometheus_release!r} is not a label value")
        if problems:
            raise SystemExit("kubernetes/generate.py: " + "; ".join(problems))


def server_image(cluster: Cluster) -> str:
    return cluster.image or IMAGE_UNSET.format(sglang=cluster.sglang)


def router_image(cluster: Cluster) -> str:
    return cluster.router_image or ROUTER_IMAGE_UNSET


def probes(cluster: Cluster, values: dict, health: str) -> dict:
    """rank 0's probes, from its stack's health handler (STACKS): startup and readiness ask /health_generate (a token
    can be generated, as the launcher waits for), liveness /health (the same handler)."""
    stack = STACKS[cluster.sglang]
    # the settings' environment may change SGLang's wait (SGLANG_HEALTH_CHECK_TIMEOUT, read by the handler's module)
    wait = int(values["environment"].get("SGLANG_HEALTH_CHECK_TIMEOUT", stack["health_check_timeout"][1]))
    timeout = wait + 5  # SGLang's own verdict (200, or 503 after `wait`) arrives before the kubelet gives up
    watchdog = stack["watchdog_timeout"][1]
    return {
        # a first start loads 600 GB, JIT-compiles kernels and captures CUDA graphs: as long as the unit waits
        "startupProbe": {**http_get(health), "periodSeconds": PROBE_PERIOD, "timeoutSeconds": timeout,
                         "failureThreshold": math.ceil(startup_budget(values) / PROBE_PERIOD)},
        "readinessProbe": {**http_get(health), "periodSeconds": 15, "timeoutSeconds": timeout, "failureThreshold": 3},
        # restarted only after SGLang's watchdog would have ended a hung batch, and then some
        "livenessProbe": {**http_get("/health"), "periodSeconds": LIVENESS_PERIOD, "timeoutSeconds": timeout,
                          "failureThreshold": math.ceil(2 * watchdog / LIVENESS_PERIOD)},
    }  # fmt: skip


QOS_CLASSES = ("burstable", "guaranteed")


def sized(requests: dict[str, str], cluster: Cluster, limits: dict | None = None) -> dict:
    """A container's resources: its requests, and under Guaranteed QoS limits equal to them (Kubernetes gives a pod
    that class only when every container, init containers included, has CPU and memory limits equal to its
    requests: kubernetes/kubernetes pkg/apis/core/helper/qos/qos.go)."""
    limits = {**(requests if cluster.qos == "guaranteed" else {}), **(limits or {})}
    return {"requests": requests, **({"limits": limits} if limits else {})}


def server_resources(cluster: Cluster) -> dict:
    """What a server pod asks of its node. Burstable (the default): no CPU or memory limit, one reached during a
    two-hour load would throttle or kill it. Guaranteed (--qos guaranteed): limits equal to the requests. How the
    requests are sized:
    - CPU: one SGLang scheduler process per GPU, each polling its queues on one core unless --sleep-on-idle (off by
      default: 0.5.9 srt/server_args.py:366, srt/managers/scheduler.py:449), plus the tokenizer and the
      detokenizer: whole CPUs, which the static CPU manager needs to give them exclusive cores;
    - memory: the /dev/shm tmpfs (a Memory emptyDir counts against the pod's memory) and, per GPU, the scheduler
      process's host memory (Cluster.host_memory_per_gpu_gib: an estimate, see docs/kubernetes.md)."""
    shm_gib = int(SHM_SIZE.removesuffix("Gi"))
    memory = shm_gib + GPUS_PER_NODE * cluster.host_memory_per_gpu_gib
    requests = {"cpu": str(GPUS_PER_NODE + 2), "memory": f"{memory}Gi"}
    return sized(requests, cluster, {"nvidia.com/gpu": GPUS_PER_NODE})


# What the small helper containers ask: the credentials copy, the group gate's listener and its wait.
SMALL = {"cpu": "10m", "memory": "16Mi"}


def placement(cluster: Cluster) -> dict:
    """Where a server pod may run: nodes whose GPUs are the product and size the settings are tuned for (GPU Feature
    Discovery's labels), tainted for GPUs, with the GPU Operator's runtime."""
    terms = [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": list(cluster.gpu_products)},
        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [str(cluster.min_gpu_memory_mib)]},
    ]
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": terms}]}}},
        "tolerations": [{"key": cluster.gpu_taint, "operator": "Exists", "effect": "NoSchedule"}],
    }  # fmt: skip
    if cluster.runtime_class:
        spec["runtimeClassName"] = cluster.runtime_class
    return spec


# Fields services.sglang-eagle3 sets through options of its own (modules/sglang-eagle3.nix ownedFields):
# settings-file.nix adds nnodes, node_rank, dist_init_addr, extra_args and ready_timeout; the secrets' files
# (credentials.SECRET_ARGS: API keys, the TLS key's password) are not in the file (LoadCredential). The
# environment is: preflight judges it there and the launcher passes it to SGLang, as the unit's does.
NOT_IN_FILE = tuple(secret.setting for secret in credentials.SECRET_ARGS)
# Variables Kubernetes expands in args from the LeaderWorkerSet's (kubernetes-sigs/lws,
# site/content/en/docs/reference/labels-annotations-and-environment-variables.md).
LWS_LEADER, LWS_SIZE, LWS_INDEX = "$(LWS_LEADER_ADDRESS)", "$(LWS_GROUP_SIZE)", "$(LWS_WORKER_INDEX)"
# NCCL and Gloo over the pod network of PCIe/Ethernet hosts: the pod's interface, no InfiniBand.
MULTI_NODE_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}
# The RDMA component (kubernetes/rdma/, for InfiniBand or RoCE between a group's nodes): NCCL's InfiniBand transport on
# (its bootstrap and Gloo stay on eth0), an RDMA device from the device plugin the cluster runs (Cluster.rdma_resource,
# --rdma-resource), and IPC_LOCK, which lets the process pin the memory it registers with the NIC beyond
# RLIMIT_MEMLOCK. IPC_LOCK is outside both Pod Security "restricted" and "baseline" (kubernetes/kubernetes
# staging/src/k8s.io/pod-security-admission/policy/check_capabilities_baseline.go allows 13 capabilities, not it):
# the namespace must be "privileged".
RDMA_ENV = {**MULTI_NODE_ENV, "NCCL_IB_DISABLE": "0"}
RDMA_CAPABILITY = "IPC_LOCK"
# services.sglang-router (modules/sglang-router.nix) at its defaults, listening beyond loopback.
ROUTER_ARGS = [
    "--host", "0.0.0.0", "--port", str(HTTP_PORT), "--policy", "cache_aware", "--cache-threshold", "0.300000",
    "--balance-abs-threshold", "64", "--balance-rel-threshold", "1.500000", "--prometheus-host", "0.0.0.0",
    "--prometheus-port", str(ROUTER_METRICS_PORT), "--request-timeout-secs", "1800",
    "--shutdown-grace-period-secs", "180", "--worker-startup-timeout-secs", "7320",
    "--worker-startup-check-interval", "30", "--load-monitor-interval", "10", "--health-check-endpoint", "/health",
    "--health-check-interval-secs", "60", "--health-check-timeout-secs", "5", "--health-failure-threshold", "3",
    "--health-success-threshold", "2", "--log-level", "info", "--disable-tokenizer-autoload",
    "--retry-max-retries", "5",
    "--retry-initial-backoff-ms", "50", "--retry-max-backoff-ms", "30000", "--retry-backoff-multiplier", "1.500000",
    "--retry-jitter-factor", "0.200000", "--cb-failure-threshold", "10", "--cb-success-threshold", "3",
    "--cb-timeout-duration-secs", "60", "--cb-window-duration-secs", "120",
]  # fmt: skip
# The router finds its servers itself (smg's Kubernetes service discovery, the same flags as sglang-router's): its
# reflector lists and watches the pods of its namespace that match the selector (each replica's rank 0), and its
# reconciler routes to http://<pod IP>:<port> of each pod that is Running, Ready and not being deleted (its
# readiness probe: the model is loaded), and drains and removes any other (smg-project/smg
# model_gateway/src/service_discovery/kubernetes.rs compute_desired_state, reconciler.rs). A replica that loads for
# hours is added when it is ready, not given up on. tests/test_router_discovery.py walks it through every kind of
# event a cluster sends; docs/kubernetes.md, "How the router follows the cluster", says in what time. Without a
# namespace it would watch the whole cluster (a ClusterRole): it is given its own, from the Downward API.
ROUTER_SELECTOR = {**{"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "server"}, f"{NAME}/rank": "0"}
ROUTER_DISCOVERY = [
    "--service-discovery", "--selector", *[f"{k}={v}" for k, v in ROUTER_SELECTOR.items()],
    "--service-discovery-port", str(HTTP_PORT), "--service-discovery-namespace", "$(POD_NAMESPACE)",
]  # fmt: skip
# What the discovery needs of the API, and nothing more: list and watch on pods, in its namespace (smg's reflector
# gets no single pod; the stand-in API of tests/test_router_discovery.py grants only these).
ROUTER_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
# The API server as a NetworkPolicy sees it: the `kubernetes` Service's port (443) and, where the CNI applies the
# policy after the Service's translation, the API server's own (6443, kubeadm's default). The router reaches it by
# address (KUBERNETES_SERVICE_HOST, which the kubelet always sets), and its servers by pod IP: it needs no DNS.
API_SERVER_PORTS = (443, 6443)
# Two routers behind the Service, on different nodes where there are several: a node drained or lost leaves one
# serving (one router was a single point of failure in front of replicas that each take up to 2 h to reload). Each
# router keeps its own cache-aware prefix tree, so the Service keeps each client on one router (ClientIP affinity)
# and a conversation on the server that has its prefix cached.
ROUTER_REPLICAS = 2
# Measured with benchmarks/router_overhead.py (docs/router.md, "The router pod's resources"): smg's resident memory
# and CPU at concurrency 16; the limits leave room for a larger prefix tree (cache-aware) and bursts.
ROUTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
ROUTER_CACHE = "/var/cache/sglang-router"
ROUTER_STOP_GRACE = 180 + 15  # the unit's TimeoutStopSec: shutdownGracePeriodSec + 15


@dataclass(frozen=True)
class Layout:
    folder: str
    nnodes: int
    replicas: int

    @property
    def tp_size(self) -> int:
        return GPUS_PER_NODE * self.nnodes


ONE_NODE = Layout("one-node", nnodes=1, replicas=2)
MULTI_NODE = Layout("multi-node", nnodes=2, replicas=1)


# -- what the unit is made of ----------------------------------------------------------------------------


def model_dir(lock: Path) -> str:
    """Where services.sglang-eagle3.models fetches a lock's model: the repository's name under the models dir."""
    return f"{PROCESS['modelsDirectory']}/{json.loads(lock.read_text())['repo'].rsplit('/', 1)[-1]}"


def settings_file(layout: Layout, locks: dict[str, Path], environment: dict[str, str] | None = None) -> dict:
    """The settings file, as modules/settings-file.nix renders it for the same host configuration."""
    chosen = {
        "host": "0.0.0.0",
        "model_path": model_dir(locks["target"]),
        "speculative_draft_model_path": model_dir(locks["draft"]),
        "tp_size": layout.tp_size,
    }
    values = {name: settings.default(name) for name in settings.ServerSettings.model_fields if name not in NOT_IN_FILE}
    values.update(
        chosen, nnodes=layout.nnodes, node_rank=0, dist_init_addr=None, ready_timeout=int(values["ready_timeout"])
    )
    if layout.nnodes > 1:
        values["extra_args"] = ["--dist-timeout", str(DIST_TIMEOUT)]
        values["environment"] = dict(environment or MULTI_NODE_ENV)
        # Settings SGLang keeps to one node (FlashInfer's all-reduce fusion), as services.sglang-eagle3 sets them
        # for nnodes > 1: preflight refuses the fusion across nodes.
        values.update(settings.multi_node_defaults())
    # What the launcher will load is valid (several nodes: once LeaderWorkerSet's leader fills dist_init_addr).
    settings.ServerSettings(**{**values, "dist_init_addr": values["dist_init_addr"] or f"leader:{RENDEZVOUS_PORT}"})
    return dict(sorted(values.items()))


def cache_environment() -> dict[str, str]:
    """nix/runtime-env.json's cache variables placed under server-process.json's directories, as
    nix/cache-environment.nix places them for the unit and the image."""
    base = {"state": PROCESS["stateDirectory"], "cache": PROCESS["cacheDirectory"]}
    env = {}
    for name, cache in CACHES.items():
        root, _, below = cache["unit"].partition("/")
        if root not in base or (root == "state" and below):
            unit = cache["unit"]
            raise SystemExit(f"nix/runtime-env.json caches.{name}.unit: {unit!r} is not state, cache or cache/<dir>")
        env[name] = f"{base[root]}/{below}" if below else base[root]
    return env


def server_env() -> dict[str, str]:
    """The unit's environment (the caches; HF_HUB_OFFLINE from the models module, the weights being locked)
    plus where the credential is."""
    return {**cache_environment(), "HF_HUB_OFFLINE": "1", "CREDENTIALS_DIRECTORY": CREDENTIALS_DIR}


def startup_budget(values: dict) -> int:
    """Seconds the startup probe allows: the launcher's ready_timeout and the supervisor's grace (the unit's
    TimeoutStartSec), so the launcher's own timeout, which says why, ends a slow start first."""
    return math.ceil(values["ready_timeout"]) + PROCESS["startGraceSec"]


def stop_grace(values: dict) -> int:
    """The unit's TimeoutStopSec: the launcher's stop_timeout and the supervisor's grace."""
    return math.ceil(values["stop_timeout"]) + PROCESS["stopGraceSec"]


# -- Kubernetes objects ------------------------------------------------------------------------------------


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": component}


def env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


def _expressed(level: str) -> dict:
    """The securityContext fields (``pod`` or ``container``) hardening.json maps modules/hardening.nix to."""
    context: dict = {}
    for entry in [*HARDENING["systemd"].values(), HARDENING["always"]]:
        context.update(entry.get(level) or {})
    return dict(sorted(context.items()))


def security_context() -> dict:
    return _expressed("container")


def pod_security() -> dict:
    # fsGroup: the weights volume is written by the fetch containers as this user; OnRootMismatch keeps a
    # restart from walking 600 GB to change their group again.
    own = {"runAsUser": USER, "runAsGroup": USER, "fsGroup": USER, "fsGroupChangePolicy": "OnRootMismatch"}
    return {**own, **_expressed("pod")}


def http_get(path: str, port: str = "http") -> dict:
    return {"httpGet": {"path": path, "port": port}}


def mount(name: str, path: str, read_only: bool = False) -> dict:
    return {"name": name, "mountPath": path, **({"readOnly": True} if read_only else {})}


def credentials_init(image: str, cluster: Cluster) -> dict:
    """systemd's LoadCredential, the Kubernetes way: the Secret (mounted group-readable) copied into a memory
    volume, private to the server's user, where the launcher finds it ($CREDENTIALS_DIRECTORY/api-key)."""
    return {
        "name": "credentials",
        "image": image,
        "imagePullPolicy": PULL_POLICY,
        "command": ["install", "-m", "0400", f"{SECRETS_DIR}/api-key", f"{CREDENTIALS_DIR}/api-key"],
        "resources": sized(SMALL, cluster),
        "securityContext": security_context(),
        "volumeMounts": [mount("api-key", SECRETS_DIR, True), mount("credentials", CREDENTIALS_DIR)],
    }


def fetch_init(role: str, lock: Path, image: str, cluster: Cluster) -> dict:
    """`sglang-eagle3 models fetch` against the lock: every file hashed against it before it is put in place."""
    return {
        "name": f"fetch-{role}",
        "image": image,
        "imagePullPolicy": PULL_POLICY,
        "command": ["sglang-eagle3"],
        "args": [
            "models",
            "fetch",
            "--lock",
            f"{LOCKS_DIR}/{role}.lock.json",
            "--dir",
            model_dir(lock),
            "--jobs",
            str(FETCH_JOBS),
        ],
        "env": env_list(PROCESS["modelsEnvironment"]),
        # one core per file being fetched and hashed; its buffers are small (streamed to disk)
        "resources": sized({"cpu": str(FETCH_JOBS), "memory": "2Gi"}, cluster),
        "securityContext": security_context(),
        "volumeMounts": [
            mount("model-locks", LOCKS_DIR, True),
            mount("weights", PROCESS["modelsDirectory"]),
            mount("cache", PROCESS["cacheDirectory"]),
            mount("tmp", "/tmp"),
        ],
    }


def server_container(layout: Layout, values: dict, leader: bool, cluster: Cluster) -> dict:
    args = ["--config", SETTINGS_FILE]
    if layout.nnodes > 1:
        args += ["--set", f"nnodes={LWS_SIZE}", "--set", f"node_rank={LWS_INDEX}",
                 "--set", f"dist_init_addr={LWS_LEADER}:{RENDEZVOUS_PORT}"]  # fmt: skip
    health = urlparse(launch_plan.health_url(settings.ServerSettings(**{**values, "nnodes": 1}))).path
    container = {
        "name": "server",
        "image": server_image(cluster),
        "imagePullPolicy": PULL_POLICY,
        "args": args,
        "env": env_list(server_env()),
        "ports": [{"name": "http", "containerPort": HTTP_PORT}]
        + ([{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}] if layout.nnodes > 1 else []),
        "resources": server_resources(cluster),
        "securityContext": security_context(),
        "volumeMounts": [
            mount("settings", CONFIG_DIR, True),
            mount("credentials", CREDENTIALS_DIR, True),
            mount("weights", PROCESS["modelsDirectory"], True),
            mount("state", PROCESS["stateDirectory"]),
            mount("cache", PROCESS["cacheDirectory"]),
            mount("tmp", "/tmp"),
            mount("shm", "/dev/shm"),
        ],
    }
    if leader:
        # Rank 0 serves HTTP (probes: STACKS, probes()). Workers (rank > 0) answer both
        # paths with a dummy 200 whatever their state
        # (launch_dummy_health_check_server: 0.5.9 srt/utils/common.py:2656-2677, 0.5.23 :3624): they get no HTTP probe;
        # RecreateGroupOnPodRestart restarts the group when any pod of it fails.
        container.update(probes(cluster, values, health))
    return container


def group_gate(image: str, cluster: Cluster) -> list[dict]:
    """The init containers that hold a LeaderWorkerSet pod until every member of its group has verified weights."""
    small = sized(SMALL, cluster)
    sidecar = {
        "name": "weights-verified",
        "image": image,
        "imagePullPolicy": PULL_POLICY,
        "command": ["gawk", GROUP_GATE_LISTEN],
        "restartPolicy": "Always",  # a sidecar: started after the fetches, kept running beside the server
        "ports": [{"name": "weights", "containerPort": GROUP_GATE_PORT}],
        "resources": small,
        "securityContext": security_context(),
    }
    wait = {
        "name": "wait-for-group",
        "image": image,
        "imagePullPolicy": PULL_POLICY,
        "command": ["bash", "-c", GROUP_GATE_WAIT],
        "resources": small,
        "securityContext": security_context(),
    }
    return [sidecar, wait]


def server_pod(layout: Layout, values: dict, locks: dict[str, Path], leader: bool, cluster: Cluster) -> dict:
    """A server pod; its `weights` volume is the claim of the StatefulSet's or LeaderWorkerSet's template."""
    volumes = [
        {"name": "settings", "configMap": {"name": f"{NAME}-settings"}},
        {"name": "model-locks", "configMap": {"name": f"{NAME}-model-locks"}},
        {"name": "api-key", "secret": {"secretName": f"{NAME}-api-key", "defaultMode": 0o440}},
        {"name": "credentials", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": "state", "emptyDir": {}},
        {"name": "cache", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
    ]
    return {
        "metadata": {"labels": {**labels("server"), **({f"{NAME}/rank": "0"} if leader else {})}},
        "spec": {
            "securityContext": pod_security(),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": stop_grace(values),
            "initContainers": [credentials_init(server_image(cluster), cluster)]
            + [fetch_init(role, lock, server_image(cluster), cluster) for role, lock in locks.items()]
            + (group_gate(server_image(cluster), cluster) if layout.nnodes > 1 else []),
            "containers": [server_container(layout, values, leader, cluster)],
            "volumes": volumes,
            **placement(cluster),
        },
    }


def weights_claim() -> dict:
    return {
        "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": WEIGHTS_SIZE}}},
    }


def settings_configmap(values: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-settings", "labels": labels("server")},
        "data": {"settings.json": json.dumps(values, indent=2) + "\n"},
    }


def server_service(name: str, selector: dict) -> dict:
    """A headless Service: the pods' DNS names for the router, their metrics endpoints for Prometheus."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels("server")},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # the router and Prometheus see a loading server too
            "selector": selector,
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}],
        },
    }


def disruption_budget() -> dict:
    """At most one server pod unavailable for a voluntary eviction (a node drain, an upgrade). One node: of the two
    replicas, one keeps serving. Several nodes: evicting either pod of a LeaderWorkerSet group recreates the whole
    group (RecreateGroupOnPodRestart), so the group's pods all go unready and the budget, which counts pods, has no room
    left until the group is back: one group is disrupted at a time, never two (with two or more groups one keeps
    serving; with one group, any drain of its nodes is an outage of up to two hours: docs/kubernetes.md). Not 0, which
    would block every drain; not the group size, which would let two groups go at once. A pod that is not Ready serves
    nothing: it may always be evicted (AlwaysAllow), so a crash-looping pod cannot block a drain (Kubernetes' own
    advice, kubernetes.io/docs/tasks/run-application/configure-pdb, unhealthy pod eviction policy)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": NAME, "labels": labels("server")},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels("server")},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }  # fmt: skip


def one_node(locks: dict[str, Path], cluster: Cluster) -> list[dict]:
    values = settings_file(ONE_NODE, locks)
    pod = server_pod(ONE_NODE, values, locks, leader=True, cluster=cluster)
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME, "labels": labels("server")},
        "spec": {
            "serviceName": NAME,
            "replicas": ONE_NODE.replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels("server")},
            "template": pod,
            "volumeClaimTemplates": [weights_claim()],
        },
    }
    return [settings_configmap(values), statefulset, server_service(NAME, labels("server")), disruption_budget()]


def multi_node(locks: dict[str, Path], cluster: Cluster) -> list[dict]:
    layout = MULTI_NODE
    values = settings_file(layout, locks)
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": NAME, "labels": labels("server")},
        "spec": {
            "replicas": layout.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": layout.nnodes,
                # rank 0 stays up when another rank dies (sgl-project/sglang #3099): restart the whole group
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": server_pod(layout, values, locks, leader=True, cluster=cluster),
                "workerTemplate": server_pod(layout, values, locks, leader=False, cluster=cluster),
                # each pod's own weights, kept when the group is recreated (as a StatefulSet's claims)
                "volumeClaimTemplates": [weights_claim()],
            },
        },
    }
    # The LeaderWorkerSet's own headless Service (named after it) gives the pods their DNS names; this one
    # selects the leaders, for Prometheus.
    leaders = {**labels("server"), f"{NAME}/rank": "0"}
    return [settings_configmap(values), lws, server_service(f"{NAME}-leaders", leaders), disruption_budget()]


def router(layout: Layout, cluster: Cluster) -> list[dict]:
    env = {"HOME": ROUTER_CACHE, "CREDENTIALS_DIRECTORY": CREDENTIALS_DIR}
    init = credentials_init(router_image(cluster), cluster)
    container = {
        "name": "router",
        "image": router_image(cluster),
        "imagePullPolicy": PULL_POLICY,
        "args": [*ROUTER_ARGS, *ROUTER_DISCOVERY],
        # $(POD_NAMESPACE) in the args: the pod's own namespace (Downward API)
        "env": env_list(env)
        + [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT},
            {"name": "metrics", "containerPort": ROUTER_METRICS_PORT},
        ],
        "resources": ROUTER_RESOURCES,
        "readinessProbe": {**http_get("/readiness"), "periodSeconds": 10, "timeoutSeconds": 5},
        "livenessProbe": {**http_get("/liveness"), "periodSeconds": 30, "timeoutSeconds": 5, "failureThreshold": 3},
        "securityContext": security_context(),
        "volumeMounts": [
            mount("credentials", CREDENTIALS_DIR, True),
            mount("cache", ROUTER_CACHE),
            mount("tmp", "/tmp"),
        ],
    }
    # the routers on different nodes where there are several
    apart = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
        "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels("router")}}}]}  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "spec": {
            "replicas": ROUTER_REPLICAS,
            # a new router is ready before an old one goes: an update never leaves fewer than ROUTER_REPLICAS
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "selector": {"matchLabels": labels("router")},
            "template": {
                "metadata": {"labels": labels("router")},
                "spec": {
                    "securityContext": pod_security(),
                    "affinity": {"podAntiAffinity": apart},
                    "serviceAccountName": ROUTER,
                    "automountServiceAccountToken": True,  # the discovery's client reads the token
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": ROUTER_STOP_GRACE,
                    "initContainers": [init],
                    "containers": [container],
                    "volumes": [
                        {"name": "api-key", "secret": {"secretName": f"{NAME}-api-key", "defaultMode": 0o440}},
                        {"name": "credentials", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                        {"name": "cache", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "spec": {
            "selector": labels("router"),
            # each client on one router, whose cache-aware tree knows its conversations (3 h, Kubernetes' default)
            "sessionAffinity": "ClientIP",
            "ports": [
                {"name": "http", "port": HTTP_PORT, "targetPort": "http"},
                {"name": "metrics", "port": ROUTER_METRICS_PORT, "targetPort": "metrics"},
            ],  # fmt: skip
        },
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "automountServiceAccountToken": False,
    }  # only the router's pod mounts it, which asks for it
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "rules": ROUTER_RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROUTER},
        # No namespace: a RoleBinding's ServiceAccount subject without one is the account of the binding's own
        # namespace (kubernetes/kubernetes pkg/registry/rbac/validation/rule.go appliesToUser; its validation requires
        # one only of a ClusterRoleBinding). So it follows the namespace the objects are applied in, however chosen:
        # `kubectl apply -n`, a kustomization's `namespace:`, an Argo CD or Flux destination.
        "subjects": [{"kind": "ServiceAccount", "name": ROUTER}],
    }  # fmt: skip
    # One router may go at a time (a drain, an upgrade): the other keeps serving.
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": ROUTER, "labels": labels("router")},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels("router")},
                 "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    }  # fmt: skip
    return [deployment, service, account, role, binding, budget]


def model_locks(locks: dict[str, Path]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-model-locks", "labels": labels("server")},
        "data": {f"{role}.lock.json": lock.read_text() for role, lock in locks.items()},
    }


def relabel_job(job: str) -> list[dict]:
    """The scrape job's name the alert rules select on (modules/monitoring/sglang-eagle3-alerts.yml)."""
    return [{"targetLabel": "job", "replacement": job, "action": "replace"}]


def service_monitor(name: str, component: str, release: dict, endpoints: list[dict], **spec) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "labels": {**labels(component), **release}},
        "spec": {"selector": {"matchLabels": labels(component)}, **spec, "endpoints": endpoints},
    }


def scrape(port: str, path: str, job: str, **extra) -> dict:
    return {"port": port, "path": path, "interval": "15s", **extra, "relabelings": relabel_job(job)}


def monitoring(cluster: Cluster) -> list[dict]:
    """The monitoring component (kubernetes/monitoring/, a kustomize Component, not in the overlays: its kinds
    need the Prometheus Operator's CRDs, from MINIMUM_VERSIONS["prometheus-operator"] on)."""
    # kube-prometheus-stack's default selectors ask for `release: <its release name>`
    # (prometheus-community/helm-charts charts/kube-prometheus-stack/templates/prometheus/prometheus.yaml,
    # serviceMonitorSelector and ruleSelector with ...NilUsesHelmValues, commit 1514b965); that version's
    # ruleSelector also asks for `app: <the chart's name>`, kube-prometheus-stack unless renamed.
    release = {"release": cluster.prometheus_release}
    server = service_monitor(
        NAME, "server", release,
        [scrape("http", "/metrics", NAME),
         # /health_generate as a target: `up` is 0 while it fails (SGLangServerNotReady)
         scrape("http", "/health_generate", f"{NAME}-health", scrapeTimeout="10s")],
        # /health_generate answers with an empty body and no Content-Type (the module's scrape config too)
        fallbackScrapeProtocol="PrometheusText0.0.4",
    )  # fmt: skip
    router_monitor = service_monitor(ROUTER, "router", release, [scrape("metrics", "/metrics", ROUTER)])
    groups = []
    for rules in ("sglang-eagle3-alerts.yml", "sglang-eagle3-thresholds.yml"):
        groups += yaml.safe_load((MONITORING / rules).read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": NAME, "labels": {**labels("server"), **release, "app": "kube-prometheus-stack"}},
        "spec": {"groups": groups},
    }
    return [server, router_monitor, rule]


def network_policies(cluster: Cluster) -> list[dict]:
    """Who may talk to whom: clients to the router, the router and Prometheus to the servers, the ranks of a
    replica among themselves (NCCL opens connections on ephemeral ports); out: the servers reach DNS, the ranks,
    and HTTPS for the model fetch (the hub and its CDN); the router reaches only the servers' HTTP port and the API
    server (by address: no DNS; it fetches nothing, --disable-tokenizer-autoload)."""
    server, router_pods = labels("server"), labels("router")
    prometheus = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    # DNS: the cluster's DNS pods (a policy sees the pod's own port: 53, or 5353 where the DNS pods listen there
    # behind the Service's 53, as OpenShift's do) and NodeLocal DNSCache, which answers on a link-local address
    # of the node itself (no pod: only an ipBlock admits it).
    dns_ports = [{"protocol": p, "port": n} for n in DNS_PORTS for p in ("UDP", "TCP")]
    dns = {"to": [{"namespaceSelector": {}}, {"ipBlock": {"cidr": NODE_LOCAL_DNS}}], "ports": dns_ports}
    from_servers = {"from": [{"podSelector": {"matchLabels": server}}]}
    api_server = {"ports": [tcp(p) for p in API_SERVER_PORTS]}
    if cluster.api_server_cidrs:
        api_server = {"to": [{"ipBlock": {"cidr": c}} for c in cluster.api_server_cidrs], **api_server}
    to_servers = {"to": [{"podSelector": {"matchLabels": server}}]}
    return [
        network_policy(
            NAME, server,
            ingress=[{"from": [{"podSelector": {"matchLabels": router_pods}}, prometheus], "ports": [tcp(HTTP_PORT)]},
                     from_servers],
            egress=[dns, to_servers, {"ports": [tcp(443)]}],
        ),
        network_policy(
            ROUTER, router_pods,
            ingress=[{"ports": [tcp(HTTP_PORT)]}, {"from": [prometheus], "ports": [tcp(ROUTER_METRICS_PORT)]}],
            egress=[{**to_servers, "ports": [tcp(HTTP_PORT)]}, api_server],
        ),
    ]  # fmt: skip


def tcp(port: int) -> dict:
    return {"protocol": "TCP", "port": port}


def network_policy(name: str, pods: dict, ingress: list[dict], egress: list[dict]) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "labels": pods},
        "spec": {
            "podSelector": {"matchLabels": pods},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": egress,
        },
    }


def kustomization(resources: list[str]) -> dict:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": resources}


def component(resources: list[str]) -> dict:
    """A kustomize Component: added to an overlay by `components:` (kustomize v3.7.0 and later:
    kubectl.docs.kubernetes.io/guides/config_management/components)."""
    return {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "resources": resources}


# -- files ---------------------------------------------------------------------------------------------------

HEADER = "# Generated by kubernetes/generate.py; do not edit (change the definitions it reads, then run it).\n"


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def _text(dumper, value: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def dump(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)


def render(objects: list[dict]) -> str:
    return HEADER + "---\n".join(yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120) for o in objects)


def rdma(locks: dict[str, Path], cluster: Cluster) -> dict:
    """The RDMA component: patches of the multi-node overlay's LeaderWorkerSet (each pod's server container gets the
    RDMA device and IPC_LOCK) and of its settings (NCCL over InfiniBand/RoCE: RDMA_ENV). JSON patches, as kustomize
    knows no merge keys for a custom resource's lists."""
    (lws,) = [o for o in multi_node(locks, cluster) if o["kind"] == "LeaderWorkerSet"]
    ops = []
    for role in ("leaderTemplate", "workerTemplate"):
        containers = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"]
        at = f"/spec/leaderWorkerTemplate/{role}/spec/containers/{[c['name'] for c in containers].index('server')}"
        resource = cluster.rdma_resource.replace("~", "~0").replace("/", "~1")
        ops += [
            {"op": "add", "path": f"{at}/resources/limits/{resource}", "value": 1},
            {"op": "add", "path": f"{at}/securityContext/capabilities/add", "value": [RDMA_CAPABILITY]},
        ]
    settings = settings_file(MULTI_NODE, locks, RDMA_ENV)
    text = json.dumps(settings, indent=2) + "\n"
    return {
        **component([]),
        "patches": [
            {"target": {"kind": "LeaderWorkerSet", "name": NAME}, "patch": dump(ops)},
            {"target": {"kind": "ConfigMap", "name": f"{NAME}-settings"},
             "patch": dump([{"op": "replace", "path": "/data/settings.json", "value": text}])},
        ],
    }  # fmt: skip


def manifests(locks: dict[str, Path] | None = None, cluster: Cluster | None = None) -> dict[str, str]:
    """Every file of this folder: relative path -> content."""
    locks = locks or EXAMPLE_LOCKS
    cluster = cluster or Cluster()
    cluster.check()
    files = {
        "base/model-locks.yaml": [model_locks(locks)],
        "monitoring/monitoring.yaml": monitoring(cluster),
        "base/network-policy.yaml": network_policies(cluster),
        "one-node/server.yaml": one_node(locks, cluster),
        "one-node/router.yaml": router(ONE_NODE, cluster),
        "multi-node/server.yaml": multi_node(locks, cluster),
        "multi-node/router.yaml": router(MULTI_NODE, cluster),
    }
    out = {path: render(objects) for path, objects in files.items()}
    for folder in ("base", "one-node", "multi-node"):
        own = sorted(Path(p).name for p in files if p.startswith(f"{folder}/"))
        out[f"{folder}/kustomization.yaml"] = render([kustomization(([] if folder == "base" else ["../base"]) + own)])
    out["monitoring/kustomization.yaml"] = render([component(["monitoring.yaml"])])
    out["rdma/kustomization.yaml"] = render([rdma(locks, cluster)])
    return out


def _path(text: str) -> Path:
    """A path argument; an empty one is refused (Path("") is the working directory: the checkout, here)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a path (an empty one would mean the working directory)")
    return Path(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed file differs")
    parser.add_argument("--target-lock", type=_path, default=EXAMPLE_LOCKS["target"])
    parser.add_argument("--draft-lock", type=_path, default=EXAMPLE_LOCKS["draft"])
    parser.add_argument("--output", type=_path, default=HERE)
    default = Cluster()
    nodes = parser.add_argument_group("the GPU nodes (defaults: the tuned host, 8x RTX PRO 6000 Blackwell 96 GB)")
    nodes.add_argument(
        "--gpu-product",
        action="append",
        dest="gpu_products",
        metavar="LABEL",
        help=f"a nvidia.com/gpu.product value to accept (repeat; default: {', '.join(default.gpu_products)})",
    )
    nodes.add_argument(
        "--min-gpu-memory-mib",
        type=int,
        default=default.min_gpu_memory_mib,
        help="nvidia.com/gpu.memory must exceed this (MiB per GPU; default %(default)s)",
    )
    nodes.add_argument("--gpu-taint", default=default.gpu_taint, help="the GPU nodes' taint key (default %(default)s)")
    nodes.add_argument(
        "--runtime-class",
        default=default.runtime_class,
        help='the GPU Operator\'s RuntimeClass ("" for none; default %(default)s)',
    )
    nodes.add_argument(
        "--host-memory-per-gpu-gib",
        type=int,
        default=default.host_memory_per_gpu_gib,
        help="host memory requested per GPU's scheduler process (default %(default)s)",
    )
    nodes.add_argument(
        "--sglang",
        choices=sorted(STACKS),
        default=default.sglang,
        help="the image's SGLang stack: its image and probes (default %(default)s)",
    )
    nodes.add_argument(
        "--image",
        default="",
        help="the server image (registry/name:tag or @sha256:...; default: a placeholder tag for kustomize images:)",
    )
    nodes.add_argument("--router-image", default="", help="the router image (default: a placeholder, as --image)")
    nodes.add_argument(
        "--prometheus-release",
        default=default.prometheus_release,
        help="the `release` label kube-prometheus-stack selects on (default %(default)s)",
    )
    nodes.add_argument(
        "--rdma-resource",
        default=default.rdma_resource,
        help="the RDMA device resource the rdma component asks for (default %(default)s)",
    )
    nodes.add_argument(
        "--qos",
        choices=QOS_CLASSES,
        default=default.qos,
        help="the server pods' QoS class: burstable (requests only) or guaranteed (limits = requests; default "
        "%(default)s)",
    )
    nodes.add_argument(
        "--api-server-cidr",
        action="append",
        dest="api_server_cidrs",
        metavar="CIDR",
        help="an address of the API server the router may reach (repeat; default: any address on 443 and 6443)",
    )
    args = parser.parse_args(argv)
    cluster = Cluster(
        gpu_products=tuple(args.gpu_products or default.gpu_products), min_gpu_memory_mib=args.min_gpu_memory_mib,
        gpu_taint=args.gpu_taint, runtime_class=args.runtime_class,
        host_memory_per_gpu_gib=args.host_memory_per_gpu_gib, prometheus_release=args.prometheus_release,
        sglang=args.sglang, image=args.image, router_image=args.router_image,
        api_server_cidrs=tuple(args.api_server_cidrs or ()), qos=args.qos, rdma_resource=args.rdma_resource,
    )  # fmt: skip
    locks = {"target": args.target_lock, "draft": args.draft_lock}
    if problem := _bad_input(args.output, locks):
        parser.error(problem)  # exit 2, as argparse's own refusals
    wanted = manifests(locks, cluster)
    try:
        stale = [p for p, text in wanted.items()
                 if not (args.output / p).is_file() or (args.output / p).read_text() != text]  # fmt: skip
        if args.check:
            shown = "kubernetes" if args.output.resolve() == HERE.resolve() else str(args.output)
            for path in stale:
                print(f"{shown}/{path} differs from what generate.py writes; run: python kubernetes/generate.py"
                      + ("" if shown == "kubernetes" else f" --output {args.output}"))  # fmt: skip
            return 1 if stale else 0
        for path in stale:
            (args.output / path).parent.mkdir(parents=True, exist_ok=True)
            (args.output / path).write_text(wanted[path])
    except OSError as err:  # a file where a directory belongs, no permission: the path named, no traceback
        parser.error(f"cannot write {err.filename or args.output}: {err.strerror or err}; choose another --output")
    return 0


def _bad_input(output: Path, locks: dict[str, Path]) -> str | None:
    """What is wrong with --output or a lock, said as the models commands say it, or None."""
    if output.exists() and not output.is_dir():
        return f"--output {output} is not a directory; give the directory to write the manifests into"
    for role, lock in locks.items():
        try:
            lockfile.load(lock)
        except ModelsError as err:
            return f"--{role}-lock: {err}"
    return None


if __name__ == "__main__":
    with redaction.hiding_output():  # what it says passes the one rule sglang-eagle3's output passes: no secret shows
        status = main()
    sys.exit(status)
