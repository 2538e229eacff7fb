"""Pixel budgets checked before any decode, the same in ``serve`` and Triton.

PaddleX decodes an image (or renders a PDF page) and then compares its size with ``MAX_IMAGE_PIXELS``: a 231 KB PNG
of 30000 x 30000 costs gigabytes before its 422. Here the sizes come from the file's header (Pillow's lazy open
reads no pixel data; pypdfium2 gives a PDF's page count and page sizes without rendering) and are refused first:

- ``max_image_pixels``: one image, TIFF frame or PDF page rendered at PaddleX's scale (``--max-image-pixels``): a
  page over it is refused, never scaled down (a 458-byte PDF of one 20,000 pt page would cost 40 Mpx rendered);
- the page count: a PDF of more pages than PaddleX reads (``max_num_input_imgs`` of the YAML's ``Serving: extra``,
  10 by default) is refused, not silently cut to its first pages;
- ``max_request_pixels``: all images of one request together, e.g. every page of a PDF (``--max-request-pixels``);
- ``max_decodes``: decodes that run at once in the process, so concurrent bombs cannot add up.

The error is PaddleX's :class:`ImageTooLargeError` (its serving apps answer it 422), naming the option.
"""

from __future__ import annotations

import io
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, List, Optional, Tuple

from ..kernels import png_read
from ..paddlex import serving as paddlex_serving
from .render import PdfRenderer

DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
DEFAULT_MAX_REQUEST_PIXELS = 80_000_000
DEFAULT_MAX_DECODES = 2


@dataclass(frozen=True)
class PixelLimits:
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    image_option: str = "the server's --max-image-pixels"
    request_option: str = "the server's --max-request-pixels"
    pages_option: str = "Serving: extra: max_num_input_imgs of the pipeline YAML"

    def __post_init__(self) -> None:
        for name in ("max_image_pixels", "max_request_pixels"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


def _too_large(message: str, **fields: Any) -> Exception:
    return paddlex_serving.serving_utils().ImageTooLargeError(message, **fields)


def _image_sizes(raw: bytes, max_frames: Optional[int]) -> List[Tuple[int, int]]:
    """(width, height) of the image, or of each TIFF frame, from the header; ValueError if no header is read.
    A PNG's size is read from its IHDR chunk, which the format puts first (:func:`..kernels.png_read.png_size`: a
    twentieth of Pillow's open, which is most of a small text line's check)."""
    from PIL import Image

    size = png_read.png_size(raw)
    if size is not None:
        return [size]

    try:
        with Image.open(io.BytesIO(raw)) as img:
            sizes = [img.size]
            frames = getattr(img, "n_frames", 1) if raw[:4] in (b"II\x2a\x00", b"MM\x00\x2a") else 1
            for i in range(1, min(frames, max_frames or frames)):
                img.seek(i)
                sizes.append(img.size)
            return sizes
    except Image.DecompressionBombError as exc:  # over Pillow's own bound (2 x its MAX_IMAGE_PIXELS)
        m = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = int(m.group(1)) if m else 1 << 62
        return [(pixels, 1)]
    except Exception as exc:
        raise ValueError(f"the image header could not be read ({exc})") from exc


def _pdf_pages(raw: bytes, max_pages: Optional[int], limits: PixelLimits) -> List[Tuple[int, int, int]]:
    """(width, height, pixels) each page renders at (PaddleX's render scale, never scaled down here), read from the
    document's structure; a document of more pages than PaddleX would read, or a page over the image limit, is
    refused (ImageTooLargeError) before anything is rendered. ValueError: not a readable PDF."""
    try:
        count, scale, sizes = paddlex_serving.pdf_pages(raw, max_pages)
    except Exception as exc:
        raise ValueError(f"the PDF's structure could not be read ({exc})") from exc
    if max_pages is not None and count > max_pages:
        raise _too_large(
            f"the PDF has {count} pages, over the {max_pages} pages one request may hold ({limits.pages_option}); "
            f"send at most {max_pages} pages, e.g. split the document"
        )
    pages = []
    for i, (w_pt, h_pt) in enumerate(sizes):
        w, h = math.ceil(w_pt * scale), math.ceil(h_pt * scale)  # as PaddleX's estimate_pdf_render_pixels
        if w * h > limits.max_image_pixels:
            raise _too_large(
                f"Page {i + 1} of the PDF is {w_pt:g} x {h_pt:g} pt: rendered at PaddleX's scale {scale:g} it "
                f"would be {w} x {h} = {w * h} pixels, over the {limits.max_image_pixels} pixels of one page "
                f"({limits.image_option}); it was refused before rendering",
                width=w,
                height=h,
                pixel_count=w * h,
                max_pixels=limits.max_image_pixels,
                page_index=i + 1,
            )
        pages.append((w, h, w * h))
    return pages


def check_pixels(raw: bytes, file_type: str, max_num_imgs: Optional[int], limits: PixelLimits) -> None:
    """Refuse ``raw`` (an IMAGE or PDF file) over the limits, reading only its header or structure
    (ImageTooLargeError); a file whose size cannot be read is left to the decoder, which refuses it as PaddleX
    does."""
    try:
        if file_type == "PDF":
            pages, what = _pdf_pages(raw, max_num_imgs, limits), "PDF"
        else:
            pages, what = [(w, h, w * h) for w, h in _image_sizes(raw, max_num_imgs)], "image"
    except ValueError:
        return
    for i, (w, h, pixels) in enumerate(pages):
        if pixels > limits.max_image_pixels:  # an image or a TIFF frame (a PDF page was refused above)
            page = f"Page {i + 1}: " if len(pages) > 1 else ""
            raise _too_large(
                f"{page}Image pixel count {pixels} (width={w}, height={h}) exceeds maximum allowed "
                f"{limits.max_image_pixels} ({limits.image_option}); it was refused before decoding",
                width=w,
                height=h,
                pixel_count=pixels,
                max_pixels=limits.max_image_pixels,
            )
    total = sum(p for _, _, p in pages)
    if total > limits.max_request_pixels:
        raise _too_large(
            f"the {what}'s {len(pages)} page(s) or frame(s) come to {total} pixels, over the "
            f"{limits.max_request_pixels}"
            f" pixels one request may decode ({limits.request_option}); send fewer pages",
            pixel_count=total,
            max_pixels=limits.max_request_pixels,
        )


class DecodeGuard:
    """Checks :func:`check_pixels` and then decodes, at most ``max_decodes`` at a time in this process; with a
    ``renderer``, a PDF is rendered by it (a child process, bounded in time) instead of in this process."""

    def __init__(
        self, limits: PixelLimits, max_decodes: int = DEFAULT_MAX_DECODES, renderer: Optional[PdfRenderer] = None
    ) -> None:
        self.limits, self.renderer = limits, renderer
        self._slots = threading.BoundedSemaphore(max(1, max_decodes))

    def file_to_images(self, decode: Callable[..., Any], raw: bytes, file_type: str, **kwargs: Any) -> Any:
        check_pixels(raw, file_type, kwargs.get("max_num_imgs"), self.limits)
        if file_type == "PDF" and self.renderer is not None:
            return self.renderer.render(raw, kwargs.get("max_num_imgs"), self.limits.max_image_pixels)
        with self._slots:
            return decode(_stored(raw) if file_type == "IMAGE" else raw, file_type, **kwargs)

    async def pdf_to_images(self, call: Callable[..., Awaitable[Any]], raw: bytes, **kwargs: Any) -> Any:
        """A PDF checked (on a thread, by ``call``: PaddleX's ``call_async``) and rendered by the renderer, awaited
        without holding a thread."""
        assert self.renderer is not None
        await call(check_pixels, raw, "PDF", kwargs.get("max_num_imgs"), self.limits)
        return await self.renderer.render_async(raw, kwargs.get("max_num_imgs"), self.limits.max_image_pixels)

    def image_bytes_to_array(self, decode: Callable[[bytes], Any], raw: bytes) -> Any:
        check_pixels(raw, "IMAGE", 1, self.limits)
        with self._slots:
            return decode(_stored(raw))


def _stored(raw: bytes) -> bytes:
    """A PNG file's bytes with its image data inflated by zlib-ng (:func:`..kernels.png_read.stored_png`: OpenCV
    decodes the same pixels with half the work), any other file's as they are."""
    return (png_read.stored_png(raw) if png_read.available() else None) or raw


def install(
    limits: PixelLimits,
    max_decodes: int = DEFAULT_MAX_DECODES,
    renderer: Optional[PdfRenderer] = None,
    watch: Optional[Callable[[Awaitable[Any]], Awaitable[Any]]] = None,
) -> DecodeGuard:
    """In this process (a server), PaddleX's serving decoders check the limits first and are bounded; PaddleX's
    own after-decode check uses ``max_image_pixels`` too. With a ``renderer``, PaddleX's ``call_async`` of the
    decoder for a PDF awaits the renderer instead of a thread (``watch`` runs it: the server cancels it when the
    client goes). Made through the patch record of :mod:`~..paddlex.serving` (listed in the patch ledger), undone
    by :func:`uninstall`."""
    guard = DecodeGuard(limits, max_decodes, renderer)
    made: List[Callable[..., Any]] = []

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def file_to_images(raw: bytes, file_type: str, **kwargs: Any) -> Any:
            return guard.file_to_images(original, raw, file_type, **kwargs)

        made.append(file_to_images)
        return file_to_images

    def wrap_call(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call_async(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            if renderer is not None and func in made and len(args) == 2 and args[1] == "PDF":
                work = guard.pdf_to_images(original, args[0], **kwargs)
                return await (watch(work) if watch is not None else work)
            return await original(func, *args, **kwargs)

        return call_async

    paddlex_serving.install_decoders(wrap, limits.max_image_pixels, wrap_call)
    return guard


def uninstall() -> None:
    """PaddleX's serving decoders as they were."""
    paddlex_serving.uninstall_decoders()
