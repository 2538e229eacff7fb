"""The built sdist and wheel (scripts/ci-release.sh builds them with ``python -m build`` and sets RELEASE_DIST):
their metadata and what they hold, as PyPI and a user's pip get them."""

from __future__ import annotations

import os
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from paddlex_npu.version import __version__

DIST = os.environ.get("RELEASE_DIST")
pytestmark = pytest.mark.skipif(not DIST, reason="runs over a built dist: bash scripts/ci-release.sh")


def _wheel() -> zipfile.ZipFile:
    (path,) = Path(DIST).glob("paddlex_npu-*.whl")
    return zipfile.ZipFile(path)


def _sdist_names() -> list:
    (path,) = Path(DIST).glob("paddlex_npu-*.tar.gz")
    with tarfile.open(path) as tar:
        return [m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name]


def test_both_carry_the_one_version():
    assert sorted(p.name for p in Path(DIST).iterdir()) == [
        f"paddlex_npu-{__version__}-py3-none-any.whl",
        f"paddlex_npu-{__version__}.tar.gz",
    ]


def test_the_wheel_metadata_is_complete():
    meta = Parser().parsestr(_wheel().read(f"paddlex_npu-{__version__}.dist-info/METADATA").decode())
    assert meta["Metadata-Version"] >= "2.4" and meta["License-Expression"] == "Apache-2.0"
    assert meta["Version"] == __version__ and meta["Requires-Python"]
    assert meta["Description-Content-Type"] == "text/markdown" and meta.get_payload().startswith("# paddlex-npu")
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier")
    assert {u.split(",")[0] for u in meta.get_all("Project-URL")} >= {"Source", "Issues", "Changelog"}
    assert {"reference", "ocr", "serving", "all"} <= set(meta.get_all("Provides-Extra"))


def test_the_wheel_holds_the_package_and_its_sample_data_and_nothing_of_the_checkout():
    names = _wheel().namelist()
    for data in ("page.png", "lines/line-1.png", "output_dims.json"):
        assert f"paddlex_npu/samples/data/{data}" in names
    assert f"paddlex_npu-{__version__}.dist-info/licenses/LICENSE" in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"paddlex_npu", f"paddlex_npu-{__version__}.dist-info", f"paddlex_npu-{__version__}.data"}, tops
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".orig", ".rej"))]


def test_the_sdist_holds_what_builds_the_wheel_and_not_the_development_tree():
    names = _sdist_names()
    assert {"setup.cfg", "pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "PKG-INFO"} <= set(names)
    assert "paddlex_npu/samples/data/page.png" in names and "patches/paddlex-3.7.2.patch" in names
    assert not [n for n in names if n.split("/")[0] in {"tests", "docs", "scripts", "benchmarks", "deploy", ".github"}]
