"""``paddlex-npu precision-preview``: what the package's precision (ATC's fp16) does to an OCR pipeline's results,
on the CPU, before the device.

Each image is read twice by the pipeline on the reference runtime: once with the ONNX models as they are (fp32),
once as ATC builds the packages (:mod:`..run.reference_precision`: fp16 storage of weights and operator outputs,
the operators a package's ``keep_dtype`` names kept fp32; a package built ``--precision fp32`` is unchanged). Per
image the report gives the lines whose text changed, the boxes found on one side only, the largest corner shift
of a box found on both, and the largest change of a recognition score. Nothing is printed here (the CLI prints).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ..errors import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
MATCH_IOU = 0.5  # boxes of the two runs are the same line when their bounding rectangles overlap this much


@dataclass
class PageDiff:
    image: str
    lines: int  # lines found at fp32
    changed: List[Tuple[str, str]] = field(default_factory=list)  # (fp32 text, fp16 text) of matched boxes
    only_fp32: List[str] = field(default_factory=list)  # texts of boxes found at fp32 only
    only_fp16: List[str] = field(default_factory=list)
    max_box_shift: float = 0.0  # pixels, the largest corner move of a matched box
    max_score_change: float = 0.0  # |rec_score fp16 - fp32| of matched boxes

    @property
    def same(self) -> bool:
        return not (self.changed or self.only_fp32 or self.only_fp16)


@dataclass
class PreviewReport:
    pages: List[PageDiff]
    precisions: Dict[str, str]  # package folder name -> its precision as built

    def to_json(self) -> str:
        pages = [{**asdict(p), "same": p.same} for p in self.pages]
        return json.dumps({"precisions": self.precisions, "pages": pages}, indent=2, ensure_ascii=False) + "\n"

    def summary(self) -> Dict[str, Any]:
        lines = sum(p.lines for p in self.pages)
        return {
            "images": len(self.pages),
            "lines": lines,
            "changed_texts": sum(len(p.changed) for p in self.pages),
            "boxes_one_side": sum(len(p.only_fp32) + len(p.only_fp16) for p in self.pages),
            "max_box_shift": max((p.max_box_shift for p in self.pages), default=0.0),
            "max_score_change": max((p.max_score_change for p in self.pages), default=0.0),
        }


def images_in(paths: Iterable[Path]) -> List[Path]:
    """The image files given, and those directly in the folders given (sorted); a :class:`ConfigError` if none."""
    found: List[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"precision-preview: {path} does not exist: give image files or folders of images")
    if not found:
        raise ConfigError(f"precision-preview: no image ({', '.join(IMAGE_SUFFIXES)}) in {', '.join(map(str, paths))}")
    return found


def _rect(poly: Any) -> np.ndarray:
    p = np.asarray(poly, np.float64).reshape(-1, 2)
    return np.array([p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()])


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def compare_page(image: str, fp32: Dict[str, Any], fp16: Dict[str, Any]) -> PageDiff:
    """Lines of the two runs matched by their boxes (best overlap, at least :data:`MATCH_IOU`)."""
    polys = [list(fp32.get("rec_polys", [])), list(fp16.get("rec_polys", []))]
    texts = [list(fp32.get("rec_texts", [])), list(fp16.get("rec_texts", []))]
    scores = [list(fp32.get("rec_scores", [])), list(fp16.get("rec_scores", []))]
    rects = [[_rect(p) for p in side] for side in polys]
    diff = PageDiff(image, len(texts[0]))
    taken: set = set()
    for i, a in enumerate(rects[0]):
        best = max(
            ((j, _iou(a, b)) for j, b in enumerate(rects[1]) if j not in taken), key=lambda t: t[1], default=(None, 0)
        )
        j = best[0]
        if j is None or best[1] < MATCH_IOU:
            diff.only_fp32.append(texts[0][i])
            continue
        taken.add(j)
        shift = float(np.abs(np.asarray(polys[0][i], float) - np.asarray(polys[1][j], float)).max())
        diff.max_box_shift = max(diff.max_box_shift, shift)
        diff.max_score_change = max(diff.max_score_change, abs(float(scores[0][i]) - float(scores[1][j])))
        if texts[0][i] != texts[1][j]:
            diff.changed.append((texts[0][i], texts[1][j]))
    diff.only_fp16 = [t for j, t in enumerate(texts[1]) if j not in taken]
    return diff


def _read(config: Dict[str, Any], images: List[Path], precision: str) -> List[Dict[str, Any]]:
    """The pipeline's results on every image with the reference runtime at ``precision`` (fp32 or package)."""
    from ..paddlex.pipelines import pipeline_on_device
    from ..run.reference import numerics

    with numerics(precision):
        pipeline = pipeline_on_device(config, 0, "reference")
        try:
            results = [dict(next(iter(pipeline.predict(str(image))))) for image in images]
        finally:
            close = getattr(pipeline, "close", None)
            if callable(close):
                close()
    return results


def package_precisions(config: Dict[str, Any]) -> Dict[str, str]:
    """Each sub-model's package folder name and the precision its manifest records (fp16 when none); a document
    pipeline's nested ones (its OCR's SubModules) too."""
    from ..om import manifest as mf
    from ..paddlex.pipelines import sub_modules

    out = {}
    for _, sub in sub_modules(config):
        folder = Path(str(sub.get("model_dir", "")))
        path = folder / mf.MANIFEST_NAME
        if path.is_file():
            out[folder.name] = mf.load(path).precision or "fp16"
    return out


def preview(pipeline: Any, paths: Iterable[Path], config: Optional[Dict[str, Any]] = None) -> PreviewReport:
    """Read the images of ``paths`` through ``pipeline`` (a pipeline YAML or config dict over OM packages) at fp32
    and at the packages' precision, and compare them page by page."""
    from ..paddlex.pipelines import load_config

    config = config or load_config(pipeline)
    images = images_in(paths)
    fp32, fp16 = _read(config, images, "fp32"), _read(config, images, "package")
    pages = [compare_page(str(img), a, b) for img, a, b in zip(images, fp32, fp16)]
    return PreviewReport(pages, package_precisions(config))
