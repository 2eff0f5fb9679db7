#!/usr/bin/env bash
# Builds the base image localhost/debian-bookworm (a minimal Debian bookworm root filesystem made by debootstrap)
# for machines where no registry base image (python:3.11-slim-bookworm) can be pulled. Idempotent: the rootfs
# tarball is cached under $SPARKRUNNER_CACHE/image and the image is only made when buildah lacks it.
#
# Usage: docker/base/make_base.sh           Env: SPARKRUNNER_CACHE, BASE_IMAGE (default localhost/debian-bookworm)
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
BASE_IMAGE=${BASE_IMAGE:-localhost/debian-bookworm}
TARBALL="$CACHE/image/debian-bookworm-minbase.tgz"
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
buildah() { bash docker/buildah.sh "$@"; }
say() { printf 'make_base: %s\n' "$*"; }

if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  say "$BASE_IMAGE is there"; exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "make_base: debootstrap needs root" >&2; exit 1; }
if [ ! -s "$TARBALL" ]; then
  command -v debootstrap >/dev/null || { echo "make_base: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
  mkdir -p "$CACHE/image"
  ROOTFS=$(mktemp -d "$CACHE/image/rootfs.XXXXXX")
  trap 'rm -rf "$ROOTFS" "$TARBALL.part"' EXIT
  say "debootstrap bookworm (minbase) into $ROOTFS"
  start=$(date +%s)
  debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" > "$CACHE/image/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/image/debootstrap.log" >&2; exit 1; }
  cat > "$ROOTFS/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
  tar -C "$ROOTFS" --numeric-owner -czf "$TARBALL.part" .
  mv "$TARBALL.part" "$TARBALL"
  say "rootfs tarball: $TARBALL ($(du -h "$TARBALL" | cut -f1), $(( $(date +%s) - start )) s)"
fi
CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
ln "$TARBALL" "$CONTEXT/rootfs.tgz" 2>/dev/null || cp "$TARBALL" "$CONTEXT/rootfs.tgz"
printf 'FROM scratch\nADD rootfs.tgz /\nCMD ["bash"]\n' > "$CONTEXT/Containerfile"
buildah bud --isolation chroot -f "$CONTEXT/Containerfile" -t "$BASE_IMAGE" "$CONTEXT" >/dev/null
say "built $BASE_IMAGE"
