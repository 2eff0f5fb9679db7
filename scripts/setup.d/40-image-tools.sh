#!/usr/bin/env bash
# Setup step: the tools `make image` builds the cluster image with (no Docker engine needed): buildah (overlay
# or vfs storage, chroot isolation) and debootstrap (the Debian bookworm base when no registry base can be pulled).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/apt.sh
apt_install_missing buildah debootstrap
echo "image tools: $(buildah --version), debootstrap $(dpkg-query -W -f '${Version}' debootstrap)"
