#!/usr/bin/env bash
# buildah with the project's storage, in one fixed place, so that `make image`, `make image-test` and the tests
# all see the same images. Run any buildah subcommand through it:   bash docker/buildah.sh images
#
# Storage driver: overlay when this machine can mount an overlay file system on the cache's disk (root, kernel
# overlayfs, a cache that is not itself on overlayfs): layers share files, so a working container or a new
# layer costs only what changed. Else vfs, which needs nothing but copies the whole tree for every layer and
# container (a 5 GB image then takes minutes per step). SPARKRUNNER_BUILDAH_DRIVER=vfs|overlay forces one.
# Storage: $SPARKRUNNER_CACHE/buildah/DRIVER/{root,run} (default ~/.cache/sparkrunner/buildah/overlay/...).
#   bash docker/buildah.sh --print-driver      prints the driver it picks
set -euo pipefail
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
command -v buildah >/dev/null || { echo "buildah is missing: apt-get install buildah (or run scripts/setup.sh)" >&2; exit 127; }

overlay_mounts_here() {
  [ "$(id -u)" -eq 0 ] || return 1
  mkdir -p "$CACHE/buildah"
  local probe status=1
  probe=$(mktemp -d "$CACHE/buildah/.overlay-probe.XXXXXX")
  mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
       "$probe/merged" 2>/dev/null; then
    umount "$probe/merged" && status=0
  fi
  rm -rf "$probe"
  return $status
}

driver=${SPARKRUNNER_BUILDAH_DRIVER:-}
if [ -z "$driver" ]; then
  if overlay_mounts_here; then driver=overlay; else driver=vfs; fi
fi
if [ "${1:-}" = --print-driver ]; then echo "$driver"; exit 0; fi
exec buildah --storage-driver "$driver" --root "$CACHE/buildah/$driver/root" --runroot "$CACHE/buildah/$driver/run" "$@"
