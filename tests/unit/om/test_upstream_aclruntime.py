"""ais_bench's own test cases (``ais-bench_workload/tool/ais_bench/test/`` and ``api_samples/``, upstream merge of
2025-12, read in the ``Yanguan619/aclruntime`` copy), run against the CPU reference runtime.

The model is upstream's two-input ``Add`` (``test/generate_add_model.py``), built as ``test/get_add_model_data.sh``
builds its OMs: static ``1,3,32,32``; dymbatch ``-1,3,32,32`` with batches 1,2,4,8; dymhw ``1,3,-1,-1`` with 32,32
and 64,64 (two image inputs); dymdims ``-1,3,-1,-1`` (ND) with ``1,32,32,1,32,32;4,64,64,4,64,64``; dymshape
``[1~4,3,32~64,32~64]``. Upstream's resnet50 cases use the same calls on another model; the realsize arithmetic
is asserted here on the Add model's shapes. Every test names the upstream case it mirrors; values are compared too
(out = in1 + in2). Upstream's ``aclruntime.InferenceSession.run(names, feeds)`` takes device tensors; the
reference's ``run(feeds)`` takes the arrays, as ``InferSession.infer``'s lower half does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.om import paths
from paddlex_npu.run.reference import InferSession, _parse_dym_string, dtype
from tests.helpers import raises_acl_failure
from tests.onnx_models import add_model

IMG = {"format": "NCHW"}
MANIFESTS = {
    "bs1": {"mode": "static", "inputs": [{"name": n, "shape": [1, 3, 32, 32]} for n in ("input1", "input2")]},
    "dymbatch": {
        "mode": "dymbatch",
        "inputs": [{"name": n, "shape": [-1, 3, 32, 32]} for n in ("input1", "input2")],
        "gears": [[1], [2], [4], [8]],
    },
    "dymhw": {
        "mode": "dymhw",
        "inputs": [{"name": n, **IMG, "shape": [1, 3, -1, -1]} for n in ("input1", "input2")],
        "gears": [[32, 32], [64, 64]],
    },
    "dymdims": {
        "mode": "dymdims",
        "inputs": [{"name": n, "format": "ND", "shape": [-1, 3, -1, -1]} for n in ("input1", "input2")],
        "gears": [[1, 32, 32, 1, 32, 32], [4, 64, 64, 4, 64, 64]],
    },
    "dymshape": {
        "mode": "dymshape",
        "inputs": [
            {"name": n, "shape": [-1, 3, -1, -1], "range": [[1, 4], [3, 3], [32, 64], [32, 64]]}
            for n in ("input1", "input2")
        ],
    },
}
MODE_OF = {"bs1": "static", "dymbatch": "dymbatch", "dymhw": "dymhw", "dymdims": "dymdims", "dymshape": "dymshape"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("add_model") / "model"
    add_model(folder / "add_model.onnx")
    return folder


def session(model_dir: Path, kind: str) -> InferSession:
    """``add_model_<kind>.om`` as upstream names them; the reference runs add_model.onnx under that manifest."""
    return InferSession(
        0,
        str(model_dir / f"add_model_{kind}.om"),
        onnx_path=str(model_dir / "add_model.onnx"),
        manifest=MANIFESTS[kind],
    )


def feeds(shape, a=1.0, b=2.0):
    return [np.full(shape, a, np.float32), np.full(shape, b, np.float32)]


# ---- test/UT/test_aclruntimeAPI/test_dynamic_set.py -------------------------------------------------------------
def test_set_dynamic_batchsize(model_dir):
    """test_dynamic_set.py::TestClass::test_set_dynamic_batchsize: realsize doubles with the batch 1 -> 2 -> 4 -> 8."""
    s = session(model_dir, "dymbatch")
    sizes = []
    for batch in (1, 2, 4, 8):
        s.set_dynamic_batchsize(batch)
        sizes.append(s.get_inputs()[0].realsize)
    assert sizes == [sizes[0] * k for k in (1, 2, 4, 8)] and sizes[0] == 3 * 32 * 32 * 4


def test_set_dynamic_hw(model_dir):
    """test_dynamic_set.py::TestClass::test_set_dynamic_hw: H, W doubled -> realsize x4 (both image inputs)."""
    s = session(model_dir, "dymhw")
    s.set_dynamic_hw(32, 32)
    base = [d.realsize for d in s.get_inputs()]
    s.set_dynamic_hw(64, 64)
    assert [d.realsize for d in s.get_inputs()] == [b * 4 for b in base]


def test_set_dynamic_dims(model_dir):
    """test_dynamic_set.py::TestClass::test_set_dynamic_dims: batch x4 and H, W x2 -> realsize x16."""
    s = session(model_dir, "dymdims")
    s.set_dynamic_dims("input1:1,3,32,32;input2:1,3,32,32")
    base = s.get_inputs()[0].realsize
    s.set_dynamic_dims("input1:4,3,64,64;input2:4,3,64,64")
    assert s.get_inputs()[0].realsize == base * 16


def test_set_dynamic_shape(model_dir):
    """test_dynamic_set.py::TestClass::test_set_dynamic_shape (and test_dymshape.py::test_get_input_info)."""
    s = session(model_dir, "dymshape")
    sizes = []
    for dims in ("1,3,32,32", "1,3,64,64", "2,3,64,64", "4,3,64,64"):
        s.set_dynamic_shape(f"input1:{dims};input2:{dims}")
        sizes.append(s.get_inputs()[0].realsize)
    assert sizes[1] == sizes[0] * 4 and sizes[2] == sizes[1] * 2 and sizes[3] == sizes[2] * 2


# ---- test/UT/test_dymshape.py ----------------------------------------------------------------------------------
def test_infer_dynamicshape(model_dir):
    """test_dymshape.py::test_infer_dynamicshape (and _case1, _case2: other shapes and output sizes)."""
    for dims, outsize in (((1, 3, 32, 32), 100000), ((4, 3, 32, 64), 200000), ((2, 3, 64, 48), 80000)):
        s = session(model_dir, "dymshape")
        s.set_dynamic_shape(";".join(f"{n}:{','.join(map(str, dims))}" for n in ("input1", "input2")))
        s.set_custom_outsize([outsize])
        x = feeds(dims, 0.25, 0.5)
        assert x[0].nbytes == s.get_inputs()[0].realsize
        (out,) = s.run(x)
        np.testing.assert_array_equal(out, x[0] + x[1])
        assert len(s.summary().exec_time_list) == 1


def test_infer_no_set_dynamicshape(model_dir, capsys):
    """test_dymshape.py::test_infer_no_set_dynamicshape: run before any shape was set -> RuntimeError."""
    s = session(model_dir, "dymshape")
    s.set_custom_outsize([10000])
    with raises_acl_failure(capsys, "needsize:0"):
        s.run(feeds((1, 3, 32, 32)))


def test_infer_no_set_outsize(model_dir, capsys):
    """test_dymshape.py::test_infer_no_set_outsize: a dymshape OM's outputs have size 0 until outsizes are set."""
    s = session(model_dir, "dymshape")
    s.set_dynamic_shape("input1:1,3,32,32;input2:1,3,32,32")
    with raises_acl_failure(capsys, "no buffer reserved"):
        s.run(feeds((1, 3, 32, 32)))


# ---- test/UT/test_inference.py ---------------------------------------------------------------------------------
def test_infer_invalid_input_size(model_dir, capsys):
    """test_inference.py::test_infer_invalid_input_size: an input of realsize + 128 bytes -> RuntimeError."""
    s = session(model_dir, "bs1")
    size = s.get_inputs()[0].realsize
    wrong = np.zeros((size + 128) // 4, np.float32)
    with raises_acl_failure(capsys, rf"in size:{size + 128} needsize:{size} not match"):
        s.run([wrong, np.zeros((1, 3, 32, 32), np.float32)])


# ---- test/UT/test_aclruntimeAPI/test_get_inputs_outputs.py -----------------------------------------------------
def test_add_model_get_inputs(model_dir):
    """test_get_inputs_outputs.py::test_add_model_get_inputs."""
    descs = session(model_dir, "bs1").get_inputs()
    assert isinstance(descs, list) and len(descs) == 2
    for i, d in enumerate(descs):
        # upstream also asserts `int(d.datatype) in [-1, 0, ..., 11]` (always true) and `d.format == 0`, which the
        # reference hard-codes (reference_om.py): here the datatype the Add model's float32 inputs must give
        assert d.name == f"input{i + 1}" and d.shape == [1, 3, 32, 32]
        assert d.size == 12288 and d.realsize == 12288 and d.datatype == dtype.float32


def test_add_model_get_outputs(model_dir):
    """test_get_inputs_outputs.py::test_add_model_get_outputs: [1,3,32,32], 12288 bytes (upstream's `format == 0` is
    what the reference hard-codes, so it is not asserted)."""
    descs = session(model_dir, "bs1").get_outputs()
    assert isinstance(descs, list) and len(descs) == 1
    (d,) = descs
    assert d.name[-6:] == "output" and d.shape == [1, 3, 32, 32] and d.datatype == dtype.float32
    assert d.size == 12288 and d.realsize == 12288


# ---- api_samples/interface_api_usage/api_infer/infer_api_<mode>.py ---------------------------------------------
@pytest.mark.parametrize(
    "kind, shape, kwargs",
    [
        ("bs1", (1, 3, 32, 32), {}),  # infer_api_static.py
        ("dymbatch", (4, 3, 32, 32), {}),  # infer_api_dymbatch.py
        ("dymhw", (1, 3, 64, 64), {}),  # infer_api_dymhw.py
        ("dymdims", (4, 3, 64, 64), {}),  # infer_api_dymdims.py
        ("dymshape", (4, 3, 32, 32), {"custom_sizes": 100000}),  # infer_api_dymshape.py
    ],
)
def test_infer_api_in_every_mode(model_dir, kind, shape, kwargs):
    """api_infer/infer_api_<mode>.py: ``session.infer(feeds, mode=...)`` on ones, then ``free_resource``."""
    s = session(model_dir, kind)
    x = feeds(shape, 1.0, 1.0)
    (out,) = s.infer(x, mode=MODE_OF[kind], **kwargs)
    assert out.shape == shape and np.all(out == 2.0)
    s.free_resource()
    with pytest.raises(RuntimeError, match="freed"):
        s.infer(x, mode=MODE_OF[kind], **kwargs)


def test_infer_values_are_the_sum_in_every_mode(model_dir):
    """Beyond upstream's samples (which only log the outputs): out == in1 + in2 for random inputs, every mode."""
    rng = np.random.default_rng(0)
    cases = {"bs1": (1, 3, 32, 32), "dymbatch": (2, 3, 32, 32), "dymhw": (1, 3, 32, 32), "dymdims": (1, 3, 32, 32)}
    cases["dymshape"] = (3, 3, 40, 56)
    for kind, shape in cases.items():
        a, b = rng.standard_normal(shape, np.float32), rng.standard_normal(shape, np.float32)
        (out,) = session(model_dir, kind).infer([a, b], mode=MODE_OF[kind])
        np.testing.assert_array_equal(out, a + b)


def test_a_gear_the_om_lacks_fails_as_on_the_device(model_dir, capsys):
    """interface.py infer_mode_switch -> C++ CheckDynamicBatchSize / CheckDynamicHWSize / CheckDynamicDims."""
    with raises_acl_failure(capsys, r"dymBatch parameter 3 is not correct"):
        session(model_dir, "dymbatch").infer(feeds((3, 3, 32, 32)), mode="dymbatch")
    with raises_acl_failure(capsys, r"dymHW parameter 48,48 is not correct"):
        session(model_dir, "dymhw").infer(feeds((1, 3, 48, 48)), mode="dymhw")
    with raises_acl_failure(capsys, r"dynamic_dims parameter .* is not correct"):
        session(model_dir, "dymdims").infer(feeds((2, 3, 32, 32)), mode="dymdims")
    with raises_acl_failure(capsys, "outside the range"):
        session(model_dir, "dymshape").infer(feeds((5, 3, 32, 32)), mode="dymshape")


# ---- test/UT/utils_file/test_interface_check.py ----------------------------------------------------------------
def test_check_device_range_valid(model_dir):
    """test_interface_check.py::test_check_device_range_valid: a str -> TypeError, -1 and 256 -> ValueError."""
    om, onnx = str(model_dir / "add_model_bs1.om"), str(model_dir / "add_model.onnx")
    with pytest.raises(TypeError):
        InferSession("0", om, onnx_path=onnx)
    for device in (-1, 256):
        with pytest.raises(ValueError):
            InferSession(device, om, onnx_path=onnx)


def test_check_model_path_legality(model_dir):
    """test_interface_check.py::test_check_model_path_legality: an empty path -> RuntimeError, a non-.om -> error."""
    with pytest.raises(RuntimeError, match="empty model path"):
        InferSession(0, "")
    with pytest.raises(ValueError, match="not an OM file"):
        InferSession(0, str(model_dir / "add_model.onnx"))


def test_check_loop_size(model_dir):
    """test_interface_check.py::test_check_positive_integer / check_loop_size: 1..100000, an int."""
    om, onnx = str(model_dir / "add_model_bs1.om"), str(model_dir / "add_model.onnx")
    with pytest.raises(TypeError):
        InferSession(0, om, loop=1.5, onnx_path=onnx, manifest=MANIFESTS["bs1"])
    for loop in (0, 100001):
        with pytest.raises(ValueError):
            InferSession(0, om, loop=loop, onnx_path=onnx, manifest=MANIFESTS["bs1"])


def test_check_list_and_custom_size(model_dir):
    """test_interface_check.py::test_check_list and ::test_check_custom_size, as ``infer`` applies them."""
    s = session(model_dir, "dymshape")
    x = feeds((1, 3, 32, 32))
    with pytest.raises(ValueError):
        s.infer(tuple(x), mode="dymshape")  # not a list
    with pytest.raises(ValueError):
        s.infer([], mode="dymshape")
    with pytest.raises(ValueError):
        s.infer(x, mode="dymshape", custom_sizes=None)  # dymshape needs custom sizes
    for bad in (-1, 0, [1, "a"], [], [0]):
        with pytest.raises((ValueError, TypeError)):
            s.infer(x, mode="dymshape", custom_sizes=bad)
    with pytest.raises(ValueError, match="infer mode is illegal"):
        s.infer(x, mode="dymfoo")


# ---- test/UT/utils_file/test_path_security_check.py ------------------------------------------------------------
@pytest.fixture()
def legal(tmp_path) -> Path:
    add_model(tmp_path / "inference.onnx")
    (tmp_path / "inference.onnx").chmod(0o640)
    return tmp_path / "inference.onnx"


def test_check_path_legality_accepts_a_legal_file(legal):
    """test_path_security_check.py: a readable file owned by the user, at most 755, under the limits."""
    paths.check_model_path(legal.with_suffix(".om"), legal)


@pytest.mark.parametrize(
    "mode, match",
    [(0o662, "writable by its group or others"), (0o646, "writable by its group or others"), (0o044, "no read")],
)
def test_permission_rules(legal, mode, match):
    """test_path_security_check.py: group/other write bits refused (<= 0o755), the owner-read bit required (0o400)."""
    legal.chmod(mode)
    try:
        with pytest.raises(ValueError, match=r"^The path:.+ is illegal\. .*" + match):
            paths.check_model_path(legal.with_suffix(".om"), legal)
    finally:
        legal.chmod(0o640)


def test_soft_links_are_refused(legal):
    """test_path_security_check.py (is_softlink): a symbolic link is not opened."""
    link = legal.with_name("link.onnx")
    link.symlink_to(legal)
    with pytest.raises(ValueError, match="symbolic link"):
        paths.check_model_path(link.with_suffix(".om"), link)


def test_path_length_name_length_and_depth(tmp_path):
    """path_security_check.is_legal_path_length (4096 / 255) and C++ File::IsPathDepthValid (at most 32 '/')."""
    with pytest.raises(ValueError, match="over 255"):
        paths.check_model_path(tmp_path / ("a" * 256) / "m.om")
    with pytest.raises(ValueError, match="over 4096"):
        paths.check_model_path(tmp_path / "/".join(["b" * 200] * 21) / "m.om")
    deep = "/" + "/".join(["d"] * 32) + "/m.om"  # 33 separators
    assert deep.count("/") == 33
    with pytest.raises(ValueError, match="32 folders deep|over 32"):
        paths.check_model_path(deep)
    paths.check_model_path("/" + "/".join(["d"] * 31) + "/m.om")  # 32: allowed (the file need not exist)


def test_path_white_list(tmp_path):
    """path_security_check.is_match_path_white_list: letters, digits and _ - . / only."""
    with pytest.raises(ValueError, match="characters"):
        paths.check_model_path(tmp_path / "a$b" / "m.om")
    paths.check_model_path(tmp_path / "a_b-c.d" / "m.om")


# ---- test/cpp_test/test_utils.cpp ------------------------------------------------------------------------------
def test_is_legal_dym_string():
    """test_utils.cpp IsLegalDymString_TrueAndFalse (and IsInputNameValidChar_TrueAndFalse)."""
    assert _parse_dym_string("input1:1,2,3;input2:4,5,6") == {"input1": [1, 2, 3], "input2": [4, 5, 6]}
    assert _parse_dym_string("abc_./-:1") == {"abc_./-": [1]}
    for bad in ("a" * 5000, "input1:", "input1:abc", "input1:1,2,3;input2:", "input1:1,2,3;input2:0,2,3"):
        with pytest.raises(RuntimeError, match="illegal"):
            _parse_dym_string(bad)
    with pytest.raises(RuntimeError, match="illegal"):
        _parse_dym_string("input1$:1,2,3")


def test_is_dym_shape_valid():
    """test_utils.cpp IsDymShapeValid_TrueAndFalse: positive dims, at most 6, at most 9 digits each."""
    assert _parse_dym_string("x:1,2,3") == {"x": [1, 2, 3]}
    for dims in ("0,2,3", "1,2,3,4,5,6,7", "1,2222222222"):
        with pytest.raises(RuntimeError, match="illegal"):
            _parse_dym_string(f"x:{dims}")


def test_split_string_by_comma_length():
    """test_utils.cpp SplitStringByComma_NormalAndException: one input's dims text of 40 characters throws."""
    with pytest.raises(RuntimeError, match="out of length"):
        _parse_dym_string("x:" + "1," * 19 + "1")


def test_split_sting_get_name_dims_mul_map():
    """test_utils.cpp SplitStingGetNameDimsMulMap_SuccessAndFail: ``input:1,2,3`` -> 6 elements; no dims fails."""
    parsed = _parse_dym_string("input:1,2,3")
    assert int(np.prod(parsed["input"])) == 6
    for bad in ("input:1,abc", "input"):
        with pytest.raises(RuntimeError):
            _parse_dym_string(bad)
