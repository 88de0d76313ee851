"""An image, unpacked and run the way a container runtime runs it, without one.

`unpack`: the image archive (what the image's stream program writes) copied to an OCI layout by skopeo and
unpacked by umoci (Debian's), which also writes the OCI runtime spec a runtime would use: the entrypoint and
command, the environment, the user, the working directory.

`start`: that process, in a mount namespace of its own (`unshare --mount`, as root; podman 4.3 would need its
own network and cgroup set-up here), with what Kubernetes gives the server's container:
- the image's root as a read-only overlay (readOnlyRootFilesystem), its /nix/store the image's alone;
- tmpfs on /tmp, /run and the image's writable directories (the pod's emptyDir volumes);
- read-only binds of the test's files (the settings ConfigMap, the weights, a credential);
- the stand-in NVIDIA driver laid out as the toolkit mounts it (tests/support/driver_tree.py): an overlay
  over /usr, and /run/opengl-driver;
- the user of the image's config (setpriv: uid, gid, no supplementary groups, no_new_privs).
The stand-in stack's programs wrap this host's (tests/nix/nixpkgs: nixpkgs cannot be built here), so the
host's /usr, /lib64 and the test environment's Python (its prefix and base prefix) are mounted read-only at
their own paths, under the image's files; nothing else of the host is there. The network is the host's, so
the test reaches the server on loopback.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = ("skopeo", "umoci", "unshare", "setpriv")


def unavailable() -> str | None:
    """Why an image cannot be unpacked and run here, or None."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (Debian: apt-get install skopeo umoci util-linux)"
    if os.geteuid() != 0:
        return "runs the image's root with mount namespaces and overlays: needs root"
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare --mount is refused here: {probe.stderr.strip()}"
    return None


def unpack(archive: Path, into: Path) -> tuple[Path, dict, dict]:
    """(the root file system, the OCI runtime spec umoci derived, the image config skopeo reads)."""
    into.mkdir(parents=True, exist_ok=True)
    layout = into / "oci"
    subprocess.run(["skopeo", "copy", "-q", f"docker-archive:{archive}", f"oci:{layout}:image"], check=True)
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:image", str(into / "bundle")], check=True,
                   capture_output=True)  # fmt: skip
    config = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"docker-archive:{archive}"],
                                       check=True, capture_output=True, text=True).stdout)  # fmt: skip
    spec = json.loads((into / "bundle" / "config.json").read_text())
    return into / "bundle" / "rootfs", spec, config


def host_directories() -> list[str]:
    """What the stand-in's programs run from besides the system's /usr: the test environment's Python, and
    Debian's /etc/alternatives (/usr/bin/awk is a link through it)."""
    found = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), "/etc/alternatives"}
    return sorted(d for d in found if os.path.isdir(d) and not d.startswith("/usr/"))


def start(
    rootfs: Path,
    spec: dict,
    work: Path,
    writable: list[str],
    binds: dict[str, Path],  # container directory -> host directory, mounted read-only
    shared: dict[str, Path] | None = None,  # the same, writable: a volume two containers share
    driver: Path | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    args: list[str] | None = None,
    **popen,
) -> subprocess.Popen:
    """The image's process, started: its entrypoint and command, or as a pod overrides them (``command``
    replaces the entrypoint and drops the image's command; ``args`` replaces the command)."""
    work.mkdir(parents=True, exist_ok=True)
    host = work / "host"  # the lowest layer: mount points and the host's /lib64 and /lib as links into /usr
    for directory in ["dev", "proc", "sys", "usr", *host_directories()]:
        (host / directory.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for link in ("lib", "lib64"):
        if not (host / link).is_symlink():
            (host / link).symlink_to(f"usr/{link}")
    driver = driver or work / "no-driver"
    (driver / "usr").mkdir(parents=True, exist_ok=True)
    root = work / "root"
    root.mkdir(exist_ok=True)
    process = spec["process"]
    entry = process["args"][:1] if command is None else command
    argv = [*entry, *(args if args is not None else process["args"][1:] if command is None else [])]
    environment = dict(item.split("=", 1) for item in process["env"]) | (env or {})
    user = process["user"]
    lines = [
        "set -euo pipefail",
        "mount --make-rprivate /",
        f"mount -t overlay overlay -o ro,lowerdir={driver}:{rootfs}:{host} {root}",
        f"mount -t overlay overlay -o ro,lowerdir={driver / 'usr'}:/usr {root / 'usr'}",
        f"mount --rbind /dev {root / 'dev'}",
        f"mount -t proc proc {root / 'proc'}",
        f"mount -t sysfs sysfs {root / 'sys'}",
        *(f"mount -t tmpfs -o mode=1777 tmpfs {root}{d}" for d in ["/tmp", "/run", *writable]),
        # After the tmpfs: a test environment under /tmp (a clone there) stays visible.
        *(f"mkdir -p {root}{d} && mount --bind -o ro {d} {root}{d}" for d in host_directories()),
    ]
    if (driver / "run/opengl-driver").is_dir():  # NixOS's CDI mounts the driver link
        link = "/run/opengl-driver"
        lines += [f"mkdir -p {root}{link}", f"mount --bind -o ro {driver}{link} {root}{link}"]
    # Directories only: onto one the image has (/etc/sglang-eagle3) or one made on a tmpfs above.
    for target, source in binds.items():
        lines += [f"mkdir -p {root}{target}", f"mount --bind -o ro {source} {root}{target}"]
    for target, source in (shared or {}).items():
        lines += [f"mkdir -p {root}{target}", f"mount --bind {source} {root}{target}"]
    assigns = [f"{k}={v}" for k, v in environment.items()]
    run = ["/usr/bin/setpriv", f"--reuid={user['uid']}", f"--regid={user['gid']}", "--clear-groups",
           "--no-new-privs", "/usr/bin/env", "-i", "-C", process.get("cwd", "/"), *assigns, *argv]  # fmt: skip
    lines.append(f"exec chroot {root} {shlex.join(run)}")
    # A session of its own: the caller can signal the process and clean up whatever it left (killpg).
    return subprocess.Popen(["unshare", "--mount", "bash", "-c", "\n".join(lines)], start_new_session=True, **popen)
