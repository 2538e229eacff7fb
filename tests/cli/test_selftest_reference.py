"""``selftest --runtime reference``: the acceptance run itself, on the CPU, against packages built by ``convert`` in
every mode for the bundled models (only the pyACL calls are answered, from each package's recorded ATC command and
ONNX graph: run/reference_acl.py). Each comparison is also fed a wrong side once and must fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.reports.selftest import MODELS, PASS, _manifest_vs_acl, run_selftest
from paddlex_npu.run.reference_acl import ReferenceAcl

pytestmark = pytest.mark.once  # selftest, the runner and the reference pyACL: no PaddleX layout

# Gears that make the route pad (rec width 320 -> 480, det 160x640 -> 320x640) and crop again.
MODES = {
    "dymshape": {"mode": "dymshape", "PP-OCRv4_mobile_det": {"max_side": 1280}},  # the top call: 1280x1280
    "gears": {
        "mode": "gears",
        "PP-OCRv4_mobile_det": {"gears": "320,640;480,640"},
        "PP-OCRv4_mobile_rec": {"gears": "1,480;2,960"},
    },
    "static": {
        "mode": "static",
        "PP-OCRv4_mobile_det": {"input_shape": "x:1,3,160,640"},
        "PP-OCRv4_mobile_rec": {"input_shape": "x:1,3,48,320"},
    },
}


@pytest.fixture(scope="module")
def om_roots(asset_root, tmp_path_factory):
    """One OM root per mode, the packages built by ``convert`` (no ATC here: the reference needs no .om)."""
    roots = {}
    for mode, spec in MODES.items():
        roots[mode] = root = tmp_path_factory.mktemp(f"selftest-{mode}")
        for model in MODELS:
            options = spec.get(model, {})
            convert(asset_root / "om" / model, root / model, "Ascend310P3", spec["mode"], run=False, **options)
    return roots


@pytest.mark.parametrize("mode", sorted(MODES))
def test_selftest_passes_on_the_reference_runtime_in_every_mode(om_roots, mode):
    root = om_roots[mode]
    report = run_selftest(root, runtime="reference")
    assert report.ok, report.to_json()
    versus = {c.name: c for c in report.checks if c.name.startswith("manifest")}
    rec = versus["manifest PP-OCRv4_mobile_rec vs ACL"].data
    if mode == "gears":  # dims gears as ACL reports them: every dim of the input, not only the -1 values
        assert rec["mode"] == "dymdims" and rec["manifest_gears"] == [[1, 480], [2, 960]]
        assert rec["acl"] == [[1, 3, 49, 480], [2, 3, 49, 960]]  # 8-bit lines and their mask row (issue 57)
    if mode == "dymshape":  # convert's ranges, as ACL reports them
        assert "unbounded" in rec and all(i["acl"] == i["manifest"] for i in rec["inputs"]), rec


def test_selftest_cli_on_the_reference_runtime_writes_a_passing_report(om_roots, tmp_path):
    root = om_roots["gears"]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "selftest", "--om-root", str(root), "--runtime", "reference"]
        + ["--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "selftest passed: the route on the CPU reference runtime" in out.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] and report["machine"]["runtime"] == "reference"
    assert all(c["status"] == PASS for c in report["checks"])


def _narrowed(spec: dict) -> dict:
    """The input with its H range narrowed to [lo, lo + 1] (what ATC built stays as it was)."""
    ranges = [list(r) for r in spec["range"]]
    ranges[2] = [ranges[2][0], ranges[2][0] + 1]
    return {**spec, "range": ranges}


ALTERED = {  # the manifest edited after convert, its recorded ATC command left as ATC ran it
    "gears": ("PP-OCRv4_mobile_rec", lambda m: {**m, "gears": [[1, 480], [2, 1280]]}),
    "dymshape": ("PP-OCRv4_mobile_det", lambda m: {**m, "inputs": [_narrowed(m["inputs"][0])]}),
    "static": ("PP-OCRv4_mobile_rec", lambda m: {**m, "inputs": [{**m["inputs"][0], "shape": [1, 3, 48, 640]}]}),
}


@pytest.mark.parametrize("mode", sorted(ALTERED))
def test_a_manifest_altered_after_convert_fails_against_acl(om_roots, tmp_path, mode):
    import shutil

    model, alter = ALTERED[mode]
    root = shutil.copytree(om_roots[mode], tmp_path / "root")
    path = root / model / "inference.om.json"
    path.write_text(json.dumps(alter(json.loads(path.read_text()))))
    check = _manifest_vs_acl(ReferenceAcl(), root, model, 0)
    assert check.status == "fail", check.detail


def _stand_in(shift: bool, wrong=None):
    """ais_bench's InferSession stood in for by the reference session under the package's manifest; ``shift``: a
    deliberately different output (rec: every step's scores moved one class on; det: the DB map inverted);
    ``wrong(feeds, outputs)``: other outputs, from the inputs and the right outputs."""
    from paddlex_npu.om import manifest as mf
    from paddlex_npu.run.reference import InferSession

    class StandIn(InferSession):
        def __init__(self, device_id, model_path, acl_json_path=None, debug=False, loop=1):
            manifest = mf.load(Path(model_path).with_name(mf.MANIFEST_NAME))
            super().__init__(device_id, model_path, acl_json_path, debug, loop, manifest=manifest)

        def infer(self, *args, **kwargs):
            outs = super().infer(*args, **kwargs)
            if wrong is not None:
                return wrong(args[0], outs)
            if not shift:
                return outs
            out = np.asarray(outs[0])
            return [np.roll(out, 1, axis=-1) if out.ndim == 3 else 1.0 - out] + list(outs[1:])

    return StandIn


def _on_stand_ins(om_root, tmp_path, monkeypatch, stand_in, acl=None):
    """run_selftest(runtime="ais_bench") on a copy of ``om_root``, ``stand_in`` for ais_bench's InferSession."""
    import shutil
    import types

    from paddlex_npu.run import ais

    root = shutil.copytree(om_root, tmp_path / "root")
    for model in MODELS:
        (root / model / "inference.om").write_bytes(b"stand-in")  # the device path wants the OM file itself
    interface = types.ModuleType("ais_bench.infer.interface")
    interface.InferSession = stand_in  # the ONNX beside inference.om, under the package's manifest
    for name, module in (
        ("ais_bench", types.ModuleType("ais_bench")),
        ("ais_bench.infer", types.ModuleType("ais_bench.infer")),
        ("ais_bench.infer.interface", interface),
        ("acl", None),  # no pyACL module: contexts and the chip check at load are skipped, as without CANN
    ):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(ais, "PROCESS", ais._Process())
    return run_selftest(root, runtime="ais_bench", acl=acl or ReferenceAcl("Ascend310P3"))


def _wrong_at_the_top(feeds, outs):
    """Right at the base shapes, wrong (rec scores one class on, det map inverted) once an input is wider than 640."""
    if feeds[0].shape[-1] <= 640:
        return outs
    out = np.asarray(outs[0])
    return [np.roll(out, 1, axis=-1) if out.ndim == 3 else 1.0 - out] + list(outs[1:])


def _wrong_scores(feeds, outs):
    """The right classes, their scores halved (a reduced recogniser's ctc_scores)."""
    return list(outs[:1]) + [np.asarray(o) * 0.5 for o in outs[1:]]


def test_selftest_calls_the_top_of_the_range(om_roots, monkeypatch, tmp_path):
    """A device wrong only at the largest inputs fails (before, only rec 48x320 and det 160x640 ran); rec takes
    8-bit lines with their mask row (49 rows)."""
    report = _on_stand_ins(om_roots["dymshape"], tmp_path, monkeypatch, _stand_in(False, _wrong_at_the_top))
    routes = {c.name: c for c in report.checks if c.name.startswith("route")}
    for model in MODELS:
        check = routes[f"route {model}: ais_bench vs reference"]
        assert check.status == "fail" and check.data["base"]["ok"] and not check.data["top"]["ok"], check.detail
    assert routes["route PP-OCRv4_mobile_rec: ais_bench vs reference"].data["top"]["shape"] == [6, 3, 49, 3200]


def test_selftest_compares_ctc_scores(om_roots, monkeypatch, tmp_path):
    """A reduced recogniser whose classes are right and scores wrong fails (before, only output 0 was compared)."""
    report = _on_stand_ins(om_roots["dymshape"], tmp_path, monkeypatch, _stand_in(False, _wrong_scores))
    rec = next(c for c in report.checks if c.name == "route PP-OCRv4_mobile_rec: ais_bench vs reference")
    assert rec.status == "fail" and "ctc_scores differ by" in rec.detail, rec.detail


@pytest.mark.parametrize("shift", [False, True])
def test_the_device_path_of_selftest_with_stand_ins(om_roots, monkeypatch, tmp_path, shift):
    """run_selftest(runtime="ais_bench") end to end without an NPU: ais_bench's InferSession stood in for by the
    reference session (the same contract), pyACL by ReferenceAcl. Exercises the device-only path of the acceptance
    code (ais_bench check, route ais_bench vs reference, aclInit/set/reset around the manifest check); with a
    deliberately different device output, both route checks fail."""
    acl = ReferenceAcl("Ascend310P3")
    report = _on_stand_ins(om_roots["gears"], tmp_path, monkeypatch, _stand_in(shift), acl)
    routes = {c.name: c for c in report.checks if c.name.startswith("route")}
    assert sorted(routes) == [f"route {m}: ais_bench vs reference" for m in MODELS]
    if shift:
        assert not report.ok and all(c.status == "fail" for c in routes.values()), report.to_json()
        rec = routes["route PP-OCRv4_mobile_rec: ais_bench vs reference"].data["base"]
        assert rec["device_text"] != rec["reference_text"] and rec["first_differing_step"] is not None
        return
    assert report.ok, report.to_json()
    assert [c.name for c in report.checks][:2] == ["ais_bench", "pyACL"]
    assert acl.devices == {0: 0} and acl.initialised is False  # set and reset; initialised and finalized by the check
    other = _manifest_vs_acl(ReferenceAcl("Ascend910B4"), tmp_path / "root", MODELS[1], 0)
    assert other.status == "fail" and other.detail.startswith("the OM was built for Ascend310P3, this device is")
