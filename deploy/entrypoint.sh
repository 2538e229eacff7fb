#!/bin/sh
# The image's entrypoint: the CANN environment (library paths, ASCEND_* variables), then the command given.
# Not run here (see deploy/Dockerfile).
set -e
for f in /usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/cann/set_env.sh \
         /usr/local/Ascend/nnal/atb/set_env.sh; do
    if [ -f "$f" ]; then
        # shellcheck disable=SC1090
        . "$f"
    fi
done
exec "$@"
