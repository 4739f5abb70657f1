#!/usr/bin/env bash
# Installs the Debian packages GC-Bench needs, when missing and when we may (root).
#   scripts/system_deps.sh go cargo           the Go and Rust toolchains (the native tokenizers)
#   scripts/system_deps.sh go cargo chromium  plus Chromium (the UI tests)
#   scripts/system_deps.sh latex              pdflatex and booktabs (the paper table's LaTeX test;
#                                             about 150 MB installed, no fonts beyond Latin Modern)
#   scripts/system_deps.sh ipmi               ipmitool and OpenIPMI's ipmi_sim BMC emulator (the node
#                                             meter's tests read a real emulated BMC; about 5 MB)
set -euo pipefail
declare -A binary=([go]=go [cargo]=cargo [chromium]=chromium [latex]=pdflatex [ipmi]=ipmitool)
declare -A package=([go]=golang-go [cargo]=cargo [chromium]=chromium
                    [latex]="texlive-latex-base texlive-latex-recommended" [ipmi]="ipmitool openipmi")
present() {  # $1: what; true when its binary (and, for latex, booktabs.sty; for ipmi, ipmi_sim) is there
  command -v "${binary[$1]}" >/dev/null 2>&1 || return 1
  if [ "$1" = latex ]; then kpsewhich booktabs.sty >/dev/null 2>&1 || return 1; fi
  if [ "$1" = ipmi ]; then command -v ipmi_sim >/dev/null 2>&1 || return 1; fi
}
need=()
for what in "${@:-go}"; do
  # shellcheck disable=SC2206 - a package list splits into its packages
  present "$what" || need+=(${package[$what]})
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
