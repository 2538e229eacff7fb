#!/usr/bin/env bash
# The site as a reader sees it (issue 43): builds the MkDocs site into site/ (the build's output, kept), serves it
# on 127.0.0.1 and renders every page in Debian's headless chromium; a page that shows Markdown as source fails
# (tests/site/). The home page's screenshot is kept as site/screenshots/home.png.
#   bash scripts/ci-site.sh   (after scripts/setup.sh; as root it installs chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
start=$(date +%s)
bash scripts/system-packages.sh chromium
rm -rf site
SITE_DIR=$PWD/site timeout 900 "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/site
echo "ci-site: every page rendered in $(( $(date +%s) - start )) s; the home page: site/screenshots/home.png"
