"""``selftest --runtime reference``: the acceptance run itself, on the CPU, against packages built by ``convert`` in
every mode for the bundled models (only the pyACL calls are answered from the manifests, run/reference_acl.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paddlex_npu.build.convert import convert
from paddlex_npu.reports.selftest import MODELS, PASS, run_selftest

# Gears that make the route pad (rec width 320 -> 480, det 160x640 -> 320x640) and crop again.
MODES = {
    "dymshape": {"mode": "dymshape"},
    "gears": {
        "mode": "gears",
        "PP-OCRv4_mobile_det": {"gears": "320,640;640,960"},
        "PP-OCRv4_mobile_rec": {"gears": "1,480;6,3200"},
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
        assert rec["mode"] == "dymdims" and rec["manifest_gears"] == [[1, 480], [6, 3200]]
        assert rec["acl"] == [[1, 3, 48, 480], [6, 3, 48, 3200]]
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
