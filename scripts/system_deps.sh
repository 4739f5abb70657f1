#!/usr/bin/env bash
# Installs the Debian packages GC-Bench's tests need, when missing and when we may.
set -euo pipefail
need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]} (install them as root: apt-get install ${need[*]})" >&2
  exit 0
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
