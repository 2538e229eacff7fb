"""run/reference_acl.py: pyACL's answers read from the ATC command line a package records (ATC's option reference)
and the ONNX graph, so selftest's "manifest vs ACL" compares two sources and fails when they disagree."""

from __future__ import annotations

import json

from paddlex_npu.om import manifest as mf
from paddlex_npu.reports import selftest
from paddlex_npu.run.reference_acl import ReferenceAcl, parse_atc_command
from tests.onnx_models import two_input_model

MODEL = "PP-OCRv4_mobile_rec"


def test_dynamic_dims_as_cann_documents_them():
    """CANN aclmdlGetInputDynamicDims: data(1,1,40,-1), label(1,-1), mask(-1,-1) with
    --dynamic_dims="20,20,1,1; 40,40,2,2; 80,60,4,4" report 1,1,40,20,1,20,1,1 / 1,1,40,40,1,40,2,2 /
    1,1,40,80,1,60,4,4."""
    build = parse_atc_command(
        'atc --framework=5 --input_shape="data:1,1,40,-1;label:1,-1;mask:-1,-1" '
        '--dynamic_dims="20,20,1,1; 40,40,2,2; 80,60,4,4" --input_format=ND --soc_version=Ascend310P3'
    )
    assert build.gear_dims() == [[1, 1, 40, 20, 1, 20, 1, 1], [1, 1, 40, 40, 1, 40, 2, 2], [1, 1, 40, 80, 1, 60, 4, 4]]
    assert build.soc == "Ascend310P3" and build.batch == [] and build.hw == []


def test_batch_and_image_gears_and_ranges():
    batch = parse_atc_command("atc --input_shape=x:-1,3,32,32 --dynamic_batch_size=1,2,4,8")
    assert batch.batch == [1, 2, 4, 8] and batch.dims == []
    hw = parse_atc_command("atc --input_shape=x:1,3,-1,-1 --dynamic_image_size='640,640;960,960'")
    assert hw.hw == [[640, 640], [960, 960]]
    ranges = parse_atc_command("atc --input_shape='x:1~6,3,48,32~-1'")  # "32~-1" is no ATC form: kept as written
    assert ranges.inputs == [("x", ["1~6", "3", "48", "32~-1"])]


def test_inputs_follow_the_onnx_graph_order_and_fill_dims_in_written_order(tmp_path):
    """ACL reports inputs in model order; ATC fills the -1 dims in the order --input_shape writes them."""
    onnx_path = two_input_model(tmp_path / "inference.onnx")  # inputs x [N,3,H,W], a [N,2]
    build = parse_atc_command('atc --input_shape="a:-1,2;x:-1,3,-1,-1" --dynamic_dims="1,1,32,32;2,2,64,64"', onnx_path)
    assert [n for n, _ in build.inputs] == ["x", "a"]
    assert build.gear_dims() == [[1, 3, 32, 32, 1, 2], [2, 3, 64, 64, 2, 2]]


def _package(tmp_path, manifest: dict, command: str):
    folder = tmp_path / MODEL
    folder.mkdir(parents=True)
    man = mf.parse({**manifest, "soc_version": "Ascend310P3", "atc_command": command}, "test")
    man.save(folder / mf.MANIFEST_NAME)
    return tmp_path


REC = {"mode": "dymdims", "inputs": [{"name": "x", "format": "ND", "shape": [-1, 3, 48, -1]}]}
REC_ATC = 'atc --input_shape="x:-1,3,48,-1" --input_format=ND --dynamic_dims="1,320;6,3200" --soc_version=Ascend310P3'


def test_a_manifest_that_disagrees_with_what_atc_built_fails(tmp_path):
    root = _package(tmp_path / "same", {**REC, "gears": [[1, 320], [6, 3200]]}, REC_ATC)
    same = selftest._manifest_vs_acl(ReferenceAcl(), root, MODEL, 0)
    assert same.status == selftest.PASS and same.data["acl"] == [[1, 3, 48, 320], [6, 3, 48, 3200]], same.detail
    altered = _package(tmp_path / "altered", {**REC, "gears": [[1, 320], [6, 1600]]}, REC_ATC)
    check = selftest._manifest_vs_acl(ReferenceAcl(), altered, MODEL, 0)
    assert check.status == selftest.FAIL
    assert check.data["expected"] == [[1, 3, 48, 320], [6, 3, 48, 1600]]
    assert check.data["acl"] == [[1, 3, 48, 320], [6, 3, 48, 3200]]


def test_ranges_and_static_shapes_that_disagree_fail(tmp_path):
    dymshape = {
        "mode": "dymshape",
        "inputs": [{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 6], [3, 3], [48, 48], [32, 3200]]}],
    }
    root = _package(tmp_path / "r", dymshape, "atc --input_shape=x:1~8,3,48,32~3200")
    check = selftest._manifest_vs_acl(ReferenceAcl(), root, MODEL, 0)
    assert check.status == selftest.FAIL and "x dim 0: manifest [1, 6], ACL [1, 8]" in check.detail
    static = {"mode": "static", "inputs": [{"name": "x", "shape": [1, 3, 48, 320]}]}
    root = _package(tmp_path / "s", static, "atc --input_shape=x:1,3,48,640")
    check = selftest._manifest_vs_acl(ReferenceAcl(), root, MODEL, 0)
    assert check.status == selftest.FAIL and check.data["acl"] == [[1, 3, 48, 640]]


def test_a_package_without_its_atc_command_cannot_be_described(tmp_path):
    root = _package(tmp_path, {**REC, "gears": [[1, 320], [6, 3200]]}, REC_ATC)
    path = root / MODEL / mf.MANIFEST_NAME
    raw = json.loads(path.read_text())
    raw.pop("atc_command")
    path.write_text(json.dumps(raw))
    check = selftest._manifest_vs_acl(ReferenceAcl(), root, MODEL, 0)
    assert check.status == selftest.FAIL and check.detail.startswith("acl.mdl.load_from_file returned 100000")
