"""What the gear planner needs of PaddleX: the OCR pipeline's settings, and the text-line crops its detection
stage really feeds the recogniser (both PaddleX generations)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from ..errors import ConfigError
from .patcher import adapter, install, is_installed

REFERENCE_HPI: Dict[str, Any] = {"backend": "om", "device_type": "npu", "backend_config": {"runtime": "reference"}}
_ENGINE_KEYS = ("use_hpip", "hpi_config", "engine", "engine_config", "device", "pp_option")


def ocr_pipeline_config(path: Optional[Path]) -> Tuple[Dict[str, Any], str]:
    """(config, where it came from): the YAML at ``path``, else PaddleX's default OCR pipeline config."""
    if path is not None:
        try:
            config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"--pipeline-config {path}: cannot read it ({exc}); give an OCR pipeline YAML") from exc
        if not isinstance(config, dict) or "TextDetection" not in (config.get("SubModules") or {}):
            raise ConfigError(
                f"--pipeline-config {path} has no SubModules.TextDetection: give an OCR pipeline config (as "
                "`paddlex --get_pipeline_config OCR` writes)"
            )
        return config, str(path)
    from paddlex.inference.pipelines import load_pipeline_config

    return load_pipeline_config("OCR"), "PaddleX's default OCR pipeline (OCR.yaml)"


def _without_engines(config: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of ``config`` with no engine or device settings anywhere (the planner runs on the reference runtime)."""
    out = copy.deepcopy(config)
    stack = [out]
    while stack:
        node = stack.pop()
        for key in _ENGINE_KEYS:
            node.pop(key, None)
        stack += [v for v in node.values() if isinstance(v, dict)]
    return out


def rec_input_shapes(
    config: Dict[str, Any], det: Tuple[str, Path], rec: Tuple[str, Path], pages: Sequence[str]
) -> List[List[int]]:
    """Run PaddleX's OCR pipeline (``config``'s settings; detection ``det``, recognition ``rec``: (model name,
    folder with ``inference.onnx``), both on the reference runtime) over ``pages``; the shape of every batch that
    reached the recogniser's runner (N, C, H, W). Page orientation and unwarping are off (no models for them)."""
    from paddlex import create_pipeline

    if not is_installed():
        install()
    cfg = _without_engines(config)
    cfg.update(use_doc_preprocessor=False, use_textline_orientation=False)
    subs = cfg.setdefault("SubModules", {})
    for key, (name, folder) in (("TextDetection", det), ("TextRecognition", rec)):
        subs.setdefault(key, {}).update(model_name=name, model_dir=str(folder))
    pipeline = create_pipeline(config=cfg, device="npu:0", use_hpip=True, hpi_config=copy.deepcopy(REFERENCE_HPI))
    hooks = adapter()
    predictor = pipeline.text_rec_model
    runner = hooks.static_infer_of(predictor)
    shapes: List[List[int]] = []

    def record(*args: Any, **kwargs: Any) -> Any:
        x = args[0] if args else kwargs.get("x")
        first = x if hasattr(x, "shape") else list(x)[0]
        shapes.append([int(d) for d in first.shape])
        return runner(*args, **kwargs)

    setattr(predictor, hooks.static_infer_attr(), record)
    try:
        for page in pages:
            try:
                list(pipeline.predict(page))
            except Exception as exc:  # PaddleX raises plain Exception for an unreadable image
                raise ConfigError(
                    f"PaddleX's OCR pipeline cannot read the sample page {page} ({type(exc).__name__}: {exc}): "
                    "remove it from --samples or replace it with a readable page"
                ) from exc
    finally:
        setattr(predictor, hooks.static_infer_attr(), runner)
        pipeline.close()
    return shapes
