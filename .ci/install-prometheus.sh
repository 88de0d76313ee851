#!/usr/bin/env bash
# Prometheus 3 and promtool, as nixpkgs ships them (3.x; Debian 12 has only 2.42, which
# rejects Prometheus 3 settings such as fallback_scrape_protocol): Debian forky's packages,
# extract-only under /opt/prometheus-3, linked into /usr/local/bin (ahead of /usr/bin).
# Both are Go binaries that need only libc. Idempotent; needs root and Debian's registry.
set -euo pipefail
P=/opt/prometheus-3
if [ -x "$P/usr/bin/prometheus" ] && /usr/local/bin/promtool --version 2>/dev/null | grep -q 'version 3\.'; then
  exit 0
fi
W=$(mktemp -d); chmod 755 "$W"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/lists/partial" "$W/debs"
uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1)
[ -n "$uri" ] || uri=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1)
[ -n "$uri" ] || { echo "no Debian archive configured in /etc/apt" >&2; exit 1; }
echo "deb $uri forky main" > "$W/sources.list"
o=(-o "Dir::Etc::SourceList=$W/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$W/lists")
apt-get "${o[@]}" update -qq
(cd "$W/debs" && apt-get "${o[@]}" download prometheus promtool >/dev/null 2>&1)
rm -rf "$P"; mkdir -p "$P"
for f in "$W"/debs/*.deb; do dpkg -x "$f" "$P"; done
ln -sf "$P/usr/bin/prometheus" /usr/local/bin/prometheus
ln -sf "$P/usr/bin/promtool" /usr/local/bin/promtool
/usr/local/bin/promtool --version | head -1
