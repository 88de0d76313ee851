#!/usr/bin/env bash
# Check systemd unit files the way systemd itself reads them: `systemd-analyze verify`
# (syntax, known keys, executables exist) and `systemd-analyze security --offline` (the
# exposure score, printed per unit so it can be compared with nixpkgs' services).
#
#   verify-units.sh UNIT_FILE...
#
# Exit 1 if systemd reports anything for a unit. Used by the NixOS module checks (units
# as NixOS renders them) and by tests/test_modules.py (units rendered by the nixpkgs
# stand-in, whose ExecStart paths point to stub executables).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: verify-units.sh UNIT_FILE..." >&2; exit 2; }
status=0
for unit in "$@"; do
  name=$(basename "$unit")
  if ! report=$(systemd-analyze verify --man=no --recursive-errors=no "$unit" 2>&1) || [ -n "$report" ]; then
    echo "$name: systemd-analyze verify reports:" >&2
    echo "$report" >&2
    status=1
  fi
  exposure=$(systemd-analyze security --offline=true "$unit" | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
  echo "$name: exposure $exposure"
done
exit $status
