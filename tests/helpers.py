"""Shared test helpers, importable without PaddleX: expected texts, the one session spy, OM package copies."""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List

REPO = Path(__file__).resolve().parent.parent
NPU_HPI = {"backend": "om", "device_type": "npu", "device_id": 0, "backend_config": {"runtime": "reference"}}

ENGLISH = ["The quick brown fox 2024", "Dynamic shapes, no padding"]
CHINESE = ["深度学习推理加速", "昇腾芯片识别文字"]
PAGE = [
    "Invoice number 20481 issued",
    "Total amount due 1234.56",
    "Please pay within thirty days",
    "Thank you for your business",
]
EXPECTED = {"english": ENGLISH, "chinese": CHINESE, "page": PAGE}

# Gear sets for the OCR models, as a user would build for Ascend 310 (no dymshape there).
DET_HW_GEARS = {
    "mode": "dymhw",
    "soc_version": "Ascend310B1",
    "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}],
    "gears": [[h, w] for h in (128, 256, 480, 960) for w in (256, 512, 960)],
}
REC_DIMS_GEARS = {
    "mode": "dymdims",
    "soc_version": "Ascend310B1",
    "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}],
    "gears": [[n, w] for n in (1, 6) for w in (320, 640, 960, 1600, 3200)],
}


def norm(texts: List[str]) -> List[str]:
    """The v4 Chinese rec model drops spaces between Latin words: compare without them."""
    return [t.replace(" ", "") for t in texts]


def run_ocr(pipeline: Any, images: Dict[str, Path]) -> Dict[str, dict]:
    out = {}
    for key, path in images.items():
        (res,) = list(pipeline.predict(str(path)))
        out[key] = {
            "texts": list(res["rec_texts"]),
            "scores": [float(s) for s in res["rec_scores"]],
            "boxes": [list(map(float, b)) for b in res["rec_boxes"]],
        }
    return out


@contextmanager
def spy_session(session: Any) -> Iterator[List[Dict[str, Any]]]:
    """Record every ``infer`` call that reaches ``session`` (mode, custom_sizes, feed shapes, the feeds
    themselves); the real session still runs. The one way the tests look at what reaches a session."""
    calls: List[Dict[str, Any]] = []
    original = session.infer

    def infer(feeds, mode="static", custom_sizes=100000, **kw):
        sizes = list(custom_sizes) if isinstance(custom_sizes, list) else custom_sizes
        calls.append(
            {"mode": mode, "custom_sizes": sizes, "shapes": [list(f.shape) for f in feeds], "feeds": list(feeds)}
        )
        return original(feeds, mode=mode, custom_sizes=custom_sizes, **kw)

    session.infer = infer
    try:
        yield calls
    finally:
        session.infer = original


@contextmanager
def raises_acl_failure(capsys: Any, detail: str) -> Iterator[None]:
    """A device-side failure as ais_bench gives it: ``RuntimeError`` with only the generic ACL text, the detail
    (matched by the regex ``detail``) on stdout."""
    import pytest

    with pytest.raises(RuntimeError) as info:
        yield
    assert str(info.value) == "[-1][ACL: general failure] "
    out = capsys.readouterr().out
    assert re.search(detail, out), out


def om_package(asset_root: Path, model: str, dest: Path, manifest: dict) -> Path:
    """A copy of an OM package folder with the given manifest (how ATC would have built its OM)."""
    from paddlex_npu.om.manifest import MANIFEST_NAME, parse

    folder = dest / model
    shutil.copytree(asset_root / "om" / model, folder, dirs_exist_ok=True)
    parse(manifest, model).save(folder / MANIFEST_NAME)
    return folder


def page_lines(k: int) -> List[str]:
    """The text of rendered page ``k`` (several lines; different on every page)."""
    return [
        f"Invoice number {20481 + 7 * k} issued",
        f"Total amount due {1234 + 31 * k}.56",
        "Please pay within thirty days",
        f"Order {k} shipped to warehouse {k % 5}",
        "Thank you for your business",
    ]


def crash_on_poison(result: Any) -> Any:
    """An executor transform that kills its worker on an input whose path contains ``poison`` (a crash test)."""
    import os

    from paddlex_npu.paddlex.pipelines import plain_result

    data = plain_result(result)
    if "poison" in str(data.get("input_path", "")):
        os._exit(3)
    return data
