"""The server's limits name the option that sets them: PaddleX's 422 for an image or page over the pixel limit says
``--max-image-pixels`` (the 413 of the body limit, in :mod:`.http`, says ``--max-body-mb``)."""

from __future__ import annotations

from typing import Any

PIXEL_HINT = "send a smaller image or page, or start paddlex-npu serve with a larger --max-image-pixels"


def name_the_pixel_option(serving_utils: Any) -> None:
    """Make PaddleX's ``ImageTooLargeError`` (raised by its decoder for images and PDF pages, answered as a 422
    with the error's text) end with what to do. Its module-level name is replaced by a subclass, so every place
    that raises or catches it by that name gets the subclass; idempotent."""
    base = serving_utils.ImageTooLargeError
    if getattr(base, "_paddlex_npu_hint", False):
        return

    class ImageTooLargeError(base):  # type: ignore[misc, valid-type]
        _paddlex_npu_hint = True

        def __init__(self, message: str, **kwargs: Any) -> None:
            super().__init__(f"{str(message).rstrip('.')}: {PIXEL_HINT}", **kwargs)

    ImageTooLargeError.__qualname__ = base.__qualname__
    ImageTooLargeError.__module__ = base.__module__
    serving_utils.ImageTooLargeError = ImageTooLargeError
