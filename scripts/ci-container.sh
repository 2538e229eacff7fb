#!/usr/bin/env bash
# The container layer of CI: builds deploy/Dockerfile's CPU twin from nothing and runs it (tests/deploy/).
# On a fresh Debian bookworm machine, after scripts/setup.sh, as root (podman from Debian's packages, no daemon, no
# registry: see docs/deployment.md):
#   1. apt (scripts/system-packages.sh): podman, runc, debootstrap (skipped when present);
#   2. the base image local/debian-py:bookworm, a debootstrap rootfs (python3, venv, a font) imported into podman;
#      the rootfs tarball is cached in .cache/containers/ so a rerun imports it in seconds;
#   3. the wheelhouse (.cache/containers/wheelhouse): the image's requirements as cp311 manylinux x86_64 wheels, from
#      pip's cache or PyPI, plus the project's own wheel;
#   4. the CPU twin, built with --network none (no network inside the build);
#   5. tests/deploy/ with the image: serve as non-root on a read-only root, offline; doctor, selftest, convert.
#   bash scripts/ci-container.sh [STEP...]   (steps: apt base wheels image test; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
CACHE=.cache/containers
IMAGE=${IMAGE:-localhost/paddlex-npu:cpu}
BASE=local/debian-py:bookworm
STEPS=${*:-apt base wheels image test}
mkdir -p "$CACHE"

# crun (podman's default) fails here ("cgroups in hybrid mode not supported") and the default ulimits cannot be
# raised on these machines: runc, the cgroupfs manager, no default ulimits (tests/deploy/ reads the same settings).
CONTAINERS_CONF=$(readlink -f "$CACHE")/containers.conf
printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
export CONTAINERS_CONF
P=(podman --runtime runc --cgroup-manager cgroupfs)

step() { [[ " $STEPS " == *" $1 "* ]]; }
took() { echo "ci-container: $1 took $(($(date +%s) - $2)) s"; }

if step apt; then
  t=$(date +%s)
  bash scripts/system-packages.sh podman runc debootstrap  # locked: other CI layers may run apt at the same time
  command -v podman >/dev/null || { echo "ci-container: podman is not installed (apt, as root)" >&2; exit 1; }
  took apt "$t"
fi

if step base && ! "${P[@]}" image exists "$BASE"; then
  t=$(date +%s)
  ROOTFS_TAR="$CACHE/debian-py-bookworm.tar"
  if [ ! -s "$ROOTFS_TAR" ]; then
    ROOTFS=$(mktemp -d)
    MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    # python3 + venv (ensurepip's pip), and the font PaddleX draws results with (PADDLE_PDX_LOCAL_FONT_FILE_PATH)
    debootstrap --variant=minbase --include=python3,python3-venv,fonts-dejavu-core \
      bookworm "$ROOTFS" "${MIRROR:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log"
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" -cf "$ROOTFS_TAR.part" . && mv "$ROOTFS_TAR.part" "$ROOTFS_TAR"
    rm -rf "$ROOTFS"
  fi
  "${P[@]}" import "$ROOTFS_TAR" "$BASE" >/dev/null
  took base "$t"
fi

if step wheels; then
  t=$(date +%s)
  WH="$CACHE/wheelhouse"
  mkdir -p "$WH"
  # what the image installs (deploy/constraints.txt: the resolved set) for the image's platform (glibc 2.28 covers
  # every wheel of the set); pip's cache makes a rerun fast
  "$VENV/bin/python" -m pip download -q -d "$WH" --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -r deploy/constraints.txt
  rm -f "$WH"/paddlex_npu-*.whl
  "$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$WH" .
  took wheels "$t"
fi

if step image; then
  t=$(date +%s)
  # the build context: deploy/'s files with the wheelhouse as wheels/ (hard links where the file system allows)
  CTX=$(mktemp -d)
  cp deploy/Dockerfile deploy/entrypoint.sh deploy/requirements.txt deploy/constraints.txt "$CTX/"
  cp -al "$CACHE/wheelhouse" "$CTX/wheels" 2>/dev/null || cp -r "$CACHE/wheelhouse" "$CTX/wheels"
  # --format docker keeps HEALTHCHECK (OCI images have none)
  WHEELS_ID=$(cd "$CTX/wheels" && sha256sum -- *.whl | sha256sum | cut -c1-16)
  "${P[@]}" build --network none --format docker -q -t "$IMAGE" --build-arg BASE_IMAGE="$BASE" \
    --build-arg WHEELS_ID="$WHEELS_ID" --build-arg RUNTIME=reference --build-arg WITH_TRITON=0 \
    --build-arg VERSION="$("$VENV/bin/python" -c 'exec(open("paddlex_npu/version.py").read()); print(__version__)')" \
    --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" "$CTX" >/dev/null
  rm -rf "$CTX"
  took image "$t"
  "${P[@]}" image inspect "$IMAGE" --format 'ci-container: image {{.Size}} bytes, version {{index .Labels "org.opencontainers.image.version"}}'
fi

if step test; then
  t=$(date +%s)
  PADDLEX_NPU_TEST_IMAGE="$IMAGE" PYTHONPATH=$PWD timeout 900 "$VENV/bin/python" -m pytest -q -x \
    tests/deploy/test_container.py tests/deploy/test_entrypoint.py
  took test "$t"
fi
