"""The one PaddleX boundary of the serving, Ray and command-line layers (``serve/``, ``ray/``, ``cli/``): every
PaddleX (and PaddleOCR) name they use is reached through here, the private ones
(``basic_serving._pipeline_apps._common``) only here; PaddleX is imported when a function is called.

PaddleX's serving app is behind an adapter: every assumption about it is a named operation (:data:`OPERATIONS`:
replace the pipeline, wrap the lifespan, wrap each endpoint once, prune a result, decode an image, fetch a file),
checked when a server starts (:func:`check_app`, refused naming the operation), applied as one
:class:`~.record.Patch` (:func:`adapt_app`; the decoders' pixel guard and the bounded fetchers of URL inputs by
:func:`install_decoders`, :func:`install_fetchers`), reverted to the very same objects and listed in
``docs/patch-ledger.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import inspect
import threading
from typing import Any, AsyncContextManager, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import UnsupportedPaddlexError
from .record import Applied, Patch, PatchRecord

_LOCK = threading.RLock()


# ---- PaddleX's basic serving ----------------------------------------------------------------------------------
SERVING_UTILS = "paddlex.inference.serving.infra.utils"  # what serving_utils() returns, by name (a preload)


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

    if "_to_json" not in vars(TextRecResult):  # its own conversion (dropping the image and the font), not a base's
        raise AttributeError("TextRecResult has no _to_json of its own")
    return TextRecResult._to_json, _format_data


# ---- PDF pages ------------------------------------------------------------------------------------------------
def pdf_pages(raw: bytes, max_pages: Any) -> Tuple[int, float, List[Tuple[float, float]]]:
    """A PDF's page count, the scale PaddleX's serving renders its pages at (``PDF_RENDER_SCALE``) and the sizes
    in points of its first ``max_pages`` pages (all when None), read from its structure: no page is rendered."""
    import pypdfium2 as pdfium
    from paddlex.inference.utils.pdfium_lock import pdfium_lock
    from paddlex.utils.flags import PDF_RENDER_SCALE

    with pdfium_lock:
        doc = pdfium.PdfDocument(raw)
        try:
            count = len(doc)
            shown = count if max_pages is None else min(count, max_pages)
            return count, float(PDF_RENDER_SCALE), [tuple(doc.get_page_size(i)) for i in range(shown)]
        finally:
            doc.close()


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


# ---- the serving patches: PaddleX's serving utilities ----------------------------------------------------------
SERVE_FIX = "serve with PaddleX 3.7 (docs/compatibility.md)"


_SCALE = "PDF_RENDER_SCALE"


def _pdf_sizing_missing(utils: Any) -> List[str]:
    """What :func:`pdf_pages` sizes PDF pages with, missing from this PaddleX: without it every PDF would
    pass the pixel guard unchecked, so serving is refused rather than left unguarded."""
    found = (
        ("paddlex.inference.utils.pdfium_lock", importlib.util.find_spec("paddlex.inference.utils.pdfium_lock")),
        ("paddlex.utils.flags' PDF_RENDER_SCALE", hasattr(importlib.import_module("paddlex.utils.flags"), _SCALE)),
    )
    return [f"{name} (the pixel guard of PDF inputs sizes their pages with it)" for name, ok in found if not ok]


DECODE, FETCH = "decode an image", "fetch a file"
DECODE_NEEDS = ("file_to_images", "MAX_IMAGE_PIXELS", "image_bytes_to_array", "ImageTooLargeError")
FETCH_NEEDS = ("get_raw_bytes_async", "get_raw_bytes")


def _utils_missing(names: Sequence[str]) -> List[str]:
    """The serving utilities' attributes among ``names`` this PaddleX lacks (and, for the decoders, what the pixel
    guard sizes PDF pages with)."""
    utils = serving_utils()
    missing = [f"serving utils' {n}" for n in names if not hasattr(utils, n)]
    return missing + (_pdf_sizing_missing(utils) if "file_to_images" in names else [])


class UtilsPatch(Patch):
    """Attributes of PaddleX's serving utilities (``paddlex.inference.serving.infra.utils``) replaced: ``values``
    maps each name to a function of the module that gives its replacement (of the original, when it wraps it)."""

    def __init__(self, name: str, values: Dict[str, Callable[[Any], Any]], needs: Sequence[str]) -> None:
        self.name, self.values, self.needs = name, values, tuple(needs)

    def requires(self) -> List[str]:
        return _utils_missing(self.needs)

    def apply(self, record: PatchRecord) -> None:
        utils = serving_utils()
        for attr, value in self.values.items():
            record.set_attr(utils, attr, value(utils))


_APPLIED: Dict[str, Applied] = {}  # the serving patches in place in this process, by name


def _apply(patch: Patch) -> None:
    """Apply ``patch`` in place of an earlier one of its name (a second install replaces the first)."""
    with _LOCK:
        _revert(patch.name)
        applied = Applied(patch, SERVE_FIX)
        applied.apply()
        _APPLIED[patch.name] = applied


def _revert(name: str) -> List[str]:
    with _LOCK:
        applied = _APPLIED.pop(name, None)
        return applied.revert() if applied is not None else []


def install_decoders(
    wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
    max_image_pixels: int,
    wrap_call: Optional[Callable[[Callable[..., Any]], Callable[..., Any]]] = None,
) -> None:
    """In this process (a server), PaddleX's ``file_to_images`` becomes ``wrap(original)`` and its after-decode
    pixel bound ``MAX_IMAGE_PIXELS`` is ``max_image_pixels``; with ``wrap_call``, its ``call_async`` (how its apps
    run the decoder) becomes ``wrap_call(original)``. A second install replaces the first."""
    values = {"file_to_images": lambda u: wrap(u.file_to_images), "MAX_IMAGE_PIXELS": lambda u: max_image_pixels}
    if wrap_call is not None:
        values["call_async"] = lambda u: wrap_call(u.call_async)
    _apply(UtilsPatch(DECODE, values, DECODE_NEEDS + (("call_async",) if wrap_call is not None else ())))


def uninstall_decoders() -> List[str]:
    """Restore PaddleX's decoders; a note for each entry someone else replaced meanwhile (left in place)."""
    return _revert(DECODE)


def install_fetchers(get_raw_bytes_async: Callable[..., Any], get_raw_bytes: Callable[..., Any]) -> None:
    """In this process (a server), PaddleX's fetchers of a request's ``file`` (``get_raw_bytes_async``,
    ``get_raw_bytes``) are the bounded ones of :mod:`paddlex_npu.serve.fetch`; a second install replaces the first."""
    values = {"get_raw_bytes_async": lambda u: get_raw_bytes_async, "get_raw_bytes": lambda u: get_raw_bytes}
    _apply(UtilsPatch(FETCH, values, FETCH_NEEDS))


def uninstall_fetchers() -> List[str]:
    """Restore PaddleX's fetchers; a note for each entry someone else replaced meanwhile (left in place)."""
    return _revert(FETCH)


def patched_attributes() -> List[Tuple[Any, str, Any, Any]]:
    """(owner, name, original, replacement) of the serving patches in place (decoders, fetchers, the apps)."""
    with _LOCK:
        return [a for applied in _APPLIED.values() for a in applied.attributes()]


# ---- PaddleX's serving app, behind the adapter ----------------------------------------------------------------
REPLACE_PIPELINE, WRAP_LIFESPAN, WRAP_ENDPOINTS = "replace the pipeline", "wrap the lifespan", "wrap each endpoint once"
PRUNE = "prune a result"
# What the adapter assumes of PaddleX's serving app and module, by operation (docs/patch-ledger.md lists them).
OPERATIONS = (REPLACE_PIPELINE, WRAP_LIFESPAN, WRAP_ENDPOINTS, PRUNE, DECODE, FETCH)

Hook = Callable[[Any], AsyncContextManager[Any]]  # around one endpoint call, given its validated request


def _endpoints(app: Any) -> List[Any]:
    """The ``dependant`` of each of the app's operations (its POST routes: PaddleX's ``primary_operation`` s)."""
    routes = getattr(getattr(app, "router", None), "routes", ())
    return [getattr(r, "dependant", None) for r in routes if "POST" in (getattr(r, "methods", None) or ())]


def _app_missing(app: Any) -> List[str]:
    """Each operation on the app whose assumption fails, with what is missing."""
    missing = []
    ctx = getattr(getattr(app, "state", None), "context", None)
    if ctx is None or not hasattr(type(ctx), "pipeline") or not hasattr(getattr(ctx, "config", None), "visualize"):
        missing.append(f"{REPLACE_PIPELINE}: app.state.context with a settable pipeline and config.visualize")
    if not callable(getattr(getattr(app, "router", None), "lifespan_context", None)):
        missing.append(f"{WRAP_LIFESPAN}: app.router.lifespan_context")
    dependants = _endpoints(app)
    if not dependants or not all(_takes_request(d) for d in dependants):
        missing.append(f"{WRAP_ENDPOINTS}: POST routes whose dependant.call is a coroutine taking `request`")
    return missing


def _takes_request(dependant: Any) -> bool:
    """The endpoint is a coroutine function that takes its validated request as ``request`` (PaddleX's operations
    all do)."""
    call = getattr(dependant, "call", None)
    return asyncio.iscoroutinefunction(call) and "request" in inspect.signature(call).parameters


def _module_missing() -> List[str]:
    """Each operation on PaddleX's serving modules whose assumption fails, with what is missing."""
    missing = [f"{PRUNE}: {what}" for what in _prune_missing()]
    missing += [f"{DECODE}: {what}" for what in _utils_missing(DECODE_NEEDS)]
    return missing + [f"{FETCH}: {what}" for what in _utils_missing(FETCH_NEEDS)]


class AppPatch(Patch):
    """PaddleX's serving app of one pipeline, adapted: at the start of its lifespan ``replace(pipeline,
    visualize_default)`` stands in for its pipeline wrapper; each endpoint is wrapped once, running ``hooks``
    around the call (each given the validated request); ``on_end`` runs when the lifespan ends."""

    name = "PaddleX's serving app"

    def __init__(self, app: Any, replace: Callable[[Any, bool], Any], hooks: Sequence[Hook], on_end: Callable) -> None:
        self.app, self.replace, self.hooks, self.on_end = app, replace, tuple(hooks), on_end

    def requires(self) -> List[str]:
        return _app_missing(self.app) + _module_missing()

    def apply(self, record: PatchRecord) -> None:
        ctx, router, replace, on_end = self.app.state.context, self.app.router, self.replace, self.on_end
        paddlex_lifespan = router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            async with paddlex_lifespan(app):
                ctx.pipeline = replace(ctx.pipeline, bool(ctx.config.visualize))
                yield
            on_end()

        record.set_attr(router, "lifespan_context", lifespan)
        for dependant in _endpoints(self.app):
            record.set_attr(dependant, "call", _wrapped(dependant.call, self.hooks))


def _wrapped(call: Callable[..., Any], hooks: Sequence[Hook]) -> Callable[..., Any]:
    @functools.wraps(call)
    async def endpoint(*args: Any, **values: Any) -> Any:
        async with contextlib.AsyncExitStack() as stack:
            for hook in hooks:
                await stack.enter_async_context(hook(values.get("request")))
            return await call(*args, **values)

    return endpoint


def check_app(app: Any) -> None:
    """Refuse (:class:`~..errors.UnsupportedPaddlexError` naming each operation whose assumption fails) a PaddleX
    serving app the adapter cannot take: called when a server starts, before anything is patched."""
    missing = _app_missing(app) + _module_missing()
    if missing:
        raise UnsupportedPaddlexError(
            f"PaddleX's serving app lacks what paddlex-npu's adapter assumes: {'; '.join(missing)}: unknown "
            f"layout, not served: {SERVE_FIX}"
        )


def adapt_app(app: Any, replace: Callable[[Any, bool], Any], hooks: Sequence[Hook], on_end: Callable) -> Applied:
    """Apply :class:`AppPatch` to ``app`` (checked first, refused naming the operation); returns it applied."""
    applied = Applied(AppPatch(app, replace, hooks, on_end), SERVE_FIX)
    applied.apply()
    return applied


# ---- a result as PaddleX's apps answer it ---------------------------------------------------------------------
# What PaddleX's text recognition result drops from its JSON: ``TextRecResult._to_json`` pops them from a deep
# copy of the whole result, the input image and the font object included.
_NOT_IN_JSON = ("input_img", "vis_font")


def _prune_missing() -> List[str]:
    try:
        text_rec_json()
        from paddlex.inference.serving.basic_serving._pipeline_apps._common.common import prune_result  # noqa: F401
    except (ImportError, AttributeError) as exc:
        return [f"TextRecResult._to_json, _format_data and _common.common.prune_result ({exc})"]
    return []


def pruned(result: Any) -> Dict[str, Any]:
    """A PaddleX result's JSON without the per-call keys, as PaddleX's serving apps answer it.

    A text line's result (whose class converts with ``TextRecResult._to_json``, its other values scalars) is
    converted as that method does but without its deep copy of the image and the font (0.3 ms of a 1.2 ms
    recognition request): the same JSON."""
    to_json, format_data = text_rec_json()
    if type(result)._to_json is to_json and all(k in result for k in _NOT_IN_JSON) and plain(result):
        return prune_result(format_data({k: v for k, v in result.items() if k not in _NOT_IN_JSON}))
    return prune_result(result.json["res"])


def plain(result: Dict[str, Any]) -> bool:
    """Every value but the image and the font is a scalar (nothing a deep copy would change)."""
    import numpy as np

    scalars = (str, int, float, bool, type(None), np.generic)
    return all(isinstance(v, scalars) for k, v in result.items() if k not in _NOT_IN_JSON)
