"""PaddleX's own ``device="npu:0,1"`` on the OM route spreads over two simulated devices through the executor:
PaddleX's result objects, the in-process pipeline's texts, input order, per-call options, folders; a clear error
for an attribute that lives in the workers; close stops them. Both PaddleX generations."""

from __future__ import annotations

import os
import struct

import pytest

from paddlex_npu.samples import assets
from tests.helpers import REPO


@pytest.fixture(scope="module")
def pages(text_pages):
    return text_pages


@pytest.fixture(scope="module")
def locks(tmp_path_factory):
    return tmp_path_factory.mktemp("md_locks")


@pytest.fixture(scope="module")
def spread(asset_root, locks):
    """The OCR pipeline on npu:0,1, simulated runtime (the workers inherit this environment)."""
    from paddlex import create_pipeline

    mp = pytest.MonkeyPatch()
    mp.setenv("PADDLEX_NPU_SIM_STORE", str(REPO / ".cache" / "simulated"))
    mp.setenv("PADDLEX_NPU_SIM_LOCKS", str(locks))
    hpi = {"backend": "om", "device_type": "npu", "backend_config": {"runtime": "simulated"}}
    pipeline = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "om"), device="npu:0,1", use_hpip=True, hpi_config=hpi
    )
    yield pipeline
    pipeline.close()
    mp.undo()


def _busy_until(path):
    raw = path.read_bytes()
    return struct.unpack("d", raw)[0] if len(raw) == 8 else 0.0


def test_two_devices_give_the_in_process_results_in_order(spread, npu_pipeline, pages, locks):
    inputs = [str(p) for p in pages * 2]
    got = list(spread.predict(inputs))
    serial = {str(p): next(iter(npu_pipeline.predict(str(p)))) for p in pages}
    assert [r["input_path"] for r in got] == inputs
    for r in got:
        expected = serial[r["input_path"]]
        assert type(r) is type(expected)  # PaddleX's result object, with its methods (print, save_to_img, ...)
        assert r["rec_texts"] == expected["rec_texts"] and r["rec_boxes"].tolist() == expected["rec_boxes"].tolist()
    executor = spread._executor.executor
    assert sorted(w.device_id for w in executor.workers) == [0, 1]
    assert all(_busy_until(locks / f"npu{d}.lock") > 0 for d in (0, 1))  # each simulated device ran calls


def test_options_of_the_call_and_a_folder_reach_the_workers(spread, pages):
    folder = os.path.dirname(pages[0])
    got = list(spread.predict(folder, text_rec_score_thresh=1.01))  # no text scores above 1
    assert sorted(r["input_path"] for r in got) == sorted(str(p) for p in pages)
    assert all(r["rec_texts"] == [] for r in got)
    assert list(spread.predict(str(pages[0])))[0]["rec_texts"]  # the next call has its own options


def test_a_model_attribute_says_where_the_models_are(spread):
    with pytest.raises(AttributeError, match="runs in paddlex-npu's worker processes.*device='npu:0'"):
        spread.text_det_model  # noqa: B018


def test_close_stops_the_workers(asset_root, locks, monkeypatch):
    from paddlex import create_pipeline

    monkeypatch.setenv("PADDLEX_NPU_SIM_STORE", str(REPO / ".cache" / "simulated"))
    monkeypatch.setenv("PADDLEX_NPU_SIM_LOCKS", str(locks))
    pipeline = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "om"),
        device="npu:0,1",
        use_hpip=True,
        hpi_config={"backend": "om", "backend_config": {"runtime": "simulated"}},
    )
    pids = pipeline._executor.executor.worker_pids
    assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
    pipeline.close()
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)  # stopped and reaped
