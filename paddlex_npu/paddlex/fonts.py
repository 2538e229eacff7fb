"""The font PaddleX draws result images with (``save_to_img``, the server's ``ocrImage``).

PaddleX downloads its fonts the first time it draws, unless ``PADDLE_PDX_LOCAL_FONT_FILE_PATH`` names a local one;
offline, three failed downloads later, the texts of a result image stay blank and nothing says why. At import,
paddlex-npu points that variable at a font of this system (one that holds CJK glyphs first), or warns once that
result images may have no text and how to fix it. A value already set wins; PaddleX reads it when its
``paddlex.utils.flags`` is first imported, so a PaddleX imported before paddlex-npu keeps what it read.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Optional, Sequence, Tuple

from .. import envs

# CJK and Latin first (PaddleX's OCR results are often Chinese), then Latin only; Debian/Ubuntu, Fedora, macOS.
CANDIDATES = (
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/wqy-microhei/wqy-microhei.ttc",
    "/System/Library/Fonts/PingFang.ttc",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
)
NO_FONT = (
    "paddlex-npu found no local font for PaddleX's result images: PaddleX will download one when it first draws, "
    "and offline their texts stay blank. Fix: set PADDLE_PDX_LOCAL_FONT_FILE_PATH to a TTF/TTC file (Debian: "
    "apt-get install fonts-wqy-microhei or fonts-dejavu-core, then import paddlex_npu again)"
)


def bundled_fonts() -> Tuple[str, ...]:
    """Fonts shipped inside Python packages here, Latin only: OpenCV's DejaVu Sans (the ``opencv-python`` and
    ``-contrib`` wheels PaddleX installs; the headless ones have none). Found without importing OpenCV."""
    spec = importlib.util.find_spec("cv2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return tuple(str(Path(f) / "qt" / "fonts" / "DejaVuSans.ttf") for f in folders)


def system_font(candidates: Optional[Sequence[str]] = None) -> Optional[str]:
    """The first of ``candidates`` (default: the system's, then :func:`bundled_fonts`) that is a file here."""
    candidates = CANDIDATES + bundled_fonts() if candidates is None else candidates
    return next((c for c in candidates if Path(c).is_file()), None)


def use_system_font(candidates: Optional[Sequence[str]] = None) -> Optional[str]:
    """Point ``PADDLE_PDX_LOCAL_FONT_FILE_PATH`` at a system font unless it is set or PaddleX already read it;
    warn once when there is none. Returns the font PaddleX will use (None: PaddleX's download)."""
    if envs.PDX_FONT.get():
        return envs.PDX_FONT.get()
    if "paddlex.utils.flags" in sys.modules:  # PaddleX read the variable already: nothing to change
        return None
    font = system_font(candidates)
    if font is None:
        warnings.warn(NO_FONT, stacklevel=3)
        return None
    os.environ[envs.PDX_FONT.name] = font
    return font
