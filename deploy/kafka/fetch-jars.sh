#!/usr/bin/env bash
# Fetch the Apache Kafka broker jars (and log4j2 + its SLF4J binding) from
# Maven Central into <repo>/.cache/kafka/<version>/jars, for deploy/kafka/kafka.py.
# No Docker and no release tarball on these machines: Maven is the source.
#
# Idempotent: a marker file holding the pom's checksum says the folder is
# complete; it is written only after a successful, checked copy. The copy goes
# to a fresh temporary folder that replaces the old one, so no stale jar (say,
# a second slf4j binding from an older pom) survives. Runs from any cwd.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pom="$here/pom.xml"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
[[ -n "$version" ]] || { echo "fetch-jars: no <kafka.version> in $pom" >&2; exit 1; }
base="$root/.cache/kafka/$version"
dest="$base/jars"
marker="$dest/.complete"
want="$(sha256sum "$pom" | cut -d' ' -f1)"

mkdir -p "$base"
# Serialise concurrent runs (two test sessions starting at once).
exec 9>"$base/.fetch.lock"
command -v flock >/dev/null && flock 9

if [[ -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
  echo "fetch-jars: Kafka $version jars already complete in $dest ($(ls "$dest"/*.jar | wc -l) jars)"
  exit 0
fi
command -v mvn >/dev/null || { echo "fetch-jars: mvn not found (apt-get install maven)" >&2; exit 1; }

tmp="$(mktemp -d "$base/jars.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
printf 'fetch-jars: mvn dependency:copy-dependencies (Kafka %s, runtime scope) -> %s ... ' "$version" "$dest"
# Maven's output (and its stray colour codes) goes to a log shown on failure.
if ! mvn -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$tmp" >"$base/mvn.log" 2>&1; then
  echo "failed; $base/mvn.log:" >&2
  sed 's/\x1b\[[0-9;]*m//g' "$base/mvn.log" | grep -E 'ERROR|WARN' | tail -n 30 >&2
  exit 1
fi

# Check what logging depends on: exactly one slf4j-api and its one binding.
count() { find "$tmp" -maxdepth 1 -name "$1" | wc -l; }
problems=()
[[ "$(count "kafka_2.13-$version.jar")" == 1 ]] || problems+=("kafka_2.13-$version.jar missing")
[[ "$(count "kafka-clients-$version.jar")" == 1 ]] || problems+=("kafka-clients-$version.jar missing")
[[ "$(count 'slf4j-api-*.jar')" == 1 ]] || problems+=("not exactly one slf4j-api jar")
[[ "$(count 'log4j-slf4j*-impl-*.jar')" == 1 ]] || problems+=("not exactly one log4j SLF4J binding")
[[ "$(count 'log4j-core-*.jar')" == 1 ]] || problems+=("not exactly one log4j-core jar")
# slf4j 1.7 finds log4j-slf4j-impl, 2.x finds log4j-slf4j2-impl; else the NOP logger.
if [[ "$(count 'slf4j-api-1.*.jar')" == 1 ]]; then binding='log4j-slf4j-impl-*.jar'
else binding='log4j-slf4j2-impl-*.jar'; fi
[[ "$(count "$binding")" == 1 ]] || problems+=("slf4j-api does not match its binding ($binding)")
if ((${#problems[@]})); then
  echo "failed" >&2
  printf 'fetch-jars: %s\n' "${problems[@]}" >&2
  exit 1
fi

echo "$want" >"$tmp/.complete"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "done ($(ls "$dest"/*.jar | wc -l) jars)"
