"""The selftest's comparison of a manifest with what ACL reports, against a fake pyACL written from the CANN
pyACL reference (tests/fake_pyacl.py); the same code runs on the CPU against convert's packages
(tests/cli/test_selftest_reference.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlex_npu.om import manifest as mf
from paddlex_npu.reports import selftest
from tests.fake_pyacl import FakePyAcl

MODEL = "PP-OCRv4_mobile_rec"
REC_DIMS = {"mode": "dymdims", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}], "gears": [[1, 320], [6, 3200]]}


def _root(tmp_path: Path, manifest: dict) -> Path:
    folder = tmp_path / MODEL
    folder.mkdir()
    mf.parse({**manifest, "soc_version": "Ascend310P3"}, "test").save(folder / mf.MANIFEST_NAME)
    return tmp_path


def test_dims_gears_are_compared_as_all_dims_of_all_inputs_concatenated(tmp_path):
    """CANN aclmdlGetInputDynamicDims (and ais_bench model_process.cpp::CheckDynamicDims): each gear is every dim of
    every input, so a manifest that stores the -1 values [1, 320] matches ACL's [1, 3, 48, 320]."""
    root = _root(tmp_path, REC_DIMS)
    acl = FakePyAcl(dims=[[1, 3, 48, 320], [6, 3, 48, 3200]])
    check = selftest._manifest_vs_acl(acl, root, MODEL, 0)
    assert check.status == selftest.PASS, check.detail
    assert check.data["expected"] == [[1, 3, 48, 320], [6, 3, 48, 3200]]
    wrong = FakePyAcl(dims=[[1, 3, 48, 320], [6, 3, 48, 1600]])
    assert selftest._manifest_vs_acl(wrong, root, MODEL, 0).status == selftest.FAIL


def test_two_input_dims_gears_follow_the_cann_example():
    """CANN's example: inputs data(1,1,40,-1) and label(1,-1), gear 20,20 -> 1,1,40,20,1,20."""
    man = mf.parse(
        {
            "mode": "dymdims",
            "inputs": [
                {"name": "data", "format": "ND", "shape": [1, 1, 40, -1]},
                {"name": "label", "format": "ND", "shape": [1, -1]},
            ],
            "gears": [[20, 20], [40, 40]],
        },
        "test",
    )
    assert selftest.expected_acl_gears(man) == [[1, 1, 40, 20, 1, 20], [1, 1, 40, 40, 1, 40]]


DYMSHAPE = {
    "mode": "dymshape",
    "inputs": [{"name": "x", "shape": [-1, 3, 48, -1], "range": [[1, 6], [3, 3], [48, 48], [32, -1]]}],
}


def test_dymshape_ranges_are_really_compared_and_unbounded_dims_recorded(tmp_path):
    root = _root(tmp_path, DYMSHAPE)
    same = FakePyAcl(ranges=[[[1, 6], [3, 3], [48, 48], [32, -1]]])
    check = selftest._manifest_vs_acl(same, root, MODEL, 0)
    assert check.status == selftest.PASS, check.detail
    assert check.data["unbounded"] == [{"input": "x", "dim": 3, "manifest": [32, -1], "acl": [32, -1]}]
    other = FakePyAcl(ranges=[[[1, 8], [3, 3], [48, 48], [32, 4096]]])  # an OM built with other ranges
    check = selftest._manifest_vs_acl(other, root, MODEL, 0)
    assert check.status == selftest.FAIL and "x dim 0: manifest [1, 6], ACL [1, 8]" in check.detail
    assert check.data["unbounded"][0]["acl"] == [32, 4096]  # recorded as ACL said it, not judged


def test_older_pyacl_without_get_input_dims_range_still_checks_the_shape(tmp_path):
    root = _root(tmp_path, DYMSHAPE)
    old = FakePyAcl(has_dims_range=False, input_dims=[[-1, 3, 48, -1]])
    check = selftest._manifest_vs_acl(old, root, MODEL, 0)
    assert check.status == selftest.PASS and "get_input_dims (" in check.data["call"]
    wrong = FakePyAcl(has_dims_range=False, input_dims=[[-1, 3, 32, -1]])
    assert selftest._manifest_vs_acl(wrong, root, MODEL, 0).status == selftest.FAIL


def test_acl_is_initialised_the_device_set_and_reset(tmp_path):
    root = _root(tmp_path, REC_DIMS)
    acl = FakePyAcl(dims=[[1, 3, 48, 320], [6, 3, 48, 3200]])
    selftest._manifest_vs_acl(acl, root, MODEL, 1)
    names = [c[0] for c in acl.calls]
    assert names[:3] == ["init", "set_device", "load_from_file"] and names[-2:] == ["reset_device", "finalize"]
    shared = FakePyAcl(initialised=True, dims=[[1, 3, 48, 320], [6, 3, 48, 3200]])  # ais_bench ran aclInit first
    assert selftest._manifest_vs_acl(shared, root, MODEL, 0).status == selftest.PASS
    assert "finalize" not in [c[0] for c in shared.calls]  # not ours to finalize


def test_a_device_that_cannot_be_set_names_ascend_rt_visible_devices(tmp_path, monkeypatch):
    root = _root(tmp_path, REC_DIMS)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    check = selftest._manifest_vs_acl(FakePyAcl(set_device_ret=107001), root, MODEL, 2)
    assert check.status == selftest.FAIL
    assert "aclrtSetDevice(2) returned 107001" in check.detail
    assert "ASCEND_RT_VISIBLE_DEVICES='4,5', which makes 2 chip(s) visible (ids 0..1)" in check.detail


@pytest.mark.parametrize("device, ok", [("Ascend310P3", True), ("Ascend310P3vir02", True), ("Ascend910B4", False)])
def test_the_chip_the_om_was_built_for_is_checked_against_the_device(tmp_path, device, ok):
    root = _root(tmp_path, REC_DIMS)
    check = selftest._manifest_vs_acl(FakePyAcl(soc=device, dims=[[1, 3, 48, 320], [6, 3, 48, 3200]]), root, MODEL, 0)
    assert (check.status == selftest.PASS) is ok, check.detail
    if not ok:
        assert check.detail.startswith("the OM was built for Ascend310P3, this device is Ascend910B4")


def test_without_pyacl_the_acceptance_run_fails_instead_of_skipping(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "acl", None)  # `import acl` raises ImportError
    check, module = selftest._pyacl()
    assert check.status == selftest.FAIL and module is None and "set_env.sh" in check.detail
