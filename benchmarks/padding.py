"""Padding cost of gears vs one static shape, on real input shapes.

Renders a sample of text images of varied sizes (receipts, pages, banners), runs PaddleX's own text-detection
preprocessing over them (the model is not run) to get the real input shapes, then prints padded pixels over
real pixels for: a gear set chosen by the planner, a hand-made H/W grid, and the single static shape that
holds every sample (what a static OM needs).

    python benchmarks/padding.py [--samples 40] [--gears 8]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path

from paddlex_npu.build.planner import padding_ratio, plan_gears, sample_input_shapes
from paddlex_npu.samples import assets, env

os.environ.setdefault("PADDLEX_NPU_RUNTIME", "reference")
env.prepare()

WORDS = "invoice total amount due paid thank you order number date customer address item price".split()


def _images(n: int, folder: Path) -> list:
    rng = random.Random(0)
    paths = []
    for i in range(n):
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for _ in range(rng.randint(1, 25))]
        width = rng.choice([None, rng.randint(300, 1800)])
        paths.append(str(assets.render_text_image(lines, folder / f"s{i}.png", size=rng.randint(16, 40), width=width)))
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--gears", type=int, default=8)
    args = parser.parse_args()

    root = assets.build_model_folders() / "om"
    with tempfile.TemporaryDirectory() as tmp:
        shapes = sample_input_shapes(
            assets.DET, root / assets.DET, _images(args.samples, Path(tmp)), limit_side_len=960, limit_type="max"
        )
    hw = [s[0][2:] for s in shapes]  # (H, W) of x [1, 3, H, W]
    planned = plan_gears(hw, args.gears)
    grid = [[h, w] for h in (128, 256, 480, 960) for w in (256, 512, 960)]
    static = [[max(h for h, _ in hw), max(w for _, w in hw)]]
    print(f"{len(hw)} real det input shapes, H x W from {min(hw)} to {max(hw)}")
    print(f"{'shape set':<34}{'gears':>6}{'padded/real pixels':>20}")
    for name, gears in [
        (f"planned (<= {args.gears} gears)", planned),
        ("hand grid 4 x 3", grid),
        ("single static shape", static),
    ]:
        try:
            ratio = f"{padding_ratio(hw, gears):.3f}"
        except ValueError:
            ratio = "does not hold all"
        print(f"{name:<34}{len(gears):>6}{ratio:>20}")
    print(f"planned gears (H,W): {planned}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
