"""The manifest's ``output_dims``: expressions of the input dims, checked (nothing but arithmetic is evaluated)
and evaluated exactly; the sizer reserves what they give, data-dependent dims at their bound, and names what it
cannot size."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from paddlex_npu.errors import ConfigError
from paddlex_npu.om import manifest as mf
from paddlex_npu.om.output_shapes import OutputShapes, check, compile_dim, nbytes
from paddlex_npu.run.buffers import MIN_BYTES, OutputSizer

# What the solver writes for PP-OCRv4/v5/v6 recognisers' CTC length and DB detectors' maps.
CTC = "floor(floor(floor(d0_3/2 - 1/2)/2)/2 - 1/2) + 1"
DB = "4*floor(floor(d0_2/2 - 1/2)/2) + 4"


def test_the_ctc_length_is_floor_of_w_plus_3_over_8_at_every_width():
    """PP-OCRv6's T = floor((W + 3) / 8) (issue 20), evaluated exactly (Fractions, no float rounding)."""
    dim = compile_dim(CTC)
    assert all(dim({"d0_3": Fraction(w)}) == (w + 3) // 8 for w in range(8, 3201))
    db = compile_dim(DB)
    assert all(db({"d0_2": Fraction(h)}) == h for h in range(32, 4001, 32))


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true')", "d0_3.real", "open('x')", "d0_3 if 1 else 2", "[d0_3]", "x + 1", "1.5 * d0_3"],
)
def test_anything_but_arithmetic_on_input_dims_is_refused(text):
    with pytest.raises(ValueError, match="an output dim is an int, null, or an expression of input dims"):
        check([text], "output y")


def test_a_manifest_with_a_bad_output_dim_is_refused_naming_it():
    raw = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "outputs": ["y"]}
    with pytest.raises(ConfigError, match=r"output_dims of output y: output dim 'os.getcwd\(\)'"):
        mf.parse({**raw, "output_dims": [["os.getcwd()"]]}, "test")
    with pytest.raises(ConfigError, match="output_dims has 2 entries, outputs 1"):
        mf.parse({**raw, "output_dims": [[1], [2]]}, "test")
    ok = mf.parse({**raw, "output_dims": [["d0_0", 1, DB, "d0_3"]]}, "test")
    assert mf.parse(ok.model_dump(by_alias=True), "again").output_dims == [["d0_0", 1, DB, "d0_3"]]


def test_the_sizer_reserves_the_solved_shape_and_bounds_data_dependent_dims():
    shapes = OutputShapes([["d0_0", CTC, 18710], [None, 6], None], data_dependent_max=1000)
    sizer = OutputSizer([[-1, -1, 18710], [-1, 6], [-1]], [4, 4, 4], shapes=shapes, output_names=["p", "b", "q"])
    assert sizer.unsized() == ["q"]  # no dims and no ONNX: the runner refuses such a package at load
    sizer = OutputSizer([[-1, -1, 18710], [-1, 6]], [4, 4], shapes=OutputShapes(shapes.dims[:2], 1000))
    x = np.broadcast_to(np.float32(0), (6, 3, 48, 1203))
    logits, boxes = sizer.sizes([x])
    assert logits == -(-6 * 150 * 18710 * 4 // 4096) * 4096  # 150 = floor(1206 / 8) steps, rounded up to 4 KiB
    assert boxes == MIN_BYTES  # 1000 rows x 6 x 4 bytes
    assert sizer.sizes([x]) is sizer.sizes([x])  # cached per input shapes


def test_without_the_onnx_the_manifest_alone_sizes_the_outputs(tmp_path):
    """The device path (a package with only ``inference.om``): the runner gets no ONNX, so the manifest's
    ``output_dims`` size the buffers; without them it refuses to load, naming convert and custom_sizes."""
    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.om.package import resolve_om_package
    from paddlex_npu.run.runner import OMRunner
    from paddlex_npu.run.session import open_session
    from tests.onnx_models import image_model

    image_model(tmp_path / "inference.onnx")  # y = 2x, [N, 3, H, W]
    (tmp_path / "inference.yml").write_text("Global:\n  model_name: test\n")
    raw = {"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 3, -1, -1]}], "outputs": ["y"]}
    package = resolve_om_package(tmp_path, "reference")

    def runner(manifest):
        man = mf.parse(manifest, "test")
        opened = open_session("reference", package, 0, man)
        return OMRunner(opened, man, OMBackendConfig(), name="m", onnx_path=None)

    sized = runner({**raw, "output_dims": [["d0_0", 3, "d0_2", "d0_3"]]})
    x = np.ones((2, 3, 64, 96), np.float32)
    assert sized.output_sizes([x]) == [2 * 3 * 64 * 96 * 4]
    assert np.array_equal(sized([x])[0], 2 * x)
    sized.close()
    with pytest.raises(ConfigError, match=r"m: the size of outputs \['Mul_0:0:y'\] cannot be derived.*convert"):
        runner(raw)


def test_check_takes_ints_from_0_null_and_expressions_and_refuses_the_rest():
    check([0, 1, 18710, None, "d0_0", "3", CTC], "output y")  # nothing raised: each is a valid dim
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"^output y: output dim {bad!r} is not a non-negative int"):
            check([2, bad], "output y")
    with pytest.raises(ValueError, match=r"^output y: output dim 'x \+ 1'"):
        check([None, "x + 1"], "output y")


def test_the_expressions_compile_to_exact_integer_functions():
    """Integer constants are Fractions (``7/2`` is 3.5 before ``floor``, not 3 or a rounded float); the cache is
    cleared so that the expressions are compiled here, not taken from an earlier test."""
    compile_dim.cache_clear()
    assert compile_dim("floor(7/2 + d0_0/2)")({"d0_0": Fraction(1)}) == 4  # floor(3.5 + 0.5)
    assert compile_dim("ceiling(d0_0/3)")({"d0_0": Fraction(7)}) == 3
    assert compile_dim("Max(d0_0, 5) + Min(d1_2, 2) + Mod(d0_0, 4)")({"d0_0": Fraction(7), "d1_2": Fraction(9)}) == 12
    assert compile_dim("(10**20 + 1)/(10**20) * d0_0")({"d0_0": Fraction(10**20)}) == 10**20 + 1
    with pytest.raises(ValueError, match="output dim 'd3_0' names d3_0, which is no input dim of the model"):
        compile_dim("d3_0")({"d0_0": Fraction(1)})


def test_output_shapes_evaluate_each_dim_kind_per_output():
    shapes = OutputShapes([["d0_0", 6, None, "d0_3 - 10", "d0_3 - 8", "d1_1 * 2"], None, []], data_dependent_max=7)
    assert shapes.dims == [["d0_0", 6, None, "d0_3 - 10", "d0_3 - 8", "d1_1 * 2"], None, []]
    assert [shapes.known(i) for i in range(3)] == [True, False, True]
    out = shapes.shape(0, [[2, 3, 4, 8], [5, 9]])
    assert out == [2, 6, 7, 0, 0, 18]  # a negative expression is clamped to 0
    assert [type(d) for d in out] == [int] * 6
    assert shapes.shape(0, [(3, 3, 4, 12), (1, 4)]) == [3, 6, 7, 2, 4, 8]
    assert shapes.shape(1, [[2, 3, 4, 8], [5, 9]]) == []  # unknown dims: none (the runner asks ONNX)
    assert shapes.shape(2, [[2, 3, 4, 8], [5, 9]]) == []  # a scalar output


def test_nbytes_is_elements_times_itemsize():
    assert nbytes([2, 3, 5], 4) == 120 and nbytes([], 8) == 8 and nbytes([7, 0], 4) == 0
