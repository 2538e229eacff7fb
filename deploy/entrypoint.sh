#!/bin/sh
# The image's entrypoint: the CANN environment (library paths, ASCEND_* variables), then the command given.
#
# CANN's set_env.sh files are bash (the 8.5 nnal/atb one uses arrays, `[[ ]]`, `${BASH_SOURCE}`): sourced by
# /bin/sh (dash on Ubuntu and Debian) they stop the container with `Syntax error: "(" unexpected`. So this file is
# POSIX sh, and bash sources them: bash reads every set_env.sh that exists, then execs the command with the
# environment they exported. Without any set_env.sh (the CPU twin, a host whose runtime mounts CANN elsewhere) the
# command runs as is. tests/deploy/test_entrypoint.py runs this file under dash with a bash-syntax set_env.sh.
set -eu
ASCEND_ROOT=${PADDLEX_NPU_ASCEND_ROOT:-/usr/local/Ascend}
found=
for f in "$ASCEND_ROOT/ascend-toolkit/set_env.sh" "$ASCEND_ROOT/cann/set_env.sh" "$ASCEND_ROOT/nnal/atb/set_env.sh"; do
    [ -f "$f" ] && found="$found $f"
done
if [ -z "$found" ]; then
    exec "$@"
fi
if ! command -v bash >/dev/null 2>&1; then
    echo "paddlex-npu-entrypoint: CANN's set_env.sh needs bash, which is not in this image: install bash" >&2
    exit 1
fi
# bash -c SCRIPT FILES COMMAND...: $0 holds the files; the command is kept in an array first (a sourced file may
# run `set --`, which would change "$@")
# shellcheck disable=SC2016
exec bash -c '
paddlex_npu_command=("$@")
for paddlex_npu_f in $0; do
    # set_env.sh files read unset variables and may end non-zero on an optional part: warn, go on
    . "$paddlex_npu_f" >&2 || echo "paddlex-npu-entrypoint: $paddlex_npu_f returned $?" >&2
done
exec "${paddlex_npu_command[@]}"
' "${found# }" "$@"
