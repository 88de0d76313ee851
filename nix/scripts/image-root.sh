#!/usr/bin/env bash
# The image's own files, around the store paths (nix/image.nix runs it as streamLayeredImage's
# extraCommands, in the directory that becomes the image's root; tests/test_image.py runs it too):
#
#   image-root.sh UID HOME LDCONFIG WRITABLE_DIRS -- PROGRAMS...
#
# - /etc/passwd and /etc/group with the unprivileged user UID (named sglang, home HOME), the user
#   the image runs as (runtimes that set HOME from /etc/passwd agree with the image's HOME);
#   /etc/nsswitch.conf;
# - /sbin/ldconfig (LDCONFIG: glibc's) and /etc/ld.so.conf(.d): the NVIDIA Container Toolkit's
#   legacy mode runs the image's ldconfig to register the driver it mounts
#   (NVIDIA/nvidia-container-toolkit #1326); Nix's own loader never reads that cache, the
#   wrapper's host-driver.sh finds the driver itself;
# - /bin: links to PROGRAMS (files, or every program of a directory), with /bin/sh -> bash;
# - /tmp and WRITABLE_DIRS (a comma-separated list): world-writable and sticky, so the image runs
#   as any user a cluster picks; Kubernetes mounts volumes there, a plain `docker run` writes to
#   the container's layer;
# - mount points: /etc/sglang-eagle3 (the settings file), /run (secrets, credentials).
set -euo pipefail
uid=${1:?usage: image-root.sh UID HOME LDCONFIG WRITABLE_DIRS -- PROGRAMS...}
home=$2
ldconfig=$3
writable=$4
[ "${5:-}" = "--" ] || { echo "image-root.sh: expected -- after WRITABLE_DIRS" >&2; exit 2; }
shift 5

mkdir -p bin sbin etc/ld.so.conf.d etc/sglang-eagle3 run tmp
cat > etc/passwd <<PASSWD
root:x:0:0:root:/:/bin/false
sglang:x:$uid:$uid:sglang-eagle3:$home:/bin/false
nobody:x:65534:65534:nobody:/var/empty:/bin/false
PASSWD
cat > etc/group <<GROUP
root:x:0:
sglang:x:$uid:
nogroup:x:65534:
GROUP
echo "hosts: files dns" > etc/nsswitch.conf
echo "include /etc/ld.so.conf.d/*.conf" > etc/ld.so.conf
ln -sfn "$ldconfig" sbin/ldconfig

for program in "$@"; do
  if [ -d "$program" ]; then
    for each in "$program"/*; do ln -sfn "$each" bin/; done
  else
    ln -sfn "$program" bin/
  fi
done
[ -e bin/bash ] && ln -sfn bash bin/sh

IFS=, read -ra dirs <<< "$writable"
for dir in tmp "${dirs[@]}"; do
  mkdir -p "./$dir"
  chmod 1777 "./$dir"
done
