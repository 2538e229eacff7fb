"""The benchmark's chart as a PNG drawn with Pillow (PaddleX depends on it; no matplotlib needed): images/s per
route with the bound as a dashed line, and each route's time per image by stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Tuple

from PIL import Image, ImageDraw, ImageFont

from .benchmark import BenchmarkReport

Font = Any  # ImageFont.FreeTypeFont, or the default bitmap font
WIDTH, ROW, LABEL_W, MARGIN = 1100, 34, 300, 24
STAGES: List[Tuple[str, str, Tuple[int, int, int]]] = [
    ("pre_ms", "pre-processing", (86, 156, 214)),
    ("model_ms", "model (NPU: runner + device)", (230, 126, 34)),
    ("post_ms", "post-processing", (46, 160, 90)),
    ("other_ms", "rest of the pipeline", (160, 160, 160)),
]


def _font(size: int) -> Font:
    for name in ("DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default()


def _dashed(draw: ImageDraw.ImageDraw, x: int, y0: int, y1: int, fill: Tuple[int, int, int]) -> None:
    for y in range(y0, y1, 10):
        draw.line([(x, y), (x, min(y + 5, y1))], fill=fill, width=2)


def _throughput(draw: ImageDraw.ImageDraw, report: BenchmarkReport, top: int, font: Font, small: Font) -> int:
    bound = report.bound()
    scale_max = max([r.images_per_s for r in report.routes] + [bound]) * 1.08
    plot_w = WIDTH - LABEL_W - 2 * MARGIN - 60
    draw.text((MARGIN, top), "throughput (images/s)", fill="black", font=font)
    top += 30
    for k, r in enumerate(report.routes):
        y = top + k * ROW
        draw.text((MARGIN, y + 6), r.route, fill="black", font=small)
        w = int(plot_w * r.images_per_s / scale_max)
        draw.rectangle([LABEL_W, y + 4, LABEL_W + w, y + ROW - 6], fill=(70, 110, 180))
        draw.text((LABEL_W + w + 6, y + 6), f"{r.images_per_s:.1f}", fill="black", font=small)
    bottom = top + len(report.routes) * ROW
    bx = LABEL_W + int(plot_w * bound / scale_max)
    _dashed(draw, bx, top, bottom, (200, 40, 40))
    draw.text((bx - 150, bottom + 4), f"bound {bound:.1f}/s", fill=(200, 40, 40), font=small)
    return bottom + 40


def _stages(draw: ImageDraw.ImageDraw, report: BenchmarkReport, top: int, font: Font, small: Font) -> int:
    routes = [r for r in report.routes if r.engine == "om"]  # the CPU engines' model time would dwarf them
    totals = [sum(getattr(r, key) for key, _, _ in STAGES) for r in routes]
    scale_max = max(totals + [1e-9]) * 1.08
    plot_w = WIDTH - LABEL_W - 2 * MARGIN - 60
    title = "NPU routes: time per image by stage (ms, in the process that ran it; CPU engines in the table)"
    draw.text((MARGIN, top), title, fill="black", font=font)
    top += 30
    for k, r in enumerate(routes):
        y, x = top + k * ROW, LABEL_W
        draw.text((MARGIN, y + 6), r.route, fill="black", font=small)
        for key, _, color in STAGES:
            w = int(plot_w * getattr(r, key) / scale_max)
            draw.rectangle([x, y + 4, x + w, y + ROW - 6], fill=color)
            x += w
        draw.text((x + 6, y + 6), f"{totals[k]:.1f}", fill="black", font=small)
    y = top + len(routes) * ROW + 8
    x = LABEL_W
    for _, label, color in STAGES:
        draw.rectangle([x, y + 3, x + 14, y + 17], fill=color)
        draw.text((x + 20, y + 2), label, fill="black", font=small)
        x += int(draw.textlength(label, font=small)) + 50
    return y + 30


def render(report: BenchmarkReport) -> Image.Image:
    """The chart of a report (white background, readable at 100%)."""
    height = 2 * len(report.routes) * ROW + 260
    image = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(image)
    font, small = _font(18), _font(15)
    title = f"paddlex-npu benchmark: {report.inputs} inputs x {report.repeat}, runtime {report.runtime}"
    draw.text((MARGIN, 14), title, fill="black", font=font)
    load = "/".join(f"{x:.1f}" for x in report.load_average)
    machine = f"{report.cores} cores, {report.cpu}, PaddleX {report.paddlex}, load average {load} (start/end)"
    draw.text((MARGIN, 40), machine, fill="dimgray", font=small)
    top = _throughput(draw, report, 76, font, small)
    bottom = _stages(draw, report, top, font, small)
    return image.crop((0, 0, WIDTH, bottom + 10))


def save(report: BenchmarkReport, out: Path) -> Path:
    render(report).save(out)
    return out
