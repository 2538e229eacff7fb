"""The OM manifest's limits and derived views (om/manifest.py): ATC's gear limits, the refusals, the ranges and
gear shapes it gives the runner, and the ONNX digest."""

from __future__ import annotations

import hashlib

import pytest

from paddlex_npu.errors import ConfigError, InputShapeError
from paddlex_npu.om import manifest as mf
from paddlex_npu.run.gears import check_ranges

HW_INPUT = [{"name": "x", "shape": [1, 3, -1, -1]}]


def parse(**kw) -> mf.OMManifest:
    return mf.parse(kw, "test")


def test_sha256_is_the_files_sha256_across_read_blocks(tmp_path):
    data = bytes(range(256)) * (5 * 4096 + 3)  # 5 MiB + 768 bytes: several 1 MiB blocks and a partial one
    (tmp_path / "a").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    assert mf.sha256(tmp_path / "a") == hashlib.sha256(data).hexdigest()
    assert mf.sha256(str(tmp_path / "empty")) == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("n", [2, 100])
def test_atc_takes_2_to_100_gears(n):
    man = parse(mode="dymhw", inputs=HW_INPUT, gears=[[32 * (k + 1), 32] for k in range(n)])
    assert len(man.gear_shapes()) == n and man.gear_shapes()[-1] == [[1, 3, 32 * n, 32]]


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"mode": "dymhw", "inputs": HW_INPUT, "gears": [[32, 32]] * 101}, "needs 2 to 100 gears"),
        ({"mode": "dymhw", "inputs": HW_INPUT, "gears": [[32, 32]]}, "needs 2 to 100 gears"),
        ({"mode": "dymhw", "inputs": HW_INPUT}, "needs 2 to 100 gears"),
        ({"mode": "dymhw", "inputs": HW_INPUT, "gears": [[32, 32], [0, 64]]}, "2 positive values"),
        ({"mode": "dymhw", "inputs": HW_INPUT, "gears": [[32, 32], [64]]}, "2 positive values"),
        ({"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 8]}], "gears": [[1], [0]]}, "1 positive"),
        ({"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, -1, 8]}], "gears": [[1], [2]]}, "only dim 0"),
        ({"mode": "dymbatch", "inputs": [{"name": "x", "shape": [2, -1]}], "gears": [[1], [2]]}, "only dim 0"),
        (
            {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, 8]}], "gears": [[32, 32], [64, 64]]},
            "-1 at H and W and no other",
        ),
        (
            {
                "mode": "dymhw",
                "inputs": [{"name": "x", "shape": [1, 3, -1, -1], "format": "ND"}],
                "gears": [[1, 2]] * 2,
            },
            r"inputs \['x \(ND, rank 4\)'\] are not 4-D",
        ),
        (
            {"mode": "dymhw", "inputs": [{"name": "s", "shape": [1, -1, -1]}], "gears": [[1, 2]] * 2},
            r"s \(NCHW, rank 3\)",
        ),
        ({"mode": "dymdims", "inputs": [{"name": "x", "shape": [1, 8]}], "gears": [[1], [2]]}, "needs -1 dims"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [1, 8]}]}, "needs -1 dims"),
        (
            {
                "mode": "dymshape",
                "inputs": [{"name": "x", "shape": [1, -1]}],
                "outputs": ["y"],
                "data_dependent": ["z"],
            },
            r"data_dependent names \['z'\], which are not outputs \(y\)",
        ),
        (
            {
                "mode": "dymdims",
                "inputs": [{"name": "x", "shape": [1, -1]}],
                "gears": [[1], [2]],
                "outputs": ["y"],
                "data_dependent": ["y"],
            },
            "build the OM as dymshape",
        ),
        (
            {
                "mode": "dymdims",
                "inputs": [{"name": "x", "shape": [-1, 8], "range": [[1, 4], [8, 8]]}],
                "gears": [[1], [2]],
            },
            "ranges are for dymshape only",
        ),
        (
            {"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 8], "range": [[1, 4]]}]},
            "range has 1 dims, shape 2",
        ),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 8], "range": [[0, 4], [8, 8]]}]}, "below 1"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 8], "range": [[5, 4], [8, 8]]}]}, "empty"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 8], "range": [[1, 4], [1, 8]]}]}, "fixed at 8"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, 0]}]}, "neither positive nor -1"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1, -2]}]}, "neither positive nor -1"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1], "dtype": "float128"}]}, "dtype 'float128'"),
        ({"mode": "dymshape", "inputs": [{"name": "x", "shape": [-1], "format": "NC1HWC0"}]}, "format 'NC1HWC0'"),
        (
            {"schema": "paddlex-npu/om-manifest/2", "mode": "dymshape", "inputs": [{"name": "x", "shape": [-1]}]},
            "schema",
        ),
    ],
)
def test_what_atc_would_refuse_is_refused(raw, match):
    with pytest.raises(ConfigError, match=match):
        mf.parse(raw, "test")


def test_what_atc_takes_is_taken():
    parse(mode="dymbatch", inputs=[{"name": "x", "shape": [-1, 8]}, {"name": "k", "shape": [2]}], gears=[[1], [4]])
    parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 8], "range": [[1, -1], [8, 8]]}])
    parse(mode="dymshape", inputs=[{"name": "x", "shape": [1, 8]}], outputs=["boxes"], data_dependent=["boxes"])
    parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1]}], data_dependent=[])
    for dtype in mf.DTYPES:
        parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1], "dtype": dtype, "format": "ND"}])


def test_a_dymshape_input_without_ranges_keeps_its_fixed_dims_fixed():
    man = parse(mode="dymshape", inputs=[{"name": "x", "shape": [1, 3, -1, -1]}])
    assert man.input_ranges() == {"x": [(1, 1), (3, 3), (1, -1), (1, -1)]}
    check_ranges(man, [[1, 3, 7, 5000]])
    for shape in ([2, 3, 32, 32], [1, 4, 32, 32], [1, 3, 32]):
        with pytest.raises(InputShapeError, match=r"is outside the OM's dymshape ranges x:\[1,3,-1,-1\]"):
            check_ranges(man, [shape])
    ranged = parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 3, -1], "range": [[1, 8], [3, 3], [32, -1]]}])
    assert ranged.input_ranges() == {"x": [(1, 8), (3, 3), (32, -1)]}
    assert ranged.describe() == "dymshape ranges x:[1~8,3,>=32]"


def test_gear_shapes_per_mode_and_their_largest_bytes():
    batch = parse(
        mode="dymbatch", inputs=[{"name": "a", "shape": [-1, 8]}, {"name": "b", "shape": [-1, 2]}], gears=[[1], [4]]
    )
    assert batch.gear_shapes() == [[[1, 8], [1, 2]], [[4, 8], [4, 2]]]
    assert batch.max_bytes(0, 4) == 128 and batch.max_bytes(1, 2) == 16
    hw = parse(mode="dymhw", inputs=HW_INPUT, gears=[[32, 64], [96, 32]])
    assert hw.gear_shapes() == [[[1, 3, 32, 64]], [[1, 3, 96, 32]]]
    assert hw.max_bytes(0, 4) == 3 * 96 * 32 * 4
    assert hw.describe() == "dymhw gears x:1,3,32,64 | x:1,3,96,32"
    dims = parse(
        mode="dymdims",
        inputs=[{"name": "a", "shape": [-1, 3, -1], "format": "ND"}, {"name": "b", "shape": [-1, 2], "format": "ND"}],
        gears=[[1, 10, 1], [2, 20, 3]],
    )
    assert dims.gear_shapes() == [[[1, 3, 10], [1, 2]], [[2, 3, 20], [3, 2]]]
    static = parse(mode="static", inputs=[{"name": "x", "shape": [2, 5]}])
    assert static.gear_shapes() == [[[2, 5]]] and static.max_bytes(0, 8) == 80
    shape = parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 5]}])
    assert shape.max_bytes(0, 4) == 0
    with pytest.raises(ValueError, match="mode dymshape has no gears"):
        shape.gear_shapes()


@pytest.mark.parametrize(
    "soc, refused",
    [("Ascend310", True), ("Ascend310B1", True), ("Ascend310P3", False), ("Ascend910B", False), ("", False)],
)
def test_dymshape_is_refused_only_on_chips_without_dynamic_shape(soc, refused):
    man = parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 5]}], soc_version=soc)
    assert mf.no_dymshape(soc) is refused
    if refused:
        with pytest.raises(ConfigError, match=f"{soc} has no dynamic shape"):
            man.check_soc()
    else:
        man.check_soc()
    parse(mode="dymbatch", inputs=[{"name": "x", "shape": [-1, 5]}], gears=[[1], [2]], soc_version=soc).check_soc()


def test_ranges_as_atc_writes_them_and_as_messages_say_them():
    assert [mf.range_text(*r) for r in ((3, 3), (1, -1), (32, -1), (32, 640))] == ["3", "-1", "-1", "32~640"]
    assert [mf.range_label(*r) for r in ((3, 3), (1, -1), (32, -1), (32, 640))] == ["3", "-1", ">=32", "32~640"]
    assert mf.in_ranges([2, 640], [(1, 4), (32, 640)]) and mf.in_ranges([4, 10**6], [(1, 4), (32, -1)])
    assert not mf.in_ranges([5, 64], [(1, 4), (32, 640)]) and not mf.in_ranges([2, 31], [(1, 4), (32, -1)])
    assert not mf.in_ranges([2], [(1, 4), (32, 640)])


def test_an_om_without_a_manifest_is_taken_as_its_descriptors_say():
    dyn = mf.default_for(["x"], [[1, 3, -1, -1]], ["float16"], ["y"], [[1, 1, -1, -1]])
    assert dyn.mode == "dymshape" and dyn.inputs[0].shape == [1, 3, -1, -1] and dyn.inputs[0].dtype == "float16"
    assert dyn.data_dependent == [] and dyn.outputs == ["y"]
    nms = mf.default_for(["x", "s"], [[1, 3, 640, 640], [1, 2]], ["float32", "float32"], ["boxes", "n"], [[-1, 6], [1]])
    assert nms.mode == "dymshape" and nms.data_dependent == ["boxes"]
    fixed = mf.default_for(["x"], [[1, 3, 8, 8]], ["float32"], ["y"], [[1, 10]])
    assert fixed.mode == "static" and fixed.gear_shapes() == [[[1, 3, 8, 8]]]
    assert mf.default_for(["x"], [[1, 3, 8, 8]], ["float32"], ["y"]).mode == "static"


def test_load_reads_what_save_wrote_and_names_the_file_it_cannot_read(tmp_path):
    man = parse(mode="dymhw", inputs=HW_INPUT, gears=[[32, 32], [64, 64]], outputs=["y"], soc_version="Ascend310P3")
    path = man.save(tmp_path / mf.MANIFEST_NAME)
    assert mf.load(path) == man and '"schema": "paddlex-npu/om-manifest/1"' in path.read_text()
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(Exception, match=r"bad.json cannot be read as JSON"):
        mf.load(tmp_path / "bad.json")
    (tmp_path / "wrong.json").write_text('{"mode": "dymhw", "inputs": []}')
    with pytest.raises(ConfigError, match=r"invalid OM manifest in .*wrong.json: .*needs -1 dims"):
        mf.load(tmp_path / "wrong.json")
    assert mf.parse(man, "again") is man


def test_describe_joins_inputs_and_gears_as_messages_show_them():
    two = parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 3]}, {"name": "s", "shape": [1, -1]}])
    assert two.describe() == "dymshape ranges x:[-1,3]; s:[1,-1]"
    gears = parse(
        mode="dymbatch", inputs=[{"name": "a", "shape": [-1, 2]}, {"name": "b", "shape": [-1]}], gears=[[1], [2]]
    )
    assert gears.describe() == "dymbatch gears a:1,2;b:1 | a:2,2;b:2"
    assert mf.range_label(2, -1) == ">=2" and mf.range_label(1, 5) == "1~5"


def test_the_manifest_file_is_indented_utf8_json_without_unset_fields(tmp_path):
    man = parse(mode="dymbatch", inputs=[{"name": "图像", "shape": [-1, 2], "format": "ND"}], gears=[[1], [2]])
    text = man.to_json()
    assert text == (
        '{\n  "schema": "paddlex-npu/om-manifest/1",\n  "mode": "dymbatch",\n  "inputs": [\n    {\n'
        '      "name": "图像",\n      "dtype": "float32",\n      "format": "ND",\n      "shape": [\n        -1,\n'
        '        2\n      ]\n    }\n  ],\n  "gears": [\n    [\n      1\n    ],\n    [\n      2\n    ]\n  ],\n'
        '  "outputs": [],\n  "data_dependent": []\n}\n'
    )
    assert man.save(tmp_path / "m.json").read_bytes() == text.encode("utf-8")


def test_a_descriptor_dim_of_0_is_dynamic_as_the_shape_takes_it():
    """An input dim the descriptor gives as 0 is not fixed: the manifest is dymshape with -1 there (it was taken
    as static with a -1 dim, which the manifest's own check refused)."""
    man = mf.default_for(["x"], [[1, 3, 0, 0]], ["float32"], ["y"], [[1, 10]])
    assert man.mode == "dymshape" and man.inputs[0].shape == [1, 3, -1, -1] and man.data_dependent == []
    assert man.input_ranges() == {"x": [(1, 1), (3, 3), (1, -1), (1, -1)]}
    one = mf.default_for(["x"], [[1, 1]], ["float32"], ["y"], [[1, 1]])
    assert one.mode == "static" and one.inputs[0].shape == [1, 1]


def test_the_error_lists_every_problem_with_its_place():
    with pytest.raises(ConfigError) as e:
        mf.parse({"mode": "dymhw", "inputs": [{"name": "x", "shape": "no"}], "bogus": 1}, "here")
    assert str(e.value).startswith("invalid OM manifest in here: inputs.0.shape: ")
    assert "; bogus: Extra inputs are not permitted" in str(e.value)
    with pytest.raises(ConfigError, match=r"^invalid OM manifest in here: <root>: Value error, mode dymhw needs -1"):
        mf.parse({"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 2]}]}, "here")


def test_output_dims_without_output_names_are_checked_too():
    man = parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 3]}], output_dims=[["d0_0", 3]])
    assert man.output_dims == [["d0_0", 3]]
    with pytest.raises(ConfigError, match=r"output_dims of output None: output dim 'os.getcwd\(\)'"):
        parse(mode="dymshape", inputs=[{"name": "x", "shape": [-1, 3]}], output_dims=[["os.getcwd()"]])
