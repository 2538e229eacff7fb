"""Fork patches: apply cleanly to a fresh copy of the installed (pristine) PaddleX wheel, route OCR to the OM
runner with no `import paddlex_npu`, refuse what they cannot patch without touching files, revert byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paddlex_npu.testing import assets
from paddlex_npu.tools.fork_patch import find_paddlex_dir, load_patch
from tests.helpers import ENGLISH, NPU_HPI, REPO, norm


def _digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*.py"))
    }


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "paddlex_npu.cli", "patch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PADDLEX_NPU_AUTO_INSTALL": "0"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A fresh copy of the installed PaddleX package (and its .dist-info) in a folder of its own."""
    src = find_paddlex_dir()
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(src, site / "paddlex", ignore=shutil.ignore_patterns("__pycache__"))
    for info in src.parent.glob("paddlex-*.dist-info"):
        shutil.copytree(info, site / info.name)
    return site


def test_patch_applies_routes_without_the_import_and_reverts_byte_for_byte(site, asset_root, images):
    pristine = _digest(site / "paddlex")
    assert _digest(find_paddlex_dir()) == pristine  # the installed wheel is untouched by the suite

    out = _cli("--check", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0 and "patch applies cleanly" in out.stdout, out.stderr
    out = _cli("--apply", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0, out.stderr
    assert _digest(site / "paddlex") != pristine
    assert "patch is applied" in _cli("--check", "--paddlex-dir", str(site / "paddlex")).stdout

    config = assets.ocr_pipeline_config(asset_root / "om")
    code = textwrap.dedent(f"""
        import json, sys
        from paddlex import create_pipeline
        import paddlex
        assert paddlex.__file__.startswith({str(site)!r}), paddlex.__file__
        p = create_pipeline(config=json.loads({json.dumps(json.dumps(config))}), device="npu:0", use_hpip=True,
                            hpi_config={NPU_HPI!r})
        (res,) = list(p.predict({str(images["english"])!r}))
        import paddlex_npu, paddlex_npu.run.runner as r
        det = getattr(p.text_det_model, "runner", None) or p.text_det_model.infer
        print(json.dumps({{"texts": list(res["rec_texts"]), "om": isinstance(det, r.OMRunner),
                           "monkeypatched": paddlex_npu.is_installed()}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("PADDLEX_NPU_AUTO_INSTALL", None)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert norm(result["texts"]) == norm(ENGLISH)
    assert result["om"] is True and result["monkeypatched"] is False  # routed by the fork, not the monkeypatch

    out = _cli("--revert", "--paddlex-dir", str(site / "paddlex"))
    assert out.returncode == 0, out.stderr
    assert _digest(site / "paddlex") == pristine


def test_a_hunk_that_does_not_apply_leaves_every_file_untouched(site):
    p = load_patch(site / "paddlex")
    target = p.root / p.files[0].path
    original = target.read_bytes()
    hunk = p.files[0].hunks[-1]
    context = next(ln[1:] for ln in hunk.lines if ln.startswith(" ") and ln[1:].strip())
    target.write_bytes(original.replace(context.encode(), b"# edited by hand", 1))
    try:
        before = _digest(site / "paddlex")
        out = _cli("--apply", "--paddlex-dir", str(site / "paddlex"))
        assert out.returncode == 1
        assert f"hunk {hunk.header} does not apply" in out.stderr and p.files[0].path in out.stderr
        assert _digest(site / "paddlex") == before
    finally:
        target.write_bytes(original)


def test_a_version_without_a_patch_is_refused(site):
    out = _cli("--check", "--paddlex-dir", str(site / "paddlex"), "--paddlex-version", "3.6.1")
    assert out.returncode == 1
    assert "no fork patch for PaddleX 3.6.1; patches exist for 3.4.3, 3.7.2" in out.stderr


def test_not_a_paddlex_folder(tmp_path):
    out = _cli("--check", "--paddlex-dir", str(tmp_path))
    assert out.returncode == 1 and "is not a PaddleX package folder" in out.stderr
