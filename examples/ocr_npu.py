"""OCR on the NPU route: PaddleX's OCR pipeline with every model on an Ascend InferSession.

    python examples/ocr_npu.py [--input page.png] [--output output/] [--device npu:0]

Without an NPU (no ais_bench installed) it runs on the CPU reference runtime, which executes the same code
path over the ONNX models the OMs are built from, and says so. Set PADDLEX_NPU_RUNTIME to force a runtime.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="image to read (default: a rendered sample page)")
    parser.add_argument("--output", default="output", help="folder for the visualised result")
    parser.add_argument("--config", default=str(HERE / "ocr_npu.yaml"))
    parser.add_argument("--device", default="npu:0")
    args = parser.parse_args()

    from paddlex_npu.testing import assets, env

    # PaddleX reads its settings (font, model sources) when it is imported: prepare them first.
    if env.prepare() == "reference":
        print("ais_bench is not installed: running the NPU route on the CPU reference runtime")
    from paddlex import create_pipeline  # importing PaddleX after paddlex_npu installs the NPU route

    config = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
    missing = [m for m in config["SubModules"].values() if not m.get("model_dir")]
    if missing:
        root = assets.build_model_folders() / "om"
        for sub in missing:
            sub["model_dir"] = str(root / sub["model_name"])

    image = args.input
    if image is None:
        image = str(
            assets.render_text_image(
                ["PaddleX on Ascend NPU", "Dynamic shapes, no padding", "Invoice 2024-11-30 total 1234.56"],
                Path(args.output) / "sample.png",
            )
        )

    pipeline = create_pipeline(config=config, device=args.device)
    for res in pipeline.predict(image):
        for text, score in zip(res["rec_texts"], res["rec_scores"]):
            print(f"{score:.3f}  {text}")
        res.save_to_img(args.output)
        res.save_to_json(args.output)
    print(f"visualised result saved under {Path(args.output).resolve()}")
    pipeline.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
