"""The executor's per-input timeout: an input that runs over it is reported as an error, its worker replaced, and
the ordered stream goes on (before, a stuck worker stalled it for ever)."""

from __future__ import annotations

import time

from paddlex_npu.paddlex.parallel import ParallelExecutor
from paddlex_npu.samples import assets


def _slow_on_marker(result):
    """Transform (runs in the worker): a result of the page named ``stuck`` takes far longer than the timeout."""
    if "stuck" in str(result.json["res"].get("input_path", "")):
        time.sleep(60)
    return list(result.json["res"]["rec_texts"])


def test_an_input_over_the_timeout_is_an_error_and_the_stream_goes_on(asset_root, images, tmp_path):
    stuck = tmp_path / "stuck.png"
    stuck.write_bytes(images["english"].read_bytes())
    inputs = [str(images["english"]), str(stuck), str(images["english"])]
    config = assets.ocr_pipeline_config(asset_root / "om")
    with ParallelExecutor(config, runtime="reference", transform=_slow_on_marker, timeout=8.0) as ex:
        first = ex.worker_pids
        t0 = time.monotonic()
        results = list(ex.map(inputs))
        took = time.monotonic() - t0
        assert [r.index for r in results] == [0, 1, 2]
        assert results[0].ok and results[2].ok and results[0].results == results[2].results
        assert not results[1].ok and results[1].error.type == "RequestTimeout", results[1].error
        assert took < 50, took  # not the 60 s of the stuck input
        assert ex.worker_pids and ex.worker_pids != first  # the stuck worker was replaced
