"""The pixel budgets of ``serve/images.py``, in process against PaddleX's real serving helpers, Pillow and
pypdfium2: sizes read from headers only (PNG, TIFF frames in both byte orders, other formats through Pillow, PDF
pages as PaddleX renders them), each limit exactly at and one past its bound, the errors naming the option to
change, files whose size cannot be read left to PaddleX's decoder, decodes bounded, PaddleX's decoders wrapped and
restored."""

from __future__ import annotations

import dataclasses
import io
import struct
import threading
import zlib
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from paddlex_npu.paddlex import serving
from paddlex_npu.serve import images
from paddlex_npu.serve.images import DecodeGuard, PixelLimits, _image_sizes, check_pixels
from tests.serve import pdfs

PNG = b"\x89PNG\r\n\x1a\n"
IMAGE_OPTION = "(the server's --max-image-pixels)"
REQUEST_OPTION = "(the server's --max-request-pixels)"


def _png_header(width: int, height: int, kind: bytes = b"IHDR", signature: bytes = PNG) -> bytes:
    """A PNG's signature and IHDR chunk: all that is read of it (no pixel data follows)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return signature + struct.pack(">I", 13) + kind + ihdr + struct.pack(">I", zlib.crc32(kind + ihdr))


def _tiff(sizes: List[Tuple[int, int]], big_endian: bool = False, pixels: bool = False) -> bytes:
    """A grey 8-bit TIFF of one frame per size, in either byte order; the strips hold data only when ``pixels``."""
    e = ">" if big_endian else "<"
    out = bytearray(b"MM\x00\x2a" if big_endian else b"II\x2a\x00") + struct.pack(e + "I", 8)
    for k, (w, h) in enumerate(sizes):
        data_offset = len(out) + 2 + 8 * 12 + 4
        entries = [(256, 4, w), (257, 4, h), (258, 3, 8), (259, 3, 1), (262, 3, 1)]
        entries += [(273, 4, data_offset), (278, 4, h), (279, 4, w * h)]
        data = bytes(w * h) if pixels else b""
        out += struct.pack(e + "H", len(entries))
        for tag, typ, val in entries:
            out += (
                struct.pack(e + "HHIHH", tag, typ, 1, val, 0) if typ == 3 else struct.pack(e + "HHII", tag, typ, 1, val)
            )
        out += struct.pack(e + "I", data_offset + len(data) if k < len(sizes) - 1 else 0) + data
    return bytes(out)


def _pillow(fmt: str, size: Tuple[int, int], frames: int = 1) -> bytes:
    from PIL import Image

    first, *rest = [Image.new("RGB", size, (40 * k, 0, 0)) for k in range(frames)]
    out = io.BytesIO()
    first.save(out, fmt, **({"save_all": True, "append_images": rest} if rest else {}))
    return out.getvalue()


_pdf = pdfs.text_pages


def _refused(raw: bytes, file_type: str, limits: PixelLimits, max_num_imgs: Optional[int] = None) -> Any:
    """The ImageTooLargeError ``check_pixels`` raises (PaddleX's own class, which its apps answer 422)."""
    with pytest.raises(serving.serving_utils().ImageTooLargeError) as info:
        check_pixels(raw, file_type, max_num_imgs, limits)
    return info.value


# ---- the limits ------------------------------------------------------------------------------------------------
def test_the_defaults_and_the_options_they_name():
    limits = PixelLimits()
    assert (limits.max_image_pixels, limits.max_request_pixels) == (40_000_000, 80_000_000)
    assert images.DEFAULT_MAX_DECODES == 2
    check_pixels(_png_header(8000, 5000), "IMAGE", None, limits)  # 40 000 000: at the bound
    err = _refused(_png_header(8000, 5001), "IMAGE", limits)
    assert str(err).endswith(f"maximum allowed 40000000 {IMAGE_OPTION}; it was refused before decoding"), err
    check_pixels(_tiff([(8000, 5000), (8000, 5000)]), "IMAGE", None, limits)  # 80 000 000: at the bound
    err = _refused(_tiff([(8000, 5000), (8000, 5000), (1, 1)]), "IMAGE", limits)
    assert "come to 80000001 pixels, over the 80000000 pixels" in str(err) and REQUEST_OPTION in str(err), err
    with pytest.raises(dataclasses.FrozenInstanceError):
        limits.max_image_pixels = 1  # type: ignore[misc]


@pytest.mark.parametrize("field", ["max_image_pixels", "max_request_pixels"])
@pytest.mark.parametrize("value", [0, -1])
def test_a_limit_must_be_positive(field, value):
    with pytest.raises(ValueError, match=f"{field} must be > 0, got {value}"):
        PixelLimits(**{field: value})
    assert getattr(PixelLimits(**{field: 1}), field) == 1


# ---- sizes from headers ----------------------------------------------------------------------------------------
def test_a_png_size_is_its_ihdr_read_big_endian():
    assert _image_sizes(_png_header(0x0102, 0x030405), None) == [(0x0102, 0x030405)]
    assert _image_sizes(_png_header(0x81020304, 0x05060708), None) == [(0x81020304, 0x05060708)]
    assert len(_png_header(3, 7)[:24]) == 24
    assert _image_sizes(_png_header(3, 7)[:24], 1) == [(3, 7)]  # the signature, the chunk's head and both sizes


@pytest.mark.parametrize(
    "raw",
    [
        _png_header(3, 7)[:23],  # cut inside the height
        _png_header(3, 7, kind=b"IHDX"),  # the first chunk is not the header
        _png_header(3, 7, signature=b"\x89PNX\r\n\x1a\n"),  # not a PNG
        b"",
        b"neither an image nor a PDF, just some words" * 3,
    ],
    ids=["cut", "no-ihdr", "no-signature", "empty", "text"],
)
def test_a_header_that_cannot_be_read_is_a_value_error_and_is_left_to_the_decoder(raw):
    with pytest.raises(ValueError, match="the image header could not be read"):
        _image_sizes(raw, None)
    assert check_pixels(raw, "IMAGE", None, PixelLimits(1, 1)) is None  # PaddleX's decoder answers it


@pytest.mark.parametrize("fmt", ["JPEG", "BMP", "WEBP"])
def test_other_formats_are_sized_by_pillow(fmt):
    assert _image_sizes(_pillow(fmt, (37, 21)), None) == [(37, 21)]


def test_only_a_tiff_counts_frames():
    gif = _pillow("GIF", (37, 21), frames=3)
    from PIL import Image

    assert Image.open(io.BytesIO(gif)).n_frames == 3
    assert _image_sizes(gif, None) == [(37, 21)]


@pytest.mark.parametrize("big_endian", [False, True], ids=["II", "MM"])
def test_each_tiff_frame_is_sized_up_to_max_frames(big_endian):
    raw = _tiff([(5, 3), (7, 2), (11, 13)], big_endian)
    assert _image_sizes(raw, None) == [(5, 3), (7, 2), (11, 13)]
    assert _image_sizes(raw, 0) == [(5, 3), (7, 2), (11, 13)]  # 0: no limit, as None
    assert _image_sizes(raw, 2) == [(5, 3), (7, 2)]
    assert _image_sizes(raw, 1) == [(5, 3)]
    assert _image_sizes(raw, 5) == [(5, 3), (7, 2), (11, 13)]


def test_an_image_over_pillows_bomb_bound_is_sized_from_its_error():
    from PIL import Image

    side = 20_000  # 400 Mpx, over twice Pillow's MAX_IMAGE_PIXELS
    assert side * side > 2 * Image.MAX_IMAGE_PIXELS
    assert _image_sizes(_tiff([(side, side)]), None) == [(side * side, 1)]
    err = _refused(_tiff([(side, side)]), "IMAGE", PixelLimits())
    assert str(err).startswith("Image pixel count 400000000 (width=400000000, height=1) exceeds"), err
    assert (err.pixel_count, err.max_pixels) == (400_000_000, 40_000_000)


def test_a_bomb_error_without_its_pixel_count_counts_as_over_any_limit(monkeypatch):
    """Another Pillow's wording: the size is unknown, so it is refused, never let through."""
    from PIL import Image

    def bomb(*_: Any, **__: Any) -> Any:
        raise Image.DecompressionBombError("too big, could be decompression bomb DOS attack")

    monkeypatch.setattr(Image, "open", bomb)
    assert _image_sizes(_tiff([(5, 3)]), None) == [(1 << 62, 1)]
    _refused(_tiff([(5, 3)]), "IMAGE", PixelLimits(4_000_000_000_000_000_000, 8_000_000_000_000_000_000))


# ---- images ----------------------------------------------------------------------------------------------------
def test_one_image_at_and_one_past_the_image_limit():
    limits = PixelLimits(5000, 10**9)
    check_pixels(_png_header(2500, 2), "IMAGE", None, limits)
    err = _refused(_png_header(1667, 3), "IMAGE", limits)
    assert str(err) == (
        f"Image pixel count 5001 (width=1667, height=3) exceeds maximum allowed 5000 {IMAGE_OPTION}; "
        "it was refused before decoding"
    )
    assert (err.width, err.height, err.pixel_count, err.max_pixels) == (1667, 3, 5001, 5000)


def test_the_frame_over_the_limit_is_named_by_its_page_number():
    limits = PixelLimits(100, 10**9)
    check_pixels(_tiff([(10, 10), (10, 10)]), "IMAGE", None, limits)
    err = _refused(_tiff([(10, 10), (101, 1), (1000, 1000)]), "IMAGE", limits)
    assert str(err).startswith("Page 2: Image pixel count 101 (width=101, height=1) exceeds maximum allowed 100")
    err = _refused(_tiff([(10, 10), (101, 1)]), "IMAGE", limits)
    assert str(err).startswith("Page 2: Image pixel count 101 "), err
    assert _refused(_tiff([(101, 1)]), "IMAGE", limits).args[0].startswith("Image pixel count 101 ")


def test_the_frames_of_one_request_add_up_to_the_request_limit():
    limits = PixelLimits(100, 250)
    check_pixels(_tiff([(10, 10), (10, 10), (5, 10)]), "IMAGE", None, limits)  # 250: at the bound
    err = _refused(_tiff([(10, 10), (10, 10), (51, 1)]), "IMAGE", limits)
    assert str(err) == (
        "the image's 3 page(s) or frame(s) come to 251 pixels, over the 250 pixels one request may decode "
        f"{REQUEST_OPTION}; send fewer pages"
    )
    assert (err.pixel_count, err.max_pixels) == (251, 250)
    check_pixels(_tiff([(10, 10), (10, 10), (51, 1)]), "IMAGE", 2, limits)  # the frames PaddleX would decode


def test_the_options_named_are_the_limits_own():
    limits = PixelLimits(10, 20, image_option="ray-ocr --max-image-pixels", request_option="ray-ocr --max-rp")
    assert "(ray-ocr --max-image-pixels)" in str(_refused(_png_header(11, 1), "IMAGE", limits))
    assert "(ray-ocr --max-rp)" in str(_refused(_tiff([(10, 1), (10, 1), (1, 1)]), "IMAGE", limits))


# ---- PDF -------------------------------------------------------------------------------------------------------
def test_pdf_pages_add_up_as_paddlex_renders_them():
    raw = _pdf([(100, 50)] * 3)  # 200 x 100 pixels each
    assert serving.pdf_pages(raw, None) == (3, 2.0, [(100.0, 50.0)] * 3)
    assert serving.pdf_pages(raw, 2) == (3, 2.0, [(100.0, 50.0)] * 2)
    check_pixels(raw, "PDF", None, PixelLimits(20_000, 60_000))
    err = _refused(raw, "PDF", PixelLimits(20_000, 59_999))
    assert str(err) == (
        "the PDF's 3 page(s) or frame(s) come to 60000 pixels, over the 59999 pixels one request may decode "
        f"{REQUEST_OPTION}; send fewer pages"
    )
    check_pixels(raw, "PDF", 3, PixelLimits(20_000, 60_000))


def test_a_pdf_over_the_page_limit_is_refused_naming_it_not_cut():
    raw = _pdf([(10, 10)] * 3)
    err = _refused(raw, "PDF", PixelLimits(), max_num_imgs=2)
    assert str(err) == (
        "the PDF has 3 pages, over the 2 pages one request may hold (Serving: extra: max_num_input_imgs of the "
        "pipeline YAML); send at most 2 pages, e.g. split the document"
    )
    check_pixels(raw, "PDF", 3, PixelLimits())
    check_pixels(raw, "PDF", None, PixelLimits())  # no page limit (Ray Data): the pixels bound it


def test_a_pdf_page_over_the_image_limit_is_refused_not_scaled_down():
    raw = _pdf([(50, 50), (1000, 1000)])  # the second is 2000 x 2000 at PaddleX's scale
    err = _refused(raw, "PDF", PixelLimits(1_000_000, 10**9))
    assert str(err) == (
        "Page 2 of the PDF is 1000 x 1000 pt: rendered at PaddleX's scale 2 it would be 2000 x 2000 = 4000000 "
        f"pixels, over the 1000000 pixels of one page {IMAGE_OPTION}; it was refused before rendering"
    )
    assert (err.width, err.height, err.pixel_count, err.max_pixels, err.page_index) == (2000, 2000, 4 * 10**6, 10**6, 2)
    check_pixels(raw, "PDF", None, PixelLimits(4_000_000, 10**9))


def test_a_458_byte_pdf_of_one_huge_page_is_refused_before_rendering():
    raw = pdfs.one_page(20_000, 20_000)
    assert len(raw) < 460  # the was 458 bytes
    assert serving.pdf_pages(raw, 10) == (1, 2.0, [(20_000.0, 20_000.0)])
    err = _refused(raw, "PDF", PixelLimits(), max_num_imgs=10)
    assert "Page 1 of the PDF is 20000 x 20000 pt" in str(err) and "40000 x 40000 = 1600000000 pixels" in str(err)


@pytest.mark.parametrize("raw", [b"%PDF-1.7 but nothing after", _png_header(10, 10), b""], ids=["cut", "png", "empty"])
def test_a_pdf_that_cannot_be_read_is_left_to_the_decoder(raw):
    assert check_pixels(raw, "PDF", None, PixelLimits(1, 1)) is None
    with pytest.raises(Exception) as info:
        serving.serving_utils().file_to_images(raw, "PDF")
    assert type(info.value).__name__ != "ImageTooLargeError"


# ---- decoding --------------------------------------------------------------------------------------------------
class Decoder:
    """A decode that records its calls and, when ``hold``, waits inside until released."""

    def __init__(self, hold: bool = False) -> None:
        self.calls: List[Tuple[Any, ...]] = []
        self.hold, self.inside, self.release = hold, threading.Semaphore(0), threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((*args, kwargs))
        if self.hold:
            self.inside.release()
            assert self.release.wait(30)
        return "decoded"


def test_the_guard_checks_before_it_decodes():
    guard, decode = DecodeGuard(PixelLimits(100, 200)), Decoder()
    assert guard.file_to_images(decode, _png_header(10, 10), "IMAGE", max_num_imgs=3) == "decoded"
    assert decode.calls == [(_png_header(10, 10), "IMAGE", {"max_num_imgs": 3})]
    with pytest.raises(serving.serving_utils().ImageTooLargeError):
        guard.file_to_images(decode, _png_header(101, 1), "IMAGE")
    three = _tiff([(10, 10), (10, 10), (10, 1)])  # 210 pixels, 200 in the first two frames
    with pytest.raises(serving.serving_utils().ImageTooLargeError):
        guard.file_to_images(decode, three, "IMAGE")
    assert guard.file_to_images(decode, three, "IMAGE", max_num_imgs=2) == "decoded"
    assert guard.image_bytes_to_array(decode, three) == "decoded"  # one frame is decoded
    assert decode.calls[-1] == (three, {})
    with pytest.raises(serving.serving_utils().ImageTooLargeError):
        guard.image_bytes_to_array(decode, _png_header(101, 1))
    assert len(decode.calls) == 3
    assert guard.image_bytes_to_array(decode, _tiff([(10, 10), (101, 1)])) == "decoded"  # the first frame only
    guard = DecodeGuard(PixelLimits(1000, 500))
    pdf = _pdf([(10, 10)] * 2)  # two pages of 20 x 20: 800 pixels, over the request's 500
    with pytest.raises(serving.serving_utils().ImageTooLargeError, match="the PDF's 2 page"):
        guard.file_to_images(decode, pdf, "PDF")
    with pytest.raises(serving.serving_utils().ImageTooLargeError, match="the PDF has 2 pages, over the 1 pages"):
        guard.file_to_images(decode, pdf, "PDF", max_num_imgs=1)
    assert guard.file_to_images(decode, _pdf([(10, 10)]), "PDF", max_num_imgs=1) == "decoded"
    assert len(decode.calls) == 5


def _inside(guard: DecodeGuard, decode: Decoder, n: int, call: str = "file_to_images") -> List[threading.Thread]:
    """``n`` decodes started on threads, returned once all are inside ``decode`` (at once if one fails)."""
    args = (decode, _png_header(1, 1), "IMAGE") if call == "file_to_images" else (decode, _png_header(1, 1))
    errors: List[BaseException] = []

    def run() -> None:
        try:
            getattr(guard, call)(*args)
        except BaseException as exc:
            errors.append(exc)
            decode.inside.release()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for _ in range(n):
        assert decode.inside.acquire(timeout=30), "a decode did not start"
    assert not errors, errors
    return threads


def _capacity(guard: DecodeGuard) -> int:
    """How many decodes the guard lets start at once (its free slots, taken and given back)."""
    taken = 0
    while taken < 100 and guard._slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        guard._slots.release()
    return taken


@pytest.mark.parametrize("max_decodes, slots", [(None, 2), (1, 1), (3, 3), (0, 1), (-2, 1)])
@pytest.mark.parametrize("call", ["file_to_images", "image_bytes_to_array"])
def test_decodes_at_once_are_bounded(max_decodes, slots, call):
    """``max_decodes`` decodes run at once (the default 2, at least 1); the next waits for a free slot."""
    limits = PixelLimits()
    guard = DecodeGuard(limits) if max_decodes is None else DecodeGuard(limits, max_decodes)
    assert _capacity(guard) == slots
    decode = Decoder(hold=True)
    threads = _inside(guard, decode, slots, call)
    try:
        assert not guard._slots.acquire(blocking=False), f"more than {slots} decodes could start"
    finally:
        decode.release.set()
        for t in threads:
            t.join(30)
    assert len(decode.calls) == slots
    for _ in range(slots):  # every slot given back
        assert guard._slots.acquire(blocking=False)


def test_a_failed_decode_gives_its_slot_back():
    guard = DecodeGuard(PixelLimits(), 1)

    def broken(*_: Any, **__: Any) -> Any:
        raise ValueError("Failed to decode image bytes")

    for _ in range(3):
        with pytest.raises(ValueError, match="Failed to decode"):
            guard.file_to_images(broken, _png_header(1, 1), "IMAGE")
    assert guard._slots.acquire(blocking=False)


# ---- PaddleX's decoders ----------------------------------------------------------------------------------------
@pytest.fixture
def installed() -> Iterator[DecodeGuard]:
    utils = serving.serving_utils()
    before = (utils.file_to_images, utils.MAX_IMAGE_PIXELS)
    guard = images.install(PixelLimits(5000, 5000), max_decodes=3)
    try:
        yield guard
    finally:
        images.uninstall()
    assert (utils.file_to_images, utils.MAX_IMAGE_PIXELS) == before


def test_install_puts_the_guard_before_paddlex_decoders(installed):
    utils = serving.serving_utils()
    assert installed.limits == PixelLimits(5000, 5000) and utils.MAX_IMAGE_PIXELS == 5000
    assert _capacity(installed) == 3
    decode = Decoder(hold=True)
    threads = _inside(installed, decode, 3)
    assert not installed._slots.acquire(blocking=False)
    decode.release.set()
    for t in threads:
        t.join(30)
    with pytest.raises(utils.ImageTooLargeError, match=r"pixel count 5001 .*--max-image-pixels\); it was refused"):
        utils.file_to_images(_png_header(5001, 1), "IMAGE")
    arrays, info = utils.file_to_images(_pillow("PNG", (37, 21)), "IMAGE")
    assert [a.shape for a in arrays] == [(21, 37, 3)] and (info.width, info.height) == (37, 21)
    frames = _tiff([(50, 40)] * 3, pixels=True)  # 2000 pixels each: 6000, over the request limit
    with pytest.raises(utils.ImageTooLargeError, match="3 page"):
        utils.file_to_images(frames, "IMAGE")
    arrays, info = utils.file_to_images(frames, "IMAGE", max_num_imgs=2)
    assert [a.shape for a in arrays] == [(40, 50, 3)] * 2 and info.numPages == 2
    arrays, info = utils.file_to_images(_pdf([(25, 20)] * 2), "PDF")  # 50 x 40 each
    assert [a.shape for a in arrays] == [(40, 50, 3)] * 2


def test_a_png_reaches_paddlexs_decoder_with_its_data_stored_and_decodes_to_the_same_pixels(installed):
    import cv2
    import numpy as np

    from paddlex_npu.kernels.png_read import stored_png

    png, jpeg = _pillow("PNG", (37, 21)), _pillow("JPEG", (37, 21))
    decode = Decoder()
    installed.file_to_images(decode, png, "IMAGE")
    installed.image_bytes_to_array(decode, png)
    installed.file_to_images(decode, jpeg, "IMAGE")
    assert [call[0] for call in decode.calls] == [stored_png(png), stored_png(png), jpeg] and stored_png(png) != png
    (array,), _ = serving.serving_utils().file_to_images(png, "IMAGE")
    assert np.array_equal(array, cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR))


def test_a_second_install_replaces_the_first():
    utils = serving.serving_utils()
    original = utils.file_to_images
    images.install(PixelLimits(10, 10))
    try:
        images.install(PixelLimits(5000, 5000))
        utils.file_to_images(_pillow("PNG", (50, 40)), "IMAGE")  # no longer refused by the first limits...
        with pytest.raises(utils.ImageTooLargeError):
            utils.file_to_images(_png_header(5001, 1), "IMAGE")  # ...but by the second
    finally:
        images.uninstall()
    assert utils.file_to_images is original


def test_install_refuses_a_paddlex_that_cannot_size_pdf_pages(monkeypatch):
    """Without PaddleX's PDF page sizing, every PDF would pass the guard unchecked: serving is refused instead."""
    import paddlex.utils.flags

    from paddlex_npu.errors import UnsupportedPaddlexError
    from paddlex_npu.paddlex import serving

    monkeypatch.delattr(paddlex.utils.flags, "PDF_RENDER_SCALE")
    with pytest.raises(UnsupportedPaddlexError, match="PDF_RENDER_SCALE.*PaddleX 3.7"):
        images.install(PixelLimits(5000, 5000))
    assert serving.uninstall_decoders() == []  # nothing was patched
