"""Result images are drawn with a font that is here: `import paddlex_npu` points PaddleX at a system font, or warns
once that their texts stay blank offline (issue 32.3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlex_npu import envs
from paddlex_npu.paddlex import fonts


def test_a_system_font_is_chosen_and_set(monkeypatch, tmp_path):
    font = tmp_path / "f.ttf"
    font.write_bytes(b"\0")
    monkeypatch.delenv(envs.PDX_FONT.name, raising=False)
    monkeypatch.delitem(sys.modules, "paddlex.utils.flags", raising=False)
    assert fonts.use_system_font([str(tmp_path / "missing.ttc"), str(font)]) == str(font)
    assert os.environ[envs.PDX_FONT.name] == str(font)


def test_no_font_warns_once_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv(envs.PDX_FONT.name, raising=False)
    monkeypatch.delitem(sys.modules, "paddlex.utils.flags", raising=False)
    with pytest.warns(UserWarning, match="PADDLE_PDX_LOCAL_FONT_FILE_PATH") as caught:
        assert fonts.use_system_font([str(tmp_path / "none.ttf")]) is None
    assert len(caught) == 1 and envs.PDX_FONT.name not in os.environ


def test_a_font_set_by_the_user_wins(monkeypatch):
    monkeypatch.setenv(envs.PDX_FONT.name, "/mine.ttf")
    assert fonts.use_system_font(["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"]) == "/mine.ttf"


@pytest.mark.skipif(fonts.system_font() is None, reason="no system font on this machine")
def test_import_paddlex_npu_sets_the_font_paddlex_reads():
    env = {k: v for k, v in os.environ.items() if k != envs.PDX_FONT.name}
    out = subprocess.run(
        [sys.executable, "-c", "import os, paddlex_npu; print(os.environ['PADDLE_PDX_LOCAL_FONT_FILE_PATH'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_file() and out.stdout.strip() == fonts.system_font()


def test_opencvs_bundled_font_is_the_last_candidate(monkeypatch):
    pytest.importorskip("cv2")  # found without importing it; the unit venv has none
    bundled = [f for f in fonts.bundled_fonts() if Path(f).is_file()]
    if not bundled:
        pytest.skip("a headless OpenCV here: it bundles no font")
    monkeypatch.delenv(envs.PDX_FONT.name, raising=False)
    monkeypatch.delitem(sys.modules, "paddlex.utils.flags", raising=False)
    assert fonts.use_system_font(["/no/such/font.ttf", *bundled]) == bundled[0]  # no download when no system font
