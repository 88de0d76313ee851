"""The Pod Security Standards' checks, as the API server's admission plugin makes them, for a pod spec (a stand-in:
the real plugin is Go, kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/, one file per check;
here each check of those files, by its ID, for the fields a pod spec can set). `violations(spec, level)` lists what
keeps a pod from a level ("baseline", "restricted"); none means it meets it. "privileged" allows everything.
"""

from __future__ import annotations

# check_capabilities_baseline.go: the capabilities a container may add at "baseline".
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip
# check_restrictedVolumes.go: the volume types "restricted" allows.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip
# check_sysctls.go: the sysctls "baseline" allows.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}  # fmt: skip
LEVELS = ("privileged", "baseline", "restricted")


def _containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def violations(spec: dict, level: str) -> list[str]:
    """Each check of `level` (and of the levels below it) the pod spec fails, as 'check ID: what'."""
    if level == "privileged":
        return []
    found: list[str] = []
    pod = spec.get("securityContext", {})
    containers = _containers(spec)

    def context(c: dict) -> dict:
        return c.get("securityContext") or {}

    # -- baseline
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"hostNamespaces: {field}")
    for c in containers:
        if context(c).get("privileged"):
            found.append(f"privileged: {c['name']}")
        added = set((context(c).get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            found.append(f"capabilities_baseline: {c['name']} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            found.append(f"hostPorts: {c['name']}")
        if context(c).get("procMount", "Default") != "Default":
            found.append(f"procMount: {c['name']}")
    for v in spec.get("volumes", []):
        if "hostPath" in v:
            found.append(f"hostPathVolumes: {v['name']}")
    for ctx in [pod, *(context(c) for c in containers)]:
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append("seccompProfile_baseline: Unconfined")
        if (ctx.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append("appArmorProfile: Unconfined")
        selinux = ctx.get("seLinuxOptions") or {}
        if selinux.get("user") or selinux.get("role") or selinux.get("type", "") not in (
            "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"):  # fmt: skip
            found.append("seLinuxOptions")
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            found.append("windowsHostProcess")
    for sysctl in pod.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl['name']}")
    if level == "baseline":
        return found

    # -- restricted
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if kinds - RESTRICTED_VOLUMES:
            found.append(f"restrictedVolumes: {v['name']} is {sorted(kinds)}")
    for c in containers:
        ctx = context(c)
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"allowPrivilegeEscalation: {c['name']}")
        if not ctx.get("runAsNonRoot", pod.get("runAsNonRoot")):
            found.append(f"runAsNonRoot: {c['name']}")
        if ctx.get("runAsUser", pod.get("runAsUser")) == 0:
            found.append(f"runAsUser: {c['name']} runs as 0")
        seccomp = (ctx.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccompProfile_restricted: {c['name']}")
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"capabilities_restricted: {c['name']} does not drop ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities_restricted: {c['name']} adds {sorted(capabilities['add'])}")
    return found


def strictest_level(spec: dict) -> str:
    """The strictest level the pod meets: the namespace label `pod-security.kubernetes.io/enforce` it needs."""
    return next(level for level in reversed(LEVELS) if not violations(spec, level))
