#!/usr/bin/env bash
# Fetch promtool, Prometheus's own rules checker, for deploy/validate.py: the
# `prometheus` package of the machine's Debian archive, downloaded with
# `apt-get download` and unpacked with `dpkg-deb -x`, never installed, so no
# root is needed. Only promtool is kept, in <repo>/.cache/prometheus/bin (or in
# the folder given as the first argument). A root without the package lists
# runs `apt-get update` first; anyone else without them gets an error saying so.
#
# Idempotent: a marker beside the binary holds the package version it came from.
# The archive's candidate is taken (bookworm's: 2.42.0+ds-5+deb12u1), so a
# Debian security update is picked up at the next fetch. Runs from any cwd.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="${1:-$root/.cache/prometheus}"
bin="$dest/bin"
marker="$bin/.complete"

for tool in apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || {
    echo "fetch-promtool: $tool not found: promtool comes from Debian's prometheus package" >&2
    exit 1
  }
done

candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p' | head -n1; }
version="$(candidate)"
if [[ -z "$version" || "$version" == "(none)" ]] && [[ "$(id -u)" == "0" ]]; then
  echo "fetch-promtool: no package lists; apt-get update ..."
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  version="$(candidate)"
fi
if [[ -z "$version" || "$version" == "(none)" ]]; then
  echo "fetch-promtool: apt knows no prometheus package (run apt-get update as root)" >&2
  exit 1
fi

mkdir -p "$dest"
exec 9>"$dest/.fetch.lock"
command -v flock >/dev/null && flock 9

if [[ -x "$bin/promtool" && -f "$marker" && "$(cat "$marker")" == "$version" ]]; then
  echo "fetch-promtool: promtool of prometheus $version already in $bin"
  exit 0
fi

tmp="$(mktemp -d "$dest/fetch.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf 'fetch-promtool: apt-get download prometheus=%s -> %s ... ' "$version" "$bin"
if ! (cd "$tmp" && apt-get download -qq "prometheus=$version") >"$tmp/apt.log" 2>&1; then
  echo "failed:" >&2
  cat "$tmp/apt.log" >&2
  exit 1
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/unpacked"
"$tmp/unpacked/usr/bin/promtool" --version >/dev/null
mkdir -p "$tmp/bin"
mv "$tmp/unpacked/usr/bin/promtool" "$tmp/bin/promtool"
echo "$version" >"$tmp/bin/.complete"
rm -rf "$bin"
mv "$tmp/bin" "$bin"
echo "done"
