"""Root fixtures, importable without PaddleX: the environment (before anything imports PaddleX), the real
PP-OCRv4 model folders (cached across runs) and rendered images."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest

from paddlex_npu.samples import env

REPO = Path(__file__).resolve().parent.parent
env.prepare(assets_dir=REPO / ".cache" / "assets", default_runtime=False)

from tests.helpers import CHINESE, ENGLISH, PAGE  # noqa: E402


@pytest.fixture(scope="session")
def asset_root() -> Path:
    from paddlex_npu.samples import assets

    return assets.build_model_folders()


@pytest.fixture(scope="session")
def images(tmp_path_factory) -> Dict[str, Path]:
    from paddlex_npu.samples import assets

    d = tmp_path_factory.mktemp("images")
    return {
        "english": assets.render_text_image(ENGLISH, d / "english.png"),
        "chinese": assets.render_text_image(CHINESE, d / "chinese.png", cjk=True),
        "page": assets.render_text_image(PAGE, d / "page.png", size=28, width=900),
    }
