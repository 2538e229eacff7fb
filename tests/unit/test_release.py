"""One version source (paddlex_npu/version.py) for everything that names the version: the package metadata,
``--version``, ``info``, the images' OCI label (deploy/Dockerfile, scripts/ci-container.sh, the release workflow)
and CHANGELOG.md; /metrics' build info is checked in tests/serve/test_operations.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from paddlex_npu.version import __version__

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "paddlex_npu.cli", *args], capture_output=True, text=True, cwd=ROOT)
    return out.stdout


def test_the_version_is_a_release_version_and_setup_cfg_reads_it():
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", __version__)
    assert "version = attr: paddlex_npu.version.__version__" in (ROOT / "setup.cfg").read_text()


def test_version_and_info_print_it():
    assert _cli("--version").strip() == f"paddlex-npu {__version__}"
    assert f"- paddlex-npu: {__version__}\n" in _cli("info")


def test_the_changelog_has_a_section_for_it():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d\d-\d\d$", text, flags=re.M)


def test_the_image_label_is_the_version_the_build_checks():
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert re.search(r"^ARG VERSION$", dockerfile, flags=re.M)  # no default: a build without it stops
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    assert 'test "${installed}" = "${VERSION}"' in dockerfile  # the installed wheel's version, or the build fails
    ci = (ROOT / "scripts" / "ci-container.sh").read_text()
    assert '--build-arg VERSION="$("$VENV/bin/python" -c \'exec(open("paddlex_npu/version.py")' in ci
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    assert '--build-arg "VERSION=${VERSION}"' in workflow and 'if [ "${GITHUB_REF_NAME}" != "v${version}" ]' in workflow
    assert "id-token: write" in workflow and "pypa/gh-action-pypi-publish@release/v1" in workflow
