"""The OM route's image read (``paddlex_npu.kernels.png_read``) against PaddleX's own OpenCV read: the same array
for PNG files of every kind OpenCV reads (grey, palette, transparency, 1 to 16 bits, EXIF orientation, gamma,
several image-data chunks, OpenCV's and Pillow's encoders) and for non-PNG files; the same failure for damaged
files (a seeded differential fuzz: flipped bytes with and without their CRCs made right again, cuts, tails,
insertions); and what a file's data inflates to bounded by its header."""

from __future__ import annotations

import io
import random
import struct
import tracemalloc
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from paddlex_npu.kernels.png_read import FastRead, stored_png
from paddlex_npu.samples.assets import render_pages
from paddlex_npu.samples.files import DATA, PAGE

pytest.importorskip("zlib_ng")


def _paddlex_backend(flags: int = cv2.IMREAD_COLOR):
    from paddlex.inference.utils.io.readers import OpenCVImageReaderBackend

    return OpenCVImageReaderBackend(flags=flags)


def _png(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG", **options)
    return out.getvalue()


def _files() -> dict:
    """Name -> bytes: small PNG files of each kind, and a JPEG."""
    rng = np.random.default_rng(0)
    rgba = rng.integers(0, 256, (37, 23, 4), dtype=np.uint8)
    rgba[20:] = 255  # flat rows beside noisy ones: the encoders pick other filters for them
    base = Image.fromarray(rgba, "RGBA")
    files = {mode: _png(base.convert(mode)) for mode in ("RGB", "RGBA", "L", "LA", "P", "1")}
    files["16-bit"] = _png(Image.fromarray(rng.integers(0, 65536, (19, 31)).astype(np.uint16)))
    files["stored"] = _png(base.convert("RGB"), compress_level=0)
    files["optimised"] = _png(base.convert("RGB"), optimize=True)
    palette = base.convert("P")
    files["palette, transparency"] = _png(palette, transparency=3)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotated 90 degrees
    files["EXIF orientation"] = _png(base.convert("RGB"), exif=exif)
    files["gamma"] = _with_chunk(files["RGB"], b"gAMA", struct.pack(">I", 45455))
    for level in (0, 5, 9):
        files[f"OpenCV level {level}"] = cv2.imencode(".png", rgba[..., :3], [cv2.IMWRITE_PNG_COMPRESSION, level])[1]
    files["OpenCV grey"] = cv2.imencode(".png", rgba[..., 0])[1]
    files["OpenCV 16-bit"] = cv2.imencode(".png", rng.integers(0, 65536, (9, 11, 3)).astype(np.uint16))[1]
    files["JPEG"] = cv2.imencode(".jpg", rgba[..., :3])[1]
    return {name: bytes(data) for name, data in files.items()}


def _with_chunk(data: bytes, kind: bytes, body: bytes) -> bytes:
    """``data`` with a chunk inserted right after IHDR."""
    at = 8 + 12 + 13
    return data[:at] + _chunk(kind, body) + data[at:]


def _read(backend, data: bytes, tmp_path, reader=None):
    """What ``reader`` (PaddleX's ``read_file`` by default) gives for a file of ``data``: the array, None, or the
    OpenCV error's type."""
    path = tmp_path / "input"
    path.write_bytes(data)
    try:
        return (reader or backend.read_file)(str(path))
    except cv2.error:
        return "cv2.error"


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return type(a) is type(b) and (a is None or a == b)


@pytest.mark.parametrize("flags", [cv2.IMREAD_COLOR, cv2.IMREAD_UNCHANGED, cv2.IMREAD_GRAYSCALE])
def test_every_kind_of_file_reads_as_paddlexs_read(tmp_path, flags):
    backend = _paddlex_backend(flags)
    files = _files()
    files["sample page"] = (DATA / PAGE).read_bytes()
    for name, data in files.items():
        want, got = _read(backend, data, tmp_path), _read(backend, data, tmp_path, FastRead(backend))
        assert isinstance(want, np.ndarray), name
        assert _same(got, want), name
    assert stored_png(files["JPEG"]) is None


def test_a_page_of_several_image_data_chunks_takes_the_fast_way(tmp_path):
    (path,) = render_pages(tmp_path, 1)  # a benchmark page, written again by OpenCV's encoder (8 kB data chunks)
    page = bytes(cv2.imencode(".png", cv2.imread(str(path)))[1])
    stored = stored_png(page)
    assert page.count(b"IDAT") > 1 and stored is not None and stored.count(b"IDAT") == 1
    assert len(stored) > len(page)  # the data stored, not deflated
    backend = _paddlex_backend()
    assert _same(_read(backend, page, tmp_path, FastRead(backend)), cv2.imread(str(path)))


def _fixed_crcs(data: bytes) -> bytes:
    """``data`` with every whole chunk's CRC made right again."""
    out, pos = bytearray(data[:8]), 8
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        if pos + 12 + length > len(data):
            break
        out += data[pos : pos + 8 + length] + struct.pack(">I", zlib.crc32(data[pos + 4 : pos + 8 + length]))
        pos += 12 + length
    return bytes(out + data[pos:])


def _damaged(rng: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    op = rng.randrange(5)
    if op in (0, 1):  # bytes flipped; then the CRCs made right (the damage reaches the inflate and libpng)
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(8, len(d))] = rng.randrange(256)
        return _fixed_crcs(bytes(d)) if op else bytes(d)
    if op == 2:
        return bytes(d[: rng.randrange(8, len(d))])
    if op == 3:
        return bytes(d) + rng.randbytes(rng.randint(1, 20))
    at = rng.randrange(8, len(d))
    return _fixed_crcs(bytes(d[:at]) + rng.randbytes(rng.randint(1, 8)) + bytes(d[at:]))


def test_damaged_files_fail_or_read_as_paddlexs_read(tmp_path):
    backend, rng = _paddlex_backend(), random.Random(42)
    bases = [data for name, data in _files().items() if name != "JPEG"]
    fast = 0
    for _ in range(1500):
        data = _damaged(rng, rng.choice(bases))
        fast += stored_png(data) is not None
        want, got = _read(backend, data, tmp_path), _read(backend, data, tmp_path, FastRead(backend))
        assert _same(got, want), data
    assert fast > 100  # the damage reached the fast way, not only OpenCV's


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


DAMAGE = {  # what the random damage seldom hits: each fails, or reads with libpng's warning, in both reads
    "the stream without its checksum": lambda z: z[:-4],
    "the checksum wrong": lambda z: z[:-1] + bytes([z[-1] ^ 1]),
    "bytes after the stream's end": lambda z: z + b"xyz",
    "less data than the image": lambda z: zlib.compress(zlib.decompress(z)[:-5]),
    "more data than the image": lambda z: zlib.compress(zlib.decompress(z) + bytes(31)),
}


@pytest.mark.parametrize("damage", [*DAMAGE, "the image data's CRC wrong", "the image data split by a text chunk"])
def test_damage_to_the_stream_fails_or_reads_as_paddlexs_read(tmp_path, damage):
    data = bytes(cv2.imencode(".png", np.random.default_rng(1).integers(0, 256, (20, 30, 3), dtype=np.uint8))[1])
    (length,) = struct.unpack_from(">I", data, 33)
    assert data[37:41] == b"IDAT" and data[49 + length : 53 + length] == b"IEND"  # one image-data chunk
    stream = data[41 : 41 + length]
    if damage in DAMAGE:
        data = data[:33] + _chunk(b"IDAT", DAMAGE[damage](stream)) + _chunk(b"IEND", b"")
    elif damage == "the image data's CRC wrong":
        data = data[: 41 + length] + bytes([data[41 + length] ^ 1]) + data[42 + length :]
    else:
        half = length // 2
        split = _chunk(b"IDAT", stream[:half]) + _chunk(b"tEXt", b"a\0b") + _chunk(b"IDAT", stream[half:])
        data = data[:33] + split + _chunk(b"IEND", b"")
    backend = _paddlex_backend()
    assert _same(_read(backend, data, tmp_path, FastRead(backend)), _read(backend, data, tmp_path))


def test_what_the_data_inflates_to_is_bounded_by_the_header_and_the_largest_stored_size():
    # a 10 x 10 RGB image whose data inflates to 50 MB (a deflate bomb of 49 kB)
    header = struct.pack(">IIBBBBB", 10, 10, 8, 2, 0, 0, 0)
    bomb = zlib.compress(b"\0" * 50_000_000, 9)

    data = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", bomb) + _chunk(b"IEND", b"")
    large = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 4000, 3000, 8, 2, 0, 0, 0))
    assert stored_png(large + _chunk(b"IDAT", bomb) + _chunk(b"IEND", b"")) is None  # 36 MB: OpenCV's alone
    tracemalloc.start()
    try:
        assert stored_png(data) is None
        assert tracemalloc.get_traced_memory()[1] < 2 * len(bomb) + (1 << 20)
    finally:
        tracemalloc.stop()
