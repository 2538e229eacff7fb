"""Shared test assets: real PP-OCRv4 model folders (cached across runs), rendered images, pipelines.

Everything asserted comes from running the real models: the NPU route on the CPU reference runtime,
PaddleX's own onnxruntime and paddle_static engines on the same weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK", "True")
os.environ.setdefault("PADDLEX_NPU_ASSETS", str(REPO / ".cache" / "assets"))
_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
if _FONT.is_file():
    os.environ.setdefault("PADDLE_PDX_LOCAL_FONT_FILE_PATH", str(_FONT))

import paddlex_npu  # noqa: E402,F401  (installs the NPU route, as users do)
from paddlex_npu import assets  # noqa: E402

NPU_HPI = {"backend": "om", "device_type": "npu", "device_id": 0, "backend_config": {"runtime": "reference"}}

ENGLISH = ["The quick brown fox 2024", "Dynamic shapes, no padding"]
CHINESE = ["深度学习推理加速", "昇腾芯片识别文字"]
PAGE = [
    "Invoice number 20481 issued",
    "Total amount due 1234.56",
    "Please pay within thirty days",
    "Thank you for your business",
]


def norm(texts: List[str]) -> List[str]:
    """The v4 Chinese rec model drops spaces between Latin words: compare without them."""
    return [t.replace(" ", "") for t in texts]


@pytest.fixture(scope="session")
def asset_root() -> Path:
    return assets.build_model_folders()


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("images")
    return {
        "english": assets.render_text_image(ENGLISH, d / "english.png"),
        "chinese": assets.render_text_image(CHINESE, d / "chinese.png", cjk=True),
        "page": assets.render_text_image(PAGE, d / "page.png", size=28, width=900),
    }


EXPECTED = {"english": ENGLISH, "chinese": CHINESE, "page": PAGE}


def run_ocr(pipeline, images: Dict[str, Path]) -> Dict[str, dict]:
    out = {}
    for key, path in images.items():
        (res,) = list(pipeline.predict(str(path)))
        out[key] = {
            "texts": list(res["rec_texts"]),
            "scores": [float(s) for s in res["rec_scores"]],
            "boxes": [list(map(float, b)) for b in res["rec_boxes"]],
        }
    return out


@pytest.fixture(scope="session")
def npu_pipeline(asset_root):
    from paddlex import create_pipeline

    pipeline = create_pipeline(
        config=assets.ocr_pipeline_config(asset_root / "om"), device="npu:0", use_hpip=True, hpi_config=NPU_HPI
    )
    yield pipeline
    pipeline.close()


@pytest.fixture(scope="session")
def npu_results(npu_pipeline, images):
    return run_ocr(npu_pipeline, images)


def om_package(asset_root: Path, model: str, dest: Path, manifest: dict) -> Path:
    """A copy of an OM package folder with the given manifest (how ATC would have built its OM)."""
    import shutil

    from paddlex_npu.manifest import MANIFEST_NAME, parse

    folder = dest / model
    shutil.copytree(asset_root / "om" / model, folder, dirs_exist_ok=True)
    parse(manifest, model).save(folder / MANIFEST_NAME)
    return folder


# Gear sets for the OCR models, as a user would build for Ascend 310 (no dymshape there).
DET_HW_GEARS = {"mode": "dymhw", "soc_version": "Ascend310B1", "inputs": [{"name": "x", "shape": [1, 3, -1, -1]}],
                "gears": [[h, w] for h in (128, 256, 480, 960) for w in (256, 512, 960)]}
REC_DIMS_GEARS = {"mode": "dymdims", "soc_version": "Ascend310B1", "inputs": [{"name": "x", "shape": [-1, 3, 48, -1]}],
                  "gears": [[n, w] for n in (1, 6) for w in (320, 640, 960, 1600, 3200)]}
