# Sourced by the sglang-eagle3 wrapper before Python starts: make the host's NVIDIA driver
# libraries (libcuda.so.1, libnvidia-ml.so.1, ...) findable on any Linux distribution.
#
# Every CUDA library of the Nix closure has /run/opengl-driver/lib in its RUNPATH
# (autoAddDriverRunpath): that is where NixOS puts the driver. Elsewhere (Ubuntu, Debian,
# RHEL) the driver lives in the system's library directory, which Nix-built programs never
# search, and putting that whole directory on LD_LIBRARY_PATH would load the host's
# glibc-linked libraries ahead of the store's. So, as nix-gl-host does, only the driver's own
# libraries are linked into a private directory, and that one goes on LD_LIBRARY_PATH.
#
# In a container (nix/image.nix) the NVIDIA Container Toolkit mounts the driver the same way:
# at the host distribution's library directory in its legacy mode and with CDI from
# `nvidia-ctk cdi generate` (/usr/lib/x86_64-linux-gnu, /usr/lib64), at /run/opengl-driver and
# /usr/local/nvidia/lib64 with NixOS's hardware.nvidia-container-toolkit (CDI). Where the
# toolkit's ldconfig step did not run (no /sbin/ldconfig, or CDI's create-symlinks hook
# disabled, as NixOS's generator does) only the versioned files are there
# (libcuda.so.580.95.05): the soname links the loader asks for are made here.
#
# Inputs (shell variables, for tests): driverLink (default /run/opengl-driver), ldconfigs
# (the host's ldconfig programs to ask), hostLibDirs (directories to look in otherwise).
# Nothing here may fail the wrapper (it runs under `bash -e`): no driver found means no change,
# and the preflight then reports the missing GPUs.

_sglang_eagle3_host_driver() {
  local link=${driverLink:-/run/opengl-driver} dir="" candidate found out
  [ -e "$link/lib/libcuda.so.1" ] && return 0
  for candidate in ${ldconfigs:-/sbin/ldconfig /usr/sbin/ldconfig}; do
    [ -x "$candidate" ] || continue
    # lines look like: libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
    dir=$("$candidate" -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ { print $NF; exit }') || dir=""
    [ -n "$dir" ] && { dir=${dir%/*}; break; }
  done
  if [ -z "$dir" ]; then
    for candidate in ${hostLibDirs:-/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/wsl/lib}; do
      # libcuda.so.1, or only libcuda.so.<driver version> where no ldconfig made the link
      for found in "$candidate"/libcuda.so.1 "$candidate"/libcuda.so.[0-9]*.*; do
        [ -e "$found" ] && { dir=$candidate; break 2; }
      done
    done
  fi
  [ -n "$dir" ] || return 0

  out=${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/sglang-eagle3/host-driver
  mkdir -p "$out" 2>/dev/null && [ -w "$out" ] || out=${TMPDIR:-/tmp}/sglang-eagle3-host-driver-$(id -u)
  mkdir -p "$out" 2>/dev/null || return 0
  rm -f "$out"/*.so* 2>/dev/null || true
  for candidate in "$dir"/libcuda.so* "$dir"/libcudadebugger.so* "$dir"/libnvidia-*.so*; do
    [ -e "$candidate" ] && ln -sf "$candidate" "$out/" 2>/dev/null || true
  done
  # The sonames programs open (dlopen("libcuda.so.1"), ctypes.CDLL("libnvidia-ml.so.1")), where
  # only the versioned file is there.
  for candidate in libcuda libnvidia-ml; do
    [ -e "$out/$candidate.so.1" ] && continue
    for found in "$out/$candidate".so.[0-9]*.*; do
      [ -e "$found" ] && { ln -sf "${found##*/}" "$out/$candidate.so.1" 2>/dev/null || true; break; }
    done
  done
  export LD_LIBRARY_PATH=$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
_sglang_eagle3_host_driver || true
unset -f _sglang_eagle3_host_driver
