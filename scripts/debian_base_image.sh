#!/usr/bin/env bash
# Make a Debian bookworm base image without any registry: debootstrap --variant=minbase
# into a folder, then `docker import`. The Dockerfiles of images/ take it as their
# BASE_IMAGE where Docker Hub is not reachable (docs/deployment.md, "Without Docker Hub").
#
#   sudo scripts/debian_base_image.sh [TAG]      # default gcbench/debian:bookworm
#
# Needs root (debootstrap), the debootstrap package and a reachable Debian mirror
# (DEBIAN_MIRROR, default http://deb.debian.org/debian). GCBENCH_DEBOOTSTRAP_DIR: where
# the temporary root file system goes (default /var/tmp); it is removed afterwards.
set -euo pipefail
tag="${1:-gcbench/debian:bookworm}"
command -v debootstrap >/dev/null 2>&1 || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "debootstrap needs root" >&2; exit 1; }
rootfs="${GCBENCH_DEBOOTSTRAP_DIR:-/var/tmp}/rootfs.$$"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tar -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["/bin/bash"]' - "$tag"
echo "made $tag"
