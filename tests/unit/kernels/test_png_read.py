"""The PNG read's kernels (``paddlex_npu/kernels/png_read.py``) without PaddleX: a PNG's size from its header (what
serve's pixel budget reads), and the file with its image data inflated and stored, which OpenCV decodes to the same
pixels as the file itself. The comparison with PaddleX's own read and the fuzz: tests/paddlex/test_png_read.py."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from paddlex_npu.kernels.png_read import FastRead, png_size, stored_png

cv2 = pytest.importorskip("cv2")
pytest.importorskip("zlib_ng")


def _encode(image: np.ndarray, ext: str = ".png") -> bytes:
    ok, out = cv2.imencode(ext, image)
    assert ok
    return out.tobytes()


def _image_data(png: bytes) -> bytes:
    """The concatenated IDAT bodies of a PNG file."""
    pos, data = 8, b""
    while pos < len(png):
        length, kind = struct.unpack_from(">I4s", png, pos)
        data += png[pos + 8 : pos + 8 + length] if kind == b"IDAT" else b""
        pos += 12 + length
    return data


KINDS = {
    "grey": np.random.default_rng(0).integers(0, 256, (21, 37), np.uint8),
    "bgr": np.random.default_rng(1).integers(0, 256, (21, 37, 3), np.uint8),
    "bgra": np.random.default_rng(2).integers(0, 256, (21, 37, 4), np.uint8),
    "bgr16": np.random.default_rng(3).integers(0, 65536, (21, 37, 3), np.uint16),
}


def test_the_size_is_read_from_the_header_alone():
    png = _encode(KINDS["bgr"])
    assert png_size(png) == (37, 21) and png_size(png[:24]) == (37, 21)  # width, height; the header's bytes only
    assert png_size(png[:23]) is None and png_size(_encode(KINDS["bgr"], ".jpg")) is None and png_size(b"") is None


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_stored_file_decodes_to_the_files_own_pixels(kind):
    png = _encode(KINDS[kind])
    stored = stored_png(png)
    assert stored is not None and bytes(stored) != png
    assert zlib.decompress(_image_data(bytes(stored))) == zlib.decompress(_image_data(png))  # the same scanlines
    for flags in (cv2.IMREAD_COLOR, cv2.IMREAD_UNCHANGED, cv2.IMREAD_GRAYSCALE):
        own = cv2.imdecode(np.frombuffer(png, np.uint8), flags)
        assert np.array_equal(cv2.imdecode(np.frombuffer(stored, np.uint8), flags), own)


def test_a_damaged_or_other_file_is_left_to_opencv():
    png = bytearray(_encode(KINDS["bgr"]))
    start = png.index(b"IDAT") + 4
    png[start + 10] ^= 0xFF  # a flipped byte of the image data, its chunk's CRC no longer right
    assert stored_png(bytes(png)) is None
    assert stored_png(_encode(KINDS["bgr"], ".jpg")) is None and stored_png(b"\x89PNG\r\n\x1a\n") is None


def test_the_read_is_opencvs_decode_of_the_stored_file(tmp_path):
    path = tmp_path / "page.png"
    path.write_bytes(_encode(KINDS["bgra"]))
    read = FastRead(type("Backend", (), {"flags": cv2.IMREAD_COLOR})())
    assert np.array_equal(read(str(path)), cv2.imread(str(path), cv2.IMREAD_COLOR))
