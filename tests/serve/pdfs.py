"""PDFs written byte by byte for the tests of issue 54: a page of any size (beyond what pypdfium2's ``new_page``
makes), many pages, a repeated-draw bomb (one compressed image drawn many times on one page), cut ones."""

from __future__ import annotations

import io
import zlib
from typing import List, Tuple


def _document(objects: List[bytes]) -> bytes:
    """A PDF of these objects (object 1 the catalog), with a correct cross-reference table."""
    out, offsets = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"), []
    for k, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % k + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def one_page(width: float, height: float) -> bytes:
    """One empty page of ``width`` x ``height`` pt: 441 bytes for 20,000 x 20,000 pt."""
    return _document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << >> /Contents 4 0 R >>" % (width, height),
            b"<< /Length 0 >>\nstream\n\nendstream",
        ]
    )


def many_pages(count: int, side: float = 100) -> bytes:
    """``count`` pages sharing one empty content stream (5,000 pages: about 0.3 MB)."""
    kids = b" ".join(b"%d 0 R" % (4 + k) for k in range(count))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << >> /Contents 3 0 R >>" % (side, side)
    return _document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
            b"<< /Length 0 >>\nstream\n\nendstream",
            *([page] * count),
        ]
    )


def repeated_draw(draws: int, image_side: int = 4000, page_pt: int = 1000) -> bytes:
    """One page of ``page_pt`` pt drawing one flate-compressed grey image of ``image_side`` pixels ``draws`` times
    (each draw a little smaller): about 17 KB, and PDFium resamples the whole image at every draw."""
    image = zlib.compress(bytes(image_side * image_side), 9)
    ops = b"".join(
        b"q %d 0 0 %d %d %d cm /Im0 Do Q\n" % (page_pt - k % 97, page_pt - k % 89, 0, 0) for k in range(draws)
    )
    resources = b"<< /XObject << /Im0 5 0 R >> >>"
    head = b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8" % (
        image_side,
        image_side,
    )
    return _document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources %s /Contents 4 0 R >>"
            % (page_pt, page_pt, resources),
            b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream",
            b"<< " + head + b" /Filter /FlateDecode /Length %d >>\nstream\n" % len(image) + image + b"\nendstream",
        ]
    )


def text_pages(pages: List[Tuple[float, float]]) -> bytes:
    """A PDF of blank pages of these sizes, made by pypdfium2 (PaddleX renders them at 2 pixels a point)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for w, h in pages:
        doc.new_page(w, h)
    out = io.BytesIO()
    doc.save(out)
    doc.close()
    return out.getvalue()


def truncated(raw: bytes) -> bytes:
    """The first third of a PDF: no cross-reference table, no trailer, the page's stream cut."""
    return raw[: len(raw) // 3]
