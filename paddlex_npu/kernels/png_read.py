"""PaddleX's image read (``cv2.imdecode`` of the file's bytes) with a PNG file's inflate done by zlib-ng.

A page's PNG decode was half the OCR route's host CPU (4.0 of 7.8 ms a page), and most of it is the system zlib's
inflate of the image data, which OpenCV's libpng calls. :func:`stored_png` inflates that data with zlib-ng
(the ``zlib-ng`` package, a dependency; without it PaddleX's read is left as it is), checked as zlib checks it
(the stream's adler32 and its end), and gives OpenCV the same file with the inflated data stored uncompressed.
OpenCV's own decoder then does everything else (unfiltering, palettes, transparency, 16 bits, EXIF orientation,
BGR order) on the same decompressed bytes, so the pixels are OpenCV's by construction; the work left to its
inflate is a copy.

Only a file whose every image-data chunk has its right CRC, and whose data is one whole zlib stream of at most the
size its header gives, takes that way; any other file (not PNG, interlaced, damaged, over OpenCV's size limits)
goes to OpenCV unchanged, and fails, where it fails, as PaddleX's read fails. Checked byte for byte against
PaddleX's read and with a differential fuzz over damaged files (tests/paddlex/test_png_read.py). The header's size
(:func:`png_size`) is also what the servers' pixel budget reads of a PNG (``serve/images.py``).
"""

from __future__ import annotations

import struct
from typing import Any, Optional, Tuple

import numpy as np

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# samples per pixel by colour type: grey, RGB, palette, grey + alpha, RGBA
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# OpenCV's limits on a decoded image (CV_IO_MAX_IMAGE_WIDTH and _PIXELS defaults): beyond them OpenCV decides
MAX_SIDE = 1 << 20
MAX_PIXELS = 1 << 30
# the largest image data taken the fast way (a 300 dpi A4 page in RGB is 26 MB): it is held inflated and stored
# beside OpenCV's image while OpenCV decodes, so a larger file goes to OpenCV as it is
MAX_STORED = 32 << 20
STORED_BLOCK = 0xFFFF  # the most a stored deflate block holds


def available() -> bool:
    """Whether zlib-ng's binding (the ``zlib-ng`` package) is installed."""
    import importlib.util

    return importlib.util.find_spec("zlib_ng") is not None


def png_size(data: bytes) -> Optional[Tuple[int, int]]:
    """(width, height) of a PNG file from its header chunk (IHDR), which the format puts first, right after the
    signature; None for a file that does not start so. Only the header's bytes are read."""
    if data[: len(SIGNATURE)] == SIGNATURE and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack_from(">II", data, 16)  # big-endian
    return None


def _raw_size(header: bytes) -> Optional[int]:
    """The size of the filtered scanlines an IHDR's body gives (a filter byte a row), None where OpenCV should
    see the file as it is (interlaced, an unknown colour type or depth, over OpenCV's limits or ``MAX_STORED``)."""
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", header)
    channels = CHANNELS.get(colour)
    if channels is None or depth not in (1, 2, 4, 8, 16) or (compression, filtering, interlace) != (0, 0, 0):
        return None
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE and width * height <= MAX_PIXELS):
        return None
    size = height * (1 + (width * channels * depth + 7) // 8)
    return size if size <= MAX_STORED else None


def stored_png(data: bytes) -> Optional[bytearray]:
    """``data`` (a PNG file) with its image data inflated and stored uncompressed in one chunk, every other chunk
    as it was; None where OpenCV should decode ``data`` itself."""
    from zlib_ng import zlib_ng

    if not data.startswith(SIGNATURE):
        return None
    pos, end, size, idat = len(SIGNATURE), len(data), None, []
    while pos + 12 <= end:
        length, kind = struct.unpack_from(">I4s", data, pos)
        stop = pos + 12 + length
        if stop > end:
            return None
        if pos == len(SIGNATURE):
            size = _raw_size(data[pos + 8 : stop - 4]) if kind == b"IHDR" and length == 13 else None
            if size is None:
                return None
        elif kind == b"IDAT":
            if idat and idat[-1][1] != pos:  # image data split by another chunk: libpng's error to give
                return None
            if zlib_ng.crc32(data[pos + 4 : stop - 4]) != struct.unpack_from(">I", data, stop - 4)[0]:
                return None
            idat.append((pos, stop))
        elif kind == b"IEND":
            break
        pos = stop
    if not idat:
        return None
    stream = zlib_ng.decompressobj()
    try:
        raw = stream.decompress(b"".join(data[a + 8 : b - 4] for a, b in idat), size + 1)
    except zlib_ng.error:
        return None
    if not stream.eof:  # cut short (libpng's error to give), or more than the image (its warning)
        return None
    return _with_stored_data(data, idat[0][0], idat[-1][1], raw)


def _with_stored_data(data: bytes, start: int, stop: int, raw: bytes) -> bytearray:
    """``data`` with its bytes ``start:stop`` (the image-data chunks) made one chunk holding ``raw`` in a zlib
    stream of stored blocks, written in place: one copy of the image data."""
    from zlib_ng import zlib_ng

    blocks = -(-len(raw) // STORED_BLOCK)
    length = 2 + 5 * blocks + len(raw) + 4  # zlib header, block headers, the data, adler32
    out = bytearray(start + 12 + length + len(data) - stop)
    out[:start] = data[:start]
    struct.pack_into(">I4sBB", out, start, length, b"IDAT", 0x78, 0x01)  # deflate, 32 kB window, no dictionary
    pos, view = start + 10, memoryview(raw)
    for k in range(blocks):
        part = view[k * STORED_BLOCK : (k + 1) * STORED_BLOCK]
        struct.pack_into("<BHH", out, pos, k == blocks - 1, len(part), len(part) ^ 0xFFFF)  # final bit, LEN, NLEN
        out[pos + 5 : pos + 5 + len(part)] = part
        pos += 5 + len(part)
    struct.pack_into(">I", out, pos, zlib_ng.adler32(raw))
    struct.pack_into(">I", out, pos + 4, zlib_ng.crc32(memoryview(out)[start + 4 : pos + 4]))
    out[pos + 8 :] = data[stop:]
    return out


class FastRead:
    """In place of PaddleX's OpenCV reader backend's ``read_file``: its own steps (the file's bytes,
    ``cv2.imdecode`` with its flags), the bytes of a PNG file first made :func:`stored_png`."""

    def __init__(self, backend: Any) -> None:
        self.flags = backend.flags

    def __call__(self, in_path: str) -> Any:
        import cv2

        with open(in_path, "rb") as f:
            data = f.read()
        data = stored_png(data) or data
        return cv2.imdecode(np.frombuffer(data, np.uint8), flags=self.flags)
