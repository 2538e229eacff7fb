"""The benchmark's chart as a PNG drawn with Pillow (PaddleX depends on it; no matplotlib needed): images/s per
route with the bound as a dashed line, and each route's time per image by stage. Its header says what a reader
needs to read it right: which models and inputs ran, whether device times are simulated (and the cost model),
what the bound is; the stage section says why a stage bar grows with the worker count; routes that could not
run are listed with their reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Tuple

from PIL import Image, ImageDraw, ImageFont

from .benchmark import BenchmarkReport

Font = Any  # ImageFont.FreeTypeFont, or the default bitmap font
WIDTH, ROW, LABEL_W, MARGIN = 1100, 34, 300, 24
STAGES: List[Tuple[str, str, Tuple[int, int, int]]] = [
    ("pre_ms", "pre-processing", (86, 156, 214)),
    ("runner_ms", "model call (host, device queue)", (230, 126, 34)),
    ("device_ms", "device time (compute)", (150, 70, 20)),
    ("transfer_ms", "device time (PCIe copies)", (200, 60, 120)),
    ("post_ms", "post-processing", (46, 160, 90)),
    ("other_ms", "rest of the pipeline", (160, 160, 160)),
]


def _stage(r: Any, key: str) -> float:
    """A stage's ms per image; ``runner_ms`` is the model stage without the device time it holds, ``device_ms``
    the device time without its copies (``transfer_ms``)."""
    if key == "runner_ms":
        return max(0.0, r.model_ms - r.device_ms)
    if key == "device_ms":
        return max(0.0, r.device_ms - r.transfer_ms)
    return float(getattr(r, key))


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


def _wrap(draw: ImageDraw.ImageDraw, text: str, font: Font, width: int) -> List[str]:
    """``text`` in lines that fit ``width`` pixels."""
    lines: List[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            trial = f"{line} {word}".strip()
            if line and draw.textlength(trial, font=font) > width:
                lines.append(line)
                line = word
            else:
                line = trial
        lines.append(line)
    return lines


def _paragraph(
    draw: ImageDraw.ImageDraw, text: str, top: int, font: Font, fill: Any = "black", indent: int = MARGIN
) -> int:
    """Draw wrapped text from ``top``; the y below it."""
    for line in _wrap(draw, text, font, WIDTH - indent - MARGIN):
        draw.text((indent, top), line, fill=fill, font=font)
        top += int(font.size * 1.35) if hasattr(font, "size") else 14
    return top


def _device_text(report: BenchmarkReport) -> str:
    if report.runtime == "simulated":
        text = report.cost_model_text().replace("simulated device times, ", "")
        return f"Device times are SIMULATED (no NPU ran), {text}."
    if report.runtime == "reference":
        return "Runtime reference: the models ran on this CPU with ONNX Runtime; there is no device time."
    return f"Device times measured on the NPU (runtime {report.runtime})."


def header_text(report: BenchmarkReport) -> List[str]:
    """The chart's header lines: what ran, on what, how the device time is made, the bound."""
    models = ", ".join(sorted(report.models)) or "not recorded (only the simulated device records them)"
    load = "/".join(f"{x:.1f}" for x in report.load_average)
    bound = report.bound()
    s = report.serial
    if bound is not None and s is not None:
        bound_text = (
            f"Bound (dashed) {bound:.1f} images/s = min(1 / device time, {report.cores} cores / host CPU time) per "
            f"image from the NPU serial route, set by the {report.bound_limit()}; the host CPU time "
            f"({s.host_ms:.1f} ms) leaves out the simulator's own work ({s.sim_overhead_ms:.2f} ms per image)."
        )
    else:
        bound_text = "No bound: the NPU serial route did not run."
    return [
        f"Models: {models}. Inputs: {report.input_desc or f'{report.inputs} inputs'}, {report.repeat} timed pass(es)"
        + (f"; NPU routes: median of {report.rounds} interleaved rounds." if report.rounds > 1 else "."),
        report.route_text() + ".",
        _device_text(report),
        bound_text,
        f"Machine: {report.cores} cores, {report.cpu}, PaddleX {report.paddlex}, load average {load} (start/end)"
        + (" - other work shared the cores: figures are lower bounds." if report.busy else "."),
    ]


def _throughput(draw: ImageDraw.ImageDraw, report: BenchmarkReport, top: int, font: Font, small: Font) -> int:
    bound = report.bound() or 0.0
    scale_max = max([r.images_per_s for r in report.routes] + [bound, 1e-9]) * 1.08
    plot_w = WIDTH - LABEL_W - 2 * MARGIN - 340  # room for the labels right of the longest bar
    title = "throughput (images/s; per busy host core: 1000 / CPU ms per image)"
    draw.text((MARGIN, top), title, fill="black", font=font)
    top += 30
    for k, r in enumerate(report.routes):
        y = top + k * ROW
        draw.text((MARGIN, y + 6), r.route, fill="black", font=small)
        w = int(plot_w * r.images_per_s / scale_max)
        draw.rectangle([LABEL_W, y + 4, LABEL_W + w, y + ROW - 6], fill=(70, 110, 180))
        share = f" ({100 * r.images_per_s / bound:.0f}% of the bound)" if bound and r.engine == "om" else ""
        text = f"{r.images_per_s:.1f}{share}, {r.per_core:.2f} per core"
        draw.text((LABEL_W + w + 6, y + 6), text, fill="black", font=small)
    bottom = top + len(report.routes) * ROW
    if bound:
        bx = LABEL_W + int(plot_w * bound / scale_max)
        _dashed(draw, bx, top, bottom, (200, 40, 40))
        draw.text((bx - 150, bottom + 4), f"bound {bound:.1f}/s", fill=(200, 40, 40), font=small)
    return bottom + 40


def _stages(draw: ImageDraw.ImageDraw, report: BenchmarkReport, top: int, font: Font, small: Font) -> int:
    routes = [r for r in report.routes if r.engine == "om"]  # the CPU engines' model time would dwarf them
    totals = [sum(_stage(r, key) for key, _, _ in STAGES) for r in routes]
    scale_max = max(totals + [1e-9]) * 1.08
    plot_w = WIDTH - LABEL_W - 2 * MARGIN - 60
    title = "NPU routes: time per image by stage (ms, in the process that ran it; CPU engines in the table)"
    draw.text((MARGIN, top), title, fill="black", font=font)
    top = _paragraph(
        draw,
        "Stage bars are wall time inside the worker that ran the image. With more workers than cores, workers wait "
        "for a core (and each other's device calls), so every stage takes longer per image while images/s rises: "
        "a longer bar with more workers is waiting, not more work.",
        top + 26,
        small,
        "dimgray",
    )
    top += 6
    for k, r in enumerate(routes):
        y, x = top + k * ROW, LABEL_W
        draw.text((MARGIN, y + 6), r.route, fill="black", font=small)
        for key, _, color in STAGES:
            w = int(plot_w * _stage(r, key) / scale_max)
            draw.rectangle([x, y + 4, x + w, y + ROW - 6], fill=color)
            x += w
        draw.text((x + 6, y + 6), f"{totals[k]:.1f}", fill="black", font=small)
    y = top + len(routes) * ROW + 8
    x = MARGIN
    for _, label, color in STAGES:
        width = int(draw.textlength(label, font=small)) + 34
        if x + width > WIDTH - MARGIN:  # the legend goes on in a second row
            x, y = MARGIN, y + 24
        draw.rectangle([x, y + 3, x + 14, y + 17], fill=color)
        draw.text((x + 20, y + 2), label, fill="black", font=small)
        x += width
    return y + 30


def _skipped(draw: ImageDraw.ImageDraw, report: BenchmarkReport, top: int, font: Font, small: Font) -> int:
    if not report.skipped:
        return top
    draw.text((MARGIN, top), "Routes that did not run here", fill="black", font=font)
    top += 28
    for route, why in report.skipped.items():
        top = _paragraph(draw, f"{route}: {why}", top, small, (150, 40, 40))
    return top + 10


def render(report: BenchmarkReport) -> Image.Image:
    """The chart of a report (white background, readable at 100%)."""
    height = 2 * len(report.routes) * ROW + 600 + 60 * len(report.skipped)
    image = Image.new("RGB", (WIDTH, height), "white")
    draw = ImageDraw.Draw(image)
    font, small = _font(18), _font(15)
    simulated = " (simulated device)" if report.runtime == "simulated" else ""
    title = f"paddlex-npu benchmark: images/s by route, runtime {report.runtime}{simulated}"
    draw.text((MARGIN, 14), title, fill="black", font=font)
    top = 44
    for line in header_text(report):
        top = _paragraph(draw, line, top, small, "dimgray") + 2
    top = _throughput(draw, report, top + 12, font, small)
    bottom = _stages(draw, report, top, font, small)
    bottom = _skipped(draw, report, bottom, font, small)
    return image.crop((0, 0, WIDTH, bottom + 10))


def save(report: BenchmarkReport, out: Path) -> Path:
    render(report).save(out)
    return out
