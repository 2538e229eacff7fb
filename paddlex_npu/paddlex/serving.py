"""The one PaddleX boundary of the serving, Ray and command-line layers (``serve/``, ``ray/``, ``cli/``): every
PaddleX (and PaddleOCR) name they use is reached through here, the private ones
(``basic_serving._pipeline_apps._common``) only here; PaddleX is imported when a function is called.

The changes made to PaddleX's serving module, the pixel guard of its decoders (``serving_utils.file_to_images``
wrapped, ``serving_utils.MAX_IMAGE_PIXELS`` set) and the bounded fetchers of URL inputs (``get_raw_bytes_async``,
``get_raw_bytes``), are made and undone through :class:`~.record.PatchRecord` s (:func:`install_decoders`,
:func:`install_fetchers` and their uninstalls) and listed in ``docs/patch-ledger.md``.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any, Callable, List, Optional, Tuple

from ..errors import ConfigError
from .record import PatchRecord

_RECORD = PatchRecord()
_LOCK = threading.Lock()


# ---- PaddleX's basic serving ----------------------------------------------------------------------------------
def serving_utils() -> Any:
    """``paddlex.inference.serving.infra.utils`` (decoders, ``ImageTooLargeError``, ``get_raw_bytes``, ...)."""
    from paddlex.inference.serving.infra import utils

    return utils


def create_pipeline_app(pipeline: Any, config: Any) -> Any:
    """PaddleX's FastAPI app of a pipeline config (``basic_serving.create_pipeline_app``)."""
    from paddlex.inference.serving.basic_serving import create_pipeline_app as create

    return create(pipeline, config)


async def call_async(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """PaddleX's ``call_async`` (a blocking call on its thread pool)."""
    return await serving_utils().call_async(func, *args, **kwargs)


def ocr_schemas() -> Tuple[Any, Any]:
    """``(InferRequest, InferResult)`` of PaddleX's OCR serving schema."""
    from paddlex.inference.serving.schemas.ocr import InferRequest, InferResult

    return InferRequest, InferResult


def ocr_file_type(request: Any) -> str:
    """The file type (``IMAGE``/``PDF``) of an OCR request, as PaddleX's OCR app reads it (a private module)."""
    from paddlex.inference.serving.basic_serving._pipeline_apps._common.ocr import get_file_type

    return get_file_type(request)


def postprocess_images(*args: Any, **kwargs: Any) -> Any:
    """PaddleX's result images, encoded as its serving apps answer them (a private module)."""
    from paddlex.inference.serving.basic_serving._pipeline_apps._common.common import postprocess_images as post

    return post(*args, **kwargs)


def prune_result(data: Any) -> Any:
    """PaddleX's pruned result JSON (``_common.common.prune_result``, a private module)."""
    from paddlex.inference.serving.basic_serving._pipeline_apps._common.common import prune_result as prune

    return prune(data)


def text_rec_json() -> Tuple[Any, Callable[[Any], Any]]:
    """``(TextRecResult._to_json, _format_data)``: how PaddleX converts a text line's result to JSON."""
    from paddlex.inference.common.result.mixin import _format_data
    from paddlex.inference.models.text_recognition.result import TextRecResult

    return TextRecResult._to_json, _format_data


# ---- PDF pages ------------------------------------------------------------------------------------------------
def pdf_page_pixels(raw: bytes, max_pages: Any, max_pixels: int) -> List[Tuple[int, int, int]]:
    """(width, height, pixels) each page of a PDF renders at, as PaddleX's ``read_pdf`` scales it under
    ``max_pixels``; no page is rendered."""
    import pypdfium2 as pdfium
    from paddlex.inference.utils.pdf_rendering import estimate_pdf_render_pixels
    from paddlex.inference.utils.pdfium_lock import pdfium_lock

    utils, out = serving_utils(), []
    with pdfium_lock:
        doc = pdfium.PdfDocument(raw)
        try:
            for i in range(len(doc) if max_pages is None else min(len(doc), max_pages)):
                size = doc.get_page_size(i)
                scale = utils.get_pdf_render_scale_within_pixel_limit(size, page_index=i + 1, max_pixels=max_pixels)
                out.append(estimate_pdf_render_pixels(size, scale))
        finally:
            doc.close()
    return out


def pdf_reader(max_pixels: Optional[int] = None) -> Any:
    """PaddleX's PDF reader with the settings its image batch sampler uses (pages scaled down to ``max_pixels``,
    PaddleX's own default when None)."""
    from paddlex.inference.utils.io.readers import PDFReaderBackend
    from paddlex.inference.utils.pdf_rendering import DEFAULT_MAX_IMAGE_PIXELS
    from paddlex.utils.flags import PDF_RENDER_SCALE

    return PDFReaderBackend(zoom=PDF_RENDER_SCALE, max_pixels=max_pixels or DEFAULT_MAX_IMAGE_PIXELS)


# ---- the command lines ----------------------------------------------------------------------------------------
def paddlex_cli() -> Callable[[], Any]:
    from paddlex.paddlex_cli import main

    return main


def paddleocr_cli() -> Callable[[], Any]:
    """PaddleOCR's command line (ImportError when PaddleOCR is not installed)."""
    from paddleocr._cli import main

    return main


# ---- the serving patch ----------------------------------------------------------------------------------------
def _require_pdf_sizing(utils: Any) -> None:
    """Refuse a PaddleX whose serving layout lacks what :func:`pdf_page_pixels` sizes PDF pages with: without it
    every PDF would pass the pixel guard unchecked."""
    missing = [
        name
        for name, present in (
            (
                "paddlex.inference.utils.pdf_rendering",
                importlib.util.find_spec("paddlex.inference.utils.pdf_rendering"),
            ),
            ("paddlex.inference.utils.pdfium_lock", importlib.util.find_spec("paddlex.inference.utils.pdfium_lock")),
            (
                "serving utils' get_pdf_render_scale_within_pixel_limit",
                hasattr(utils, "get_pdf_render_scale_within_pixel_limit"),
            ),
        )
        if not present
    ]
    if missing:
        raise ConfigError(
            f"this PaddleX's serving layout has no {', '.join(missing)}: the pixel guard of PDF inputs cannot size "
            "their pages, so serving is refused rather than left unguarded; serve with PaddleX 3.7 "
            "(docs/compatibility.md)"
        )


def install_decoders(wrap: Callable[[Callable[..., Any]], Callable[..., Any]], max_image_pixels: int) -> None:
    """In this process (a server), PaddleX's ``file_to_images`` becomes ``wrap(original)`` and its after-decode
    pixel bound ``MAX_IMAGE_PIXELS`` is ``max_image_pixels``; a second install replaces the first."""
    utils = serving_utils()
    _require_pdf_sizing(utils)
    with _LOCK:
        _RECORD.revert()
        _RECORD.set_attr(utils, "file_to_images", wrap(utils.file_to_images))
        _RECORD.set_attr(utils, "MAX_IMAGE_PIXELS", max_image_pixels)


def uninstall_decoders() -> List[str]:
    """Restore PaddleX's decoders; a note for each entry someone else replaced meanwhile (left in place)."""
    with _LOCK:
        return _RECORD.revert()


_FETCH_RECORD = PatchRecord()  # PaddleX's fetchers of URL inputs (serve.fetch), on their own record


def install_fetchers(get_raw_bytes_async: Callable[..., Any], get_raw_bytes: Callable[..., Any]) -> None:
    """In this process (a server), PaddleX's fetchers of a request's ``file`` (``get_raw_bytes_async``,
    ``get_raw_bytes``) are the bounded ones of :mod:`paddlex_npu.serve.fetch`; a second install replaces the first."""
    utils = serving_utils()
    with _LOCK:
        _FETCH_RECORD.revert()
        _FETCH_RECORD.set_attr(utils, "get_raw_bytes_async", get_raw_bytes_async)
        _FETCH_RECORD.set_attr(utils, "get_raw_bytes", get_raw_bytes)


def uninstall_fetchers() -> List[str]:
    """Restore PaddleX's fetchers; a note for each entry someone else replaced meanwhile (left in place)."""
    with _LOCK:
        return _FETCH_RECORD.revert()


def patched_attributes() -> List[Tuple[Any, str, Any, Any]]:
    """(owner, name, original, replacement) of the serving patch in place (decoders and fetchers)."""
    return _RECORD.attributes() + _FETCH_RECORD.attributes()
