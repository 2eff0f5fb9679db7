#!/usr/bin/env bash
# buildah with the project's storage: the vfs driver (no overlay or fuse needed) in one fixed place, so that
# `make image`, `make image-test` and the tests all see the same images. Run any buildah subcommand through it:
#   docker/buildah.sh images
# Storage: $SPARKRUNNER_BUILDAH_ROOT (default $SPARKRUNNER_CACHE/buildah/storage, i.e.
# ~/.cache/sparkrunner/buildah/storage); run state in $SPARKRUNNER_BUILDAH_ROOT/../run.
set -euo pipefail
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
ROOT=${SPARKRUNNER_BUILDAH_ROOT:-$CACHE/buildah/storage}
command -v buildah >/dev/null || { echo "buildah is missing: apt-get install buildah (or run scripts/setup.sh)" >&2; exit 127; }
exec buildah --storage-driver vfs --root "$ROOT" --runroot "$(dirname "$ROOT")/run" "$@"
