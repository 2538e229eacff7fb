"""Rendered tables and a document page, for the table and document tests and ``benchmark --document``: wired
(ruled) and wireless tables, merged cells, more rows than fit the 488×488 input's aspect, and a page with a title,
paragraphs and a table. Small images, drawn with PIL and the bundled font."""

from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

from .assets import find_font

# (rows of cell texts, per row the columns a cell spans: None is one each)
Grid = List[List[str]]

HEADER = ["Item", "Qty", "Price"]
ITEMS = [["Apples", "12", "3.40"], ["Pears", "7", "2.15"], ["Plums", "30", "9.90"]]


def render_table(
    rows: Sequence[Sequence[str]],
    path: Path,
    *,
    ruled: bool = True,
    spans: Sequence[Sequence[int]] = (),
    cell: Tuple[int, int] = (150, 44),
    size: int = 22,
) -> Path:
    """Draw ``rows`` (a cell text per column; ``spans[r]``: the columns each cell of row ``r`` spans) as a table
    on white, black text, with ruling lines when ``ruled``; saves a PNG at ``path``."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(find_font()), size)
    cols = max(sum(spans[r]) if r < len(spans) and spans[r] else len(row) for r, row in enumerate(rows))
    cw, ch = cell
    margin = 20
    img = Image.new("RGB", (cols * cw + 2 * margin, len(rows) * ch + 2 * margin), "white")
    draw = ImageDraw.Draw(img)
    for r, row in enumerate(rows):
        widths = list(spans[r]) if r < len(spans) and spans[r] else [1] * len(row)
        x = margin
        y = margin + r * ch
        for text, span in zip(row, widths):
            if ruled:
                draw.rectangle([x, y, x + span * cw, y + ch], outline="black", width=2)
            draw.text((x + 12, y + (ch - size) // 2 - 2), text, fill="black", font=font)
            x += span * cw
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path


def sample_tables(folder: Path) -> dict:
    """The tests' tables by name: wired, wireless, merged (a header cell over two columns), tall (14 rows)."""
    folder = Path(folder)
    tall = [HEADER] + [[f"Row {k}", str(3 * k + 1), f"{k}.{k}0"] for k in range(1, 14)]
    return {
        "wired": render_table([HEADER] + ITEMS, folder / "wired.png"),
        "wireless": render_table([HEADER] + ITEMS, folder / "wireless.png", ruled=False),
        "merged": render_table(
            [["Fruit", "Price"], *ITEMS], folder / "merged.png", spans=[[2, 1]] + [[1, 1, 1]] * len(ITEMS)
        ),
        "tall": render_table(tall, folder / "tall.png", cell=(130, 36), size=18),
    }


TITLE = "Quarterly Fruit Report"
BEFORE = (
    "The orchard sold more fruit this quarter than in any quarter before.",
    "Apples led the sales, pears and plums followed at lower prices.",
    "The table below lists the quantities and prices of each fruit.",
)
AFTER = ("Prices are in euros per kilogram, quantities in crates.", "Next quarter the orchard expects more plums.")


def render_page(folder: Path) -> Tuple[Path, Path]:
    """A document page (a title, a paragraph, a ruled table, a paragraph), as a PNG and as a two-page PDF (the page,
    then the table alone), the PDF at 144 dpi so that PaddleX's 2x rendering gives back the PNG's pixels."""
    from PIL import Image, ImageDraw, ImageFont

    folder = Path(folder)
    table = Image.open(render_table([HEADER] + ITEMS, folder / "page-table.png")).convert("RGB")
    page = Image.new("RGB", (1000, 1300), "white")
    draw = ImageDraw.Draw(page)
    title, body = (ImageFont.truetype(str(find_font()), size) for size in (44, 24))
    draw.text((80, 60), TITLE, font=title, fill="black")
    y = 150
    for line in BEFORE:
        draw.text((80, y), line, font=body, fill="black")
        y += 40
    page.paste(table, (80, y + 40))
    y += 100 + table.height
    for line in AFTER:
        draw.text((80, y), line, font=body, fill="black")
        y += 40
    png, pdf = folder / "page.png", folder / "page.pdf"
    page.save(png)
    second = Image.new("RGB", page.size, "white")
    second.paste(table, (80, 80))
    page.save(pdf, "PDF", resolution=144.0, save_all=True, append_images=[second])
    return png, pdf
