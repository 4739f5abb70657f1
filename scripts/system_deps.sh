#!/usr/bin/env bash
# Installs the Debian packages GC-Bench needs, when missing and when we may (root).
#   scripts/system_deps.sh go cargo           the Go and Rust toolchains (the native tokenizers)
#   scripts/system_deps.sh go cargo chromium  plus Chromium (the UI tests)
set -euo pipefail
declare -A binary=([go]=go [cargo]=cargo [chromium]=chromium)
declare -A package=([go]=golang-go [cargo]=cargo [chromium]=chromium)
need=()
for what in "${@:-go}"; do
  command -v "${binary[$what]}" >/dev/null 2>&1 || need+=("${package[$what]}")
done
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]} (install them as root: apt-get install ${need[*]})" >&2
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
