"""The selftest's comparison of a manifest with what ACL reports, against a fake pyACL written from the CANN
pyACL reference (tests/fake_pyacl.py); the same code runs on the CPU against convert's packages
(tests/cli/test_selftest_reference.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paddlex_npu.om import manifest as mf
from paddlex_npu.reports import route_check, selftest
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


# ---- pyACL's failure returns (an empty value with ret != 0, None past 4,096 gears) --------------------------------
@pytest.mark.parametrize(
    "manifest, fail, call, ret",
    [
        (REC_DIMS, {"get_input_dynamic_gear_count": 145000}, "acl.mdl.get_input_dynamic_gear_count", 145000),
        (REC_DIMS, {"get_input_dynamic_dims": 500002}, "acl.mdl.get_input_dynamic_dims", 500002),
        (REC_DIMS, {"load_from_file": 100000}, "acl.mdl.load_from_file", 100000),
        (REC_DIMS, {"get_desc": 100000}, "acl.mdl.get_desc", 100000),
        (DYMSHAPE, {"get_input_dims_range": 100000}, "acl.mdl.get_input_dims_range", 100000),
        (
            {"mode": "dymbatch", "inputs": [{"name": "x", "shape": [-1, 3, 48, 320]}], "gears": [[1], [4]]},
            {"get_dynamic_batch": 500002},
            "acl.mdl.get_dynamic_batch",
            500002,
        ),
        (
            {"mode": "dymhw", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}], "gears": [[48, 320], [48, 640]]},
            {"get_dynamic_hw": 500002},
            "acl.mdl.get_dynamic_hw",
            500002,
        ),
        (
            {"mode": "static", "inputs": [{"name": "x", "shape": [1, 3, 48, 320]}]},
            {"get_input_dims": 100000},
            "acl.mdl.get_input_dims",
            100000,
        ),
    ],
)
def test_a_failing_pyacl_call_is_reported_with_its_code(tmp_path, manifest, fail, call, ret):
    """pyACL answers a failure with an empty dict (or 0) and ret != 0: selftest names the call and the code (it read
    info["batch"] first and failed with KeyError: 'batch', losing the code)."""
    root = _root(tmp_path, manifest)
    acl = FakePyAcl(fail=fail, dims=[[1, 3, 48, 320], [6, 3, 48, 3200]], input_dims=[[1, 3, 48, 320]])
    check = selftest._manifest_vs_acl(acl, root, MODEL, 0)
    assert check.status == selftest.FAIL
    assert check.detail.startswith(f"{call} returned {ret}: ACL could not describe the OM"), check.detail
    assert check.data == {"call": call, "ret": ret} and "KeyError" not in check.detail
    assert [c[0] for c in acl.calls][-2:] == ["reset_device", "finalize"]  # the device is still reset


def test_past_4096_gears_pyacl_answers_none(tmp_path):
    root = _root(tmp_path, REC_DIMS)
    acl = FakePyAcl(dims=[[1, 3, 48, 320], [6, 3, 48, 3200]], gear_count=4097)
    check = selftest._manifest_vs_acl(acl, root, MODEL, 0)
    assert check.status == selftest.FAIL
    assert check.detail.startswith("acl.mdl.get_input_dynamic_dims returned None (not a (value, ret) pair: None)")


def test_acl_init_failing_names_its_code(tmp_path):
    root = _root(tmp_path, REC_DIMS)
    check = selftest._manifest_vs_acl(FakePyAcl(fail={"init": 100001}), root, MODEL, 0)
    assert check.status == selftest.FAIL and check.detail.startswith("aclInit returned 100001")


# ---- the recognition check: decoded texts ----------------------------------------------------------------------
def _scores(path, classes=5):
    """[1, T, C] scores whose best class per step is ``path``."""
    out = np.full((1, len(path), classes), 0.1, np.float32)
    out[0, np.arange(len(path)), path] = 0.9
    return out


def test_ctc_texts_collapse_repeats_and_drop_the_blank():
    assert route_check.ctc_texts(_scores([0, 3, 3, 0, 3, 1, 1, 0])) == [[3, 3, 1]]
    assert route_check.ctc_texts(np.array([[0, 3, 3, 0, 3, 1, 1, 0]])) == [[3, 3, 1]]  # [N, T] indices
    assert route_check.ctc_texts(np.array([[2, 2, 2], [0, 0, 4]])) == [[2], [4]]


def test_a_near_tie_that_flips_blank_and_character_keeps_the_same_text():
    """An fp16 OM may turn a step beside a character into the blank or the reverse: same decoded text, PASS (the raw
    per-step argmax comparison failed it)."""
    device, reference = _scores([0, 3, 3, 0, 1, 0]), _scores([0, 3, 0, 0, 1, 1])
    check = selftest._compare("PP-OCRv4_mobile_rec", device, reference, ["", "a", "b", "c", "d"])
    assert check.status == selftest.PASS, check.detail
    assert check.data["device_text"] == check.data["reference_text"] == ["ca"]
    assert check.data["first_differing_step"] == [0, 2]


def test_different_texts_fail_with_the_first_differing_step_and_both_texts():
    device, reference = _scores([0, 3, 0, 2, 0]), _scores([0, 3, 0, 1, 0])
    check = selftest._compare("PP-OCRv4_mobile_rec", device, reference, ["", "a", "b", "c", "d"])
    assert check.status == selftest.FAIL
    assert check.data["device_text"] == ["cb"] and check.data["reference_text"] == ["ca"]
    assert check.data["first_differing_step"] == [0, 3]
    assert "device ['cb'], reference ['ca'] (differing steps [sample, step] [[0, 3]]; top-2 margins [0.8]" in (
        check.detail
    )
    indices = selftest._compare("PP-OCRv4_mobile_rec", device.argmax(-1), reference.argmax(-1))
    assert indices.status == selftest.FAIL and indices.data["device_text"] == [[3, 2]]
