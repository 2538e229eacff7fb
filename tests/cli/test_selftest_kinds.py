"""``selftest --runtime reference`` over every package kind it is given: the split SLANet_plus table package (its
encoder and first/step/tail parts opened and described, bool and int64 inputs included; the host loop on a rendered
table against the package's own ONNX parts on ONNX Runtime), the PicoDet layout package on a rendered page and the
text-line orientation classifier, each built by ``convert``; a package of no known kind is reported as not checked.
Each comparison is fed a wrong side once and must fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.om import manifest as mf
from paddlex_npu.reports import package_kinds as pk
from paddlex_npu.reports.selftest import FAIL, PASS, SKIP, run_selftest
from paddlex_npu.samples import assets

pytestmark = pytest.mark.once  # selftest, the runner and the reference pyACL: no PaddleX layout

TABLE = "SLANet_plus"
PARTS = ("encoder", "first", "step", "tail")


@pytest.fixture(scope="module")
def om_root(asset_root, table_models, tmp_path_factory):
    """The table package (as the fixture's ``convert`` built it), layout and orientation packages built by
    ``convert``, and ``Mystery``: a package whose inference.yml names no post-processing selftest knows."""
    root = tmp_path_factory.mktemp("selftest-kinds")
    (root / TABLE).symlink_to(table_models[0], target_is_directory=True)
    for model in (assets.LAYOUT, assets.TEXTLINE_ORI):
        convert(asset_root / "om" / model, root / model, "Ascend310P3", run=False)
    mystery = root / "Mystery"
    shutil.copytree(root / assets.TEXTLINE_ORI, mystery)
    (mystery / "inference.yml").write_text("Global:\n  model_name: Mystery\n")
    return root


@pytest.fixture(scope="module")
def report(om_root):
    return run_selftest(om_root, runtime="reference")


def _checks(report, model):
    (package,) = [p for p in report.packages if p.name == model]
    return package, {c.name: c for c in package.checks}


def test_every_package_is_checked_as_its_kind(report):
    kinds = {p.name: p.kind for p in report.packages}
    assert kinds == {
        TABLE: "table",
        assets.LAYOUT: "layout",
        assets.TEXTLINE_ORI: "orientation",
        "Mystery": "unknown",
    }
    for p in report.packages:
        if p.kind != "unknown":
            assert p.ok, report.to_json()
    _, mystery = _checks(report, "Mystery")
    assert mystery["kind Mystery"].status == SKIP and mystery["kind Mystery"].detail.startswith(
        "not checked: kind unknown"
    )
    assert not report.ok  # a package not checked is not a pass


def test_the_split_table_package_is_opened_part_by_part_and_its_loop_reads_a_table(report):
    package, checks = _checks(report, TABLE)
    names = [c.name for c in package.checks]
    parts = [f"part {TABLE}/{p}: opened, inputs and outputs as the manifest" for p in PARTS]
    acl = [f"manifest {TABLE} vs ACL"] + [f"manifest {TABLE}/{p} vs ACL" for p in PARTS[1:]]
    loop = f"loop {TABLE}: reference package vs ONNX Runtime"
    assert names == [f"package {TABLE}", *parts, loop, f"table {TABLE}: reads as drawn", *acl]
    step = checks[parts[2]].data
    assert {"bool", "int64"} <= set(step["input_dtypes"]), step  # the condition and the iteration counter
    counter = step["inputs"][0]
    assert counter["dtype"] == "int64" and counter["shape"] == [1]
    tail = checks[parts[3]].data
    assert tail["mode"] == "dymshape" and [o["dtype"] for o in tail["outputs"]] == ["float32"] * 2
    looped = checks[loop].data
    assert looped["device_tokens"] == looped["reference_tokens"]
    assert looped["reference_tokens"].startswith("<tr><td></td>") and looped["rows"] == 4
    assert looped["loc_max_abs"] <= pk.LOC_ATOL and looped["steps"] > looped["rows"] * 4


def test_layout_and_orientation_outputs_are_compared(report):
    _, layout = _checks(report, assets.LAYOUT)
    route = layout[f"route {assets.LAYOUT}: reference package vs ONNX Runtime"].data
    assert route["reference_boxes"] == route["device_boxes"] >= 3  # title, paragraphs, table
    assert {"title", "table"} <= set(route["classes"]), route
    _, ori = _checks(report, assets.TEXTLINE_ORI)
    route = ori[f"route {assets.TEXTLINE_ORI}: reference package vs ONNX Runtime"].data
    assert route["device_class"] == route["reference_class"] == ["0_degree"]  # an upright line


def test_a_wrong_side_fails_each_comparison(om_root, tmp_path):
    """Real outputs, one side altered: a token one class on from step 3, a layout box moved, a class flipped."""
    man = mf.load(om_root / TABLE / mf.MANIFEST_NAME)
    x = pk.table_input(man.inputs[0].shape[-1], tmp_path)
    outs = pk.onnx_loop(om_root / TABLE, man.loop, {man.inputs[0].name: x})
    chars = pk.table_characters(pk.read_yml(om_root / TABLE))
    wrong = [o.copy() for o in outs]
    probs = next(o for o in wrong if o.shape[-1] == len(chars))
    probs[0, 3] = np.roll(probs[0, 3], 1)
    verdict = pk.compare_table(wrong, outs, chars)
    assert not verdict.ok and verdict.data["first_differing_step"] == 3, verdict.detail
    lman = mf.load(om_root / assets.LAYOUT / mf.MANIFEST_NAME)
    feeds = pk.layout_inputs(lman, tmp_path)
    boxes = pk.onnx_outputs(om_root / assets.LAYOUT / "inference.onnx", feeds)
    moved = [boxes[0].copy(), boxes[1]]
    moved[0][0, 2:] += 8.0
    assert not pk.compare_layout(moved, boxes).ok
    oman = mf.load(om_root / assets.TEXTLINE_ORI / mf.MANIFEST_NAME)
    probs = pk.onnx_outputs(om_root / assets.TEXTLINE_ORI / "inference.onnx", pk.classifier_input(oman, {}))
    assert not pk.compare_classes([probs[0][:, ::-1].copy()], probs).ok


def test_a_part_whose_manifest_says_another_dtype_fails(om_root, tmp_path):
    """The step's bool condition recorded as int32: the step's check fails naming the input, the loop fails."""
    root = tmp_path / "root"
    shutil.copytree(om_root / TABLE, root / TABLE)
    path = root / TABLE / "step" / mf.MANIFEST_NAME
    raw = json.loads(path.read_text())
    flipped = next(i for i in raw["inputs"] if i["dtype"] == "bool")
    flipped["dtype"] = "int32"
    path.write_text(json.dumps(raw))
    report = run_selftest(root, runtime="reference")
    _, checks = _checks(report, TABLE)
    check = checks[f"part {TABLE}/step: opened, inputs and outputs as the manifest"]
    assert check.status == FAIL and flipped["name"] in check.detail, check.detail
    for part in ("first", "tail"):  # the others still checked; the encoder loads the step behind it: fails too
        assert checks[f"part {TABLE}/{part}: opened, inputs and outputs as the manifest"].status == PASS
    assert checks[f"loop {TABLE}: reference package vs ONNX Runtime"].status == FAIL


def test_selftest_cli_checks_the_named_package_and_writes_it_per_package(om_root, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "selftest", "--om-root", str(om_root), "--runtime", "reference"]
        + ["--models", TABLE, "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{TABLE} (table):" in out.stdout and "[PASS] loop SLANet_plus" in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    (package,) = report["packages"]
    assert package["name"] == TABLE and package["kind"] == "table" and package["ok"]
    assert all(c["status"] == PASS for c in package["checks"]) and len(package["checks"]) == 11


def test_the_device_path_of_the_table_checks_with_stand_ins(om_root, monkeypatch, tmp_path):
    """run_selftest(runtime="ais_bench") on the table package without an NPU: ais_bench's InferSession stood in for
    by the reference session (tests/cli/test_selftest_reference.py), pyACL by ReferenceAcl. Each part opened on
    the "device", the loop against the route on the reference runtime at the package's fp16 precision."""
    import types

    from paddlex_npu.run import ais
    from paddlex_npu.run.reference_acl import ReferenceAcl
    from tests.cli.test_selftest_reference import _stand_in

    root = tmp_path / "root"
    shutil.copytree(om_root / TABLE, root / TABLE)
    for part in ("", "first", "step", "tail"):
        (root / TABLE / part / "inference.om").write_bytes(b"stand-in")  # the device path wants the OM file
    interface = types.ModuleType("ais_bench.infer.interface")
    interface.InferSession = _stand_in(False)
    for name, module in (
        ("ais_bench", types.ModuleType("ais_bench")),
        ("ais_bench.infer", types.ModuleType("ais_bench.infer")),
        ("ais_bench.infer.interface", interface),
        ("acl", None),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    report = run_selftest(root, runtime="ais_bench", acl=ReferenceAcl("Ascend310P3"))
    package, checks = _checks(report, TABLE)
    assert package.ok, report.to_json()
    looped = checks[f"loop {TABLE}: ais_bench vs reference"].data
    assert looped["device_tokens"] == looped["reference_tokens"] and looped["rows"] == 4
    assert 0 < looped["loc_max_abs"] <= pk.LOC_ATOL  # fp32 stand-in against the fp16 reference: close, not equal
