#!/usr/bin/env bash
# `make image`: builds localhost/sparkrunner:latest from docker/Dockerfile with buildah (chroot isolation; overlay
# storage where it mounts, else vfs: docker/buildah.sh). Idempotent and cached:
#   - the inputs: a hash of everything the image is made from (docker/, requirements/image.txt, pyproject.toml,
#     sparkrunner/, the build settings) names the image, localhost/sparkrunner:inputs-HASH; when that image is
#     there, nothing is built (a second or two) and :latest points to it. Only the newest inputs-* image is kept.
#   - the base: $SPARKRUNNER_IMAGE_BASE when set; else python:3.11-slim-bookworm when it is in the storage or
#     can be pulled; else a Debian bookworm root filesystem made by debootstrap (docker/base/make_base.sh,
#     tarball cached under $SPARKRUNNER_CACHE/image);
#   - the wheels (on a Debian bookworm host, the image's own distribution): requirements/image.txt resolved
#     and built once by Debian's python3.11 (3.11.2, as in the image) with this machine's pip configuration into
#     $SPARKRUNNER_CACHE/image/wheelhouse, plus the Horovod wheel that scripts/setup.sh built (same Python 3.11
#     ABI, torch and Open MPI 4.1.4 as the image); elsewhere the image installs from the package indexes;
#   - the layers: buildah --layers reuses every step whose inputs did not change (a code change rebuilds the
#     last three small steps only).
#
#   bash docker/build_image.sh                  build (or find) the image of this tree
#   bash docker/build_image.sh --print-image    print the name of this tree's image (built or not)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${SPARKRUNNER_CACHE:-$HOME/.cache/sparkrunner}
IMAGE=${SPARKRUNNER_IMAGE:-localhost/sparkrunner:latest}
REPOSITORY=${IMAGE%:*}
REGISTRY_BASE=docker.io/library/python:3.11-slim-bookworm
TORCH_VARIANT=cpu
HOROVOD_VERSION=0.28.1
DEBIAN_PYTHON=/usr/bin/python3.11
buildah() { bash docker/buildah.sh "$@"; }
say() { printf 'build_image: %s\n' "$*"; }
start=$(date +%s)

inputs_hash() {
  {
    echo "base=${SPARKRUNNER_IMAGE_BASE:-auto} torch=$TORCH_VARIANT horovod=$HOROVOD_VERSION"
    find docker requirements/image.txt pyproject.toml sparkrunner -type f -not -path 'docker/wheelhouse/*' \
      -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}

forget_older_builds() {
  local name
  for name in $(buildah images --format '{{.Name}}:{{.Tag}}' | grep "^$REPOSITORY:inputs-" || true); do
    [ "$name" = "$TREE_IMAGE" ] || buildah rmi "$name" >/dev/null 2>&1 || true  # (in use by a container: next time)
  done
  buildah rmi --prune >/dev/null 2>&1 || true  # layers of earlier builds that no tag or cached step uses
  if [ "$(bash docker/buildah.sh --print-driver)" = overlay ] && [ -d "$CACHE/buildah/storage" ]; then
    say "removing the vfs storage of earlier builds ($CACHE/buildah/storage, $(du -sh "$CACHE/buildah/storage" | cut -f1))"
    rm -rf "$CACHE/buildah/storage" "$CACHE/buildah/run"
  fi
}

pick_base() {
  if [ -n "${SPARKRUNNER_IMAGE_BASE:-}" ]; then echo "$SPARKRUNNER_IMAGE_BASE"; return; fi
  if buildah inspect --type image "$REGISTRY_BASE" >/dev/null 2>&1 \
     || { [ ! -e "$CACHE/image/no-registry" ] && timeout 60 bash docker/buildah.sh pull -q "$REGISTRY_BASE" >/dev/null 2>&1; }; then
    echo "$REGISTRY_BASE"; return
  fi
  mkdir -p "$CACHE/image" && touch "$CACHE/image/no-registry"  # do not wait for the registry on every build
  bash docker/base/make_base.sh >&2
  echo localhost/debian-bookworm
}

fill_wheelhouse() {
  local house="$CACHE/image/wheelhouse" stamp want
  want=$(sha256sum requirements/image.txt | cut -c1-16)
  stamp="$house/.built-from-$want"
  if [ ! -e "$stamp" ]; then
    say "building the image's wheels into $house (once per requirements/image.txt)"
    rm -rf "$house" "$CACHE/image/pip-venv" && mkdir -p "$house"
    "$DEBIAN_PYTHON" -m venv "$CACHE/image/pip-venv"
    # Debian's pip 23.0 builds an sdist without a pyproject.toml (pyspark's) by 'setup.py bdist_wheel', which
    # needs the wheel package: a newer pip builds it in an isolated environment instead
    "$CACHE/image/pip-venv/bin/pip" install -q --upgrade pip > "$CACHE/image/wheelhouse.log" 2>&1
    "$CACHE/image/pip-venv/bin/pip" wheel -q -r requirements/image.txt -w "$house" >> "$CACHE/image/wheelhouse.log" 2>&1 \
      || { tail -20 "$CACHE/image/wheelhouse.log" >&2; echo "build_image: pip wheel failed" >&2; exit 1; }
    touch "$stamp"
  fi
  find docker/wheelhouse -name '*.whl' -delete
  cp -l "$house"/*.whl docker/wheelhouse/ 2>/dev/null || cp "$house"/*.whl docker/wheelhouse/
}

add_horovod_wheel() {
  local torch wheels
  torch=$(sed -n 's/^torch==//p' requirements/image.txt)
  wheels=("$CACHE/wheels/horovod-$HOROVOD_VERSION-torch-$torch-cp311"/horovod-*.whl)
  if [ -e "${wheels[0]}" ] && dpkg -s libopenmpi3 >/dev/null 2>&1; then
    mkdir -p docker/wheelhouse/horovod && cp "${wheels[0]}" docker/wheelhouse/horovod/
    say "Horovod: the host's wheel ${wheels[0]##*/} (same Python, torch and Open MPI as the image)"
  else
    say "Horovod: no matching host wheel, the image compiles it (~6 min)"
  fi
}

TREE_IMAGE="$REPOSITORY:inputs-$(inputs_hash)"
if [ "${1:-}" = --print-image ]; then echo "$TREE_IMAGE"; exit 0; fi
if buildah inspect --type image "$TREE_IMAGE" >/dev/null 2>&1; then
  buildah tag "$TREE_IMAGE" "$IMAGE"
  forget_older_builds
  say "$IMAGE is up to date: $TREE_IMAGE, built from these inputs before ($(( $(date +%s) - start )) s)"
  exit 0
fi

BASE=$(pick_base)
find docker/wheelhouse -name '*.whl' -delete
trap "find docker/wheelhouse -name '*.whl' -delete" EXIT  # the wheels stay in the cache, not in the clone
if grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release && [ -x "$DEBIAN_PYTHON" ] \
   && "$DEBIAN_PYTHON" -c 'import ensurepip' 2>/dev/null; then
  fill_wheelhouse
  add_horovod_wheel
else
  say "not a Debian bookworm host with python3.11-venv: the image installs from the package indexes"
fi
say "building $IMAGE from $BASE"
log="$CACHE/image/build.log"
if ! buildah bud --layers --force-rm --isolation chroot -f docker/Dockerfile --build-arg BASE="$BASE" \
       --build-arg TORCH_VARIANT="$TORCH_VARIANT" --build-arg HOROVOD_VERSION="$HOROVOD_VERSION" -t "$IMAGE" -t "$TREE_IMAGE" . > "$log" 2>&1; then
  tail -30 "$log" >&2
  echo "build_image: the build failed (full log: $log)" >&2
  exit 1
fi
grep -E '^(STEP [0-9]+/[0-9]+: (FROM|RUN|COPY)|--> Using cache)' "$log" | cut -c1-110
forget_older_builds
say "built $IMAGE ($(buildah images --format '{{.Size}}' "$TREE_IMAGE" | head -1)) in $(( $(date +%s) - start )) s"
