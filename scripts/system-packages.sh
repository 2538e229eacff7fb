#!/usr/bin/env bash
# Installs Debian packages that are missing (apt-get, as root), one install at a time: scripts that run side by
# side (scripts/test.sh) call it under a lock, since two apt-gets at once fail on dpkg's lock. Without apt-get or
# root it names what to install and returns 0 (the checks that need them skip with their reason).
#   bash scripts/system-packages.sh PACKAGE...
set -euo pipefail
missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  exec 9>/tmp/paddlex-npu-apt.lock
  flock 9
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "note: install ${missing[*]} (Debian packages) for every check to run" >&2
fi
