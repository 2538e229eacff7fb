"""OCR on the NPU route: PaddleX's OCR pipeline with every model on an Ascend InferSession.

    python examples/ocr_npu.py [--input page.png] [--output output/] [--device npu:0] [--no-compare]

Without an NPU (no ais_bench installed) it runs on the CPU reference runtime, which executes the same code
path over the ONNX models the OMs are built from, and says so. Set PADDLEX_NPU_RUNTIME to force a runtime.
Beside the route's result it prints PaddleX's own CPU result (its onnxruntime engine on the same model
folders, PaddleX 3.5+), so that a reader sees the two agree, and what a PaddleOCR 3.7 user gets with
``PaddleOCR(device="npu:0", enable_hpi=True, ...)`` on the same PP-OCRv6 packages.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

HERE = Path(__file__).resolve().parent
Lines = List[Tuple[float, str]]


# Bundled models this PaddleX may not know (PP-OCRv6 came with PaddleX 3.7), and the older ones used instead.
_OLDER = {"PP-OCRv6_small_det": "PP-OCRv4_mobile_det", "PP-OCRv6_small_rec": "PP-OCRv5_mobile_rec"}


def _config(path: str) -> Dict[str, Any]:
    """The pipeline config, with model folders left null filled in from the bundled models (older ones where
    this PaddleX does not know the bundled model's name)."""
    from paddlex_npu.paddlex.patcher import adapter, paddlex_version
    from paddlex_npu.samples import assets

    config = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    missing = [m for m in config["SubModules"].values() if not m.get("model_dir")]
    hooks = adapter()
    for sub in missing:
        older = _OLDER.get(sub["model_name"])
        if older and hooks.entry(sub["model_name"]) is None:
            print(f"PaddleX {paddlex_version()} has no {sub['model_name']} (PP-OCRv6 came with 3.7): using {older}")
            sub["model_name"] = older
    if missing:
        root = assets.build_model_folders() / "om"
        for sub in missing:
            sub["model_dir"] = str(root / sub["model_name"])
    return config


def _read(pipeline: Any, image: str, output: Optional[str] = None) -> Lines:
    lines: Lines = []
    for res in pipeline.predict(image):
        lines += [(float(s), str(t)) for t, s in zip(res["rec_texts"], res["rec_scores"])]
        if output:
            res.save_to_img(output)
            res.save_to_json(output)
    pipeline.close()
    return lines


def _paddlex_cpu(config: Dict[str, Any], image: str) -> Optional[Lines]:
    """PaddleX's own onnxruntime engine on the same folders (None on PaddleX 3.0-3.4, which has none)."""
    import importlib.util

    from paddlex import create_pipeline

    if importlib.util.find_spec("paddlex.inference.models.runners") is None:  # the engine registry: 3.5+
        return None
    cpu = copy.deepcopy(config)
    for key in ("use_hpip", "hpi_config", "engine", "engine_config"):
        cpu.pop(key, None)
    return _read(create_pipeline(config=cpu, device="cpu", engine="onnxruntime"), image)


def _paddleocr(config: Dict[str, Any], image: str, device: str) -> Optional[Lines]:
    """PaddleOCR 3.7 on the route with ``enable_hpi=True`` alone, on the same packages (None without PaddleOCR
    3.7, or when the models are not PP-OCRv6)."""
    import importlib.util

    if importlib.util.find_spec("paddleocr") is None:
        return None
    import paddleocr

    det, rec = config["SubModules"]["TextDetection"], config["SubModules"]["TextRecognition"]
    if not paddleocr.__version__.startswith("3.7") or not det["model_name"].startswith("PP-OCRv6"):
        return None
    ocr = paddleocr.PaddleOCR(
        device=device,
        enable_hpi=True,
        text_detection_model_name=det["model_name"],
        text_detection_model_dir=det["model_dir"],
        text_recognition_model_name=rec["model_name"],
        text_recognition_model_dir=rec["model_dir"],
        text_det_limit_side_len=det["limit_side_len"],
        text_det_limit_type=det["limit_type"],
        text_det_thresh=det["thresh"],
        text_det_box_thresh=det["box_thresh"],
        text_det_unclip_ratio=det["unclip_ratio"],
        text_recognition_batch_size=rec["batch_size"],
        text_rec_score_thresh=rec["score_thresh"],
        use_doc_orientation_classify=False,
        use_doc_unwarping=False,
        use_textline_orientation=False,
    )
    try:
        return [(float(s), str(t)) for res in ocr.predict(image) for t, s in zip(res["rec_texts"], res["rec_scores"])]
    finally:
        ocr.close()


def _print(route: Lines, cpu: Optional[Lines], runtime: str, models: str, client: Optional[Lines] = None) -> None:
    print(f"NPU route ({runtime}, {models}):")
    for score, text in route:
        print(f"  {score:.3f}  {text}")
    if cpu is None:
        print("PaddleX's own CPU result: its onnxruntime engine needs PaddleX 3.5+ (not shown)")
        return
    print("PaddleX's own CPU engine (onnxruntime, same model folders):")
    for score, text in cpu:
        print(f"  {score:.3f}  {text}")
    same = [t for _, t in route] == [t for _, t in cpu]
    print(f"texts identical: {'yes' if same else 'NO'} ({len(route)} lines)")
    if client is not None:
        print("PaddleOCR 3.7 (PaddleOCR(device=..., enable_hpi=True), the same packages, on the NPU route):")
        for score, text in client:
            print(f"  {score:.3f}  {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="image to read (default: a rendered sample page)")
    parser.add_argument("--output", default="output", help="folder for the visualised result")
    parser.add_argument("--config", default=str(HERE / "ocr_npu.yaml"))
    parser.add_argument("--device", default="npu:0")
    parser.add_argument("--no-compare", action="store_true", help="do not run PaddleX's own CPU engine too")
    args = parser.parse_args()

    from paddlex_npu.samples import assets, env

    # PaddleX reads its settings (font, model sources) when it is imported: prepare them first.
    runtime = env.prepare()
    if runtime == "reference":
        print("ais_bench is not installed: running the NPU route on the CPU reference runtime")
    from paddlex import create_pipeline  # importing PaddleX after paddlex_npu installs the NPU route

    config = _config(args.config)
    image = args.input or str(assets.render_text_image(list(assets.DEMO_LINES), Path(args.output) / "sample.png"))
    route = _read(create_pipeline(config=config, device=args.device), image, args.output)
    cpu = None if args.no_compare else _paddlex_cpu(config, image)
    client = None if args.no_compare else _paddleocr(config, image, args.device)
    models = " + ".join(m["model_name"] for m in config["SubModules"].values())
    _print(route, cpu, f"{runtime} runtime", models, client)
    print(f"visualised result saved under {Path(args.output).resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
