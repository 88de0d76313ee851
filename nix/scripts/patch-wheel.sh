#!/usr/bin/env bash
# Unpack a wheel, apply patches with GNU patch, pack it again (wheel regenerates RECORD).
#
#   patch-wheel.sh PRISTINE_WHEEL WHEEL_FILENAME OUT_DIR PATCH...
#
# PRISTINE_WHEEL may have any file name (in the Nix store it is <hash>-<filename>);
# WHEEL_FILENAME is the wheel's real name, e.g. sglang-0.5.9-py3-none-any.whl: the
# `wheel` tool reads the project name and version from the file name, so the wheel is
# copied to that name first. Patches are applied in the order given, with the flags in
# $PATCH_FLAGS (the Nix build and the Python patch tool use the same ones); any patch
# that does not apply exactly fails the build. The patched wheel is written to OUT_DIR.
# Needs: python with the `wheel` package, GNU patch.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 PRISTINE_WHEEL WHEEL_FILENAME OUT_DIR PATCH..." >&2
  exit 2
fi
pristine=$1 filename=$2 out=$3
shift 3
case $filename in
  */* | *[!A-Za-z0-9._+-]* | "") echo "$0: '$filename' is not a wheel file name" >&2; exit 2 ;;
  *.whl) ;;
  *) echo "$0: '$filename' is not a wheel file name (*.whl)" >&2; exit 2 ;;
esac
read -r -a flags <<< "${PATCH_FLAGS:--p1 --fuzz=0 --force --batch --no-backup-if-mismatch --reject-file=-}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$pristine" "$work/$filename"
python -m wheel unpack "$work/$filename" --dest "$work/unpacked"
tree=$(find "$work/unpacked" -mindepth 1 -maxdepth 1 -type d)
for p in "$@"; do
  echo "applying $(basename "$p")"
  patch "${flags[@]}" -d "$tree" -i "$p"
done
mkdir -p "$out"
python -m wheel pack "$tree" --dest-dir "$out"
