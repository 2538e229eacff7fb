"""``convert`` names the nodes ATC places on the AI CPU (om/aicpu_ops.py: the 2022 open op-info lists,
correction 35 of ../shared/reference/ais-bench-api.md) per part of a split model and per --soc-version, on a tiny
Loop model and on SLANet_plus's real step package."""

from __future__ import annotations

from pathlib import Path

import onnx

from paddlex_npu.build.convert import convert
from paddlex_npu.om.aicpu_ops import aicpu_nodes, describe_placement
from paddlex_npu.samples import assets
from tests.unit.om.test_aicpu_ops import int64_loop_model


def test_convert_warns_per_part_naming_the_nodes(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    int64_loop_model(folder / "inference.onnx")
    (folder / "inference.yml").write_text(f"Global:\n  model_name: {assets.DOC_ORI}\n")
    notes = convert(folder, tmp_path / "p310", "Ascend310P3", run=False).notes
    (step,) = [n for n in notes if n.startswith("step/:")]
    assert "Min (Minimum for int64): min" in step and "This loop body runs mostly on the AI CPU (4 of its 7" in step
    assert not [n for n in notes if n.startswith(("encoder:", "tail/:"))]  # float only there
    notes = convert(folder, tmp_path / "p910b", "Ascend910B4", run=False).notes
    (step,) = [n for n in notes if n.startswith("step/:")]
    assert "min, max" not in step and "Maximum for int64): max" in step and "mostly" not in step
    assert not [n for n in convert(folder, tmp_path / "p910", "Ascend910", run=False).notes if "AI CPU on" in n]


def test_slanet_step_names_the_ai_cpu_operators_of_correction_35(table_models) -> None:
    """paddle2onnx's decoder step (the Loop's body as split) has the AI CPU nodes of correction 35; the step and
    first-step packages convert builds from it (static, int32 counters: build/step_static.py) have none left."""
    from paddlex_npu.om.loop_split import split_loop

    om, cpu = table_models
    for part in ("step", "first"):
        assert aicpu_nodes(onnx.load(str(om / part / "inference.onnx")), "Ascend310P3").aicpu == [], part
    step = split_loop(onnx.load(str(cpu / "inference.onnx"))).step
    on_310p = aicpu_nodes(step, "Ascend310P3")
    ops = {i.op for i in on_310p.aicpu}
    reasons = {i.reason for i in on_310p.aicpu}
    # correction 35: ScatterElements, Range with tensor inputs, int64 Minimum/Less/Tile, int64 <-> float/bool Casts
    assert {"ScatterElements", "Range", "Min", "Less", "Tile", "Cast"} <= ops, ops
    assert {"int64 -> float32", "float32 -> int64", "int64 -> bool", "bool -> int64"} <= reasons, reasons
    assert all(i.node for i in on_310p.aicpu) and 0 < len(on_310p.aicpu) < on_310p.kernels
    text = describe_placement(on_310p, "step/", "Ascend310P3", loop_body=True)
    assert text.startswith(f"step/: {len(on_310p.aicpu)} of its {on_310p.kernels} operators go to the AI CPU")
    # 910B's 2022 list has int64 <-> float32 Casts on the AI Core: fewer nodes there
    assert len(aicpu_nodes(step, "Ascend910B4").aicpu) < len(on_310p.aicpu)
