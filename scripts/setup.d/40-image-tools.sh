#!/usr/bin/env bash
# Setup step: the tools `make image` builds the cluster image with (no Docker engine needed): buildah (overlay
# or vfs storage, chroot isolation) and debootstrap (the Debian bookworm base when no registry base can be pulled).
set -euo pipefail
missing=()
for pkg in buildah debootstrap; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
