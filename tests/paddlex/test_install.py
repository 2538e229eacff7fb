"""install()/uninstall() are idempotent and restore PaddleX exactly; other paths reach PaddleX untouched."""

from __future__ import annotations

import logging

import pytest

import paddlex_npu
from paddlex_npu.paddlex.patcher import patched_attributes
from paddlex_npu.paddlex.record import MISSING
from paddlex_npu.samples import assets
from tests.helpers import run_ocr
from tests.paddlex.compat import LEGACY, cpu_pipeline, paddle_inference_class, runner_of


def _registries():
    """3.5+: the engine registry and the bindings (items, not attributes, are patched there)."""
    if LEGACY:
        return None
    from paddlex.inference.models.bindings import default_registry
    from paddlex.inference.models.engines import InferenceEngine

    return dict(InferenceEngine.all()), {name: dict(m) for name, m in default_registry._registry.items()}


@pytest.fixture()
def reinstall():
    yield
    if not paddlex_npu.is_installed():
        paddlex_npu.install()


def test_uninstall_restores_every_patched_object(reinstall):
    assert paddlex_npu.is_installed()
    patched = patched_attributes()
    assert patched, "install() patched nothing"
    for owner, name, _, replacement in patched:
        assert owner.__dict__[name] is replacement and replacement.__paddlex_npu_patched__
    registries = _registries()

    assert paddlex_npu.uninstall() is True
    assert patched_attributes() == []
    for owner, name, original, _ in patched:
        assert owner.__dict__.get(name, MISSING) is original, f"{owner}.{name} not restored"
    if registries is not None:
        engines, bindings = _registries()
        assert "om" in registries[0] and "om" not in engines
        assert not any("om" in m for m in bindings.values())

    assert paddlex_npu.install() is True  # on -> off -> on -> off: the same originals come back
    assert [(o, n, orig) for o, n, orig, _ in patched_attributes()] == [(o, n, orig) for o, n, orig, _ in patched]
    assert paddlex_npu.uninstall() is True
    for owner, name, original, _ in patched:
        assert owner.__dict__.get(name, MISSING) is original
    if registries is not None:
        assert _registries() == (engines, bindings)


def test_install_and_uninstall_are_idempotent(reinstall, caplog):
    with caplog.at_level(logging.WARNING, logger="paddlex_npu"):
        assert paddlex_npu.install() is False
        assert "already installed" in caplog.text
        assert paddlex_npu.uninstall() is True
        assert paddlex_npu.uninstall() is False
        assert "not installed" in caplog.text


ENGINES = ["paddle_static"] if LEGACY else ["onnxruntime", "paddle_static"]


@pytest.mark.parametrize("engine", ENGINES)
def test_cpu_pipeline_is_untouched(asset_root, images, reinstall, engine):
    if engine == "onnxruntime":
        from paddlex.inference.models.runners import ONNXRuntimeRunner

        expected_cls = ONNXRuntimeRunner
    else:
        expected_cls = paddle_inference_class()
    config = assets.ocr_pipeline_config(asset_root / "paddle")
    one = {"english": images["english"]}

    p = cpu_pipeline(config, engine)  # plugin installed
    assert type(runner_of(p.text_det_model)) is expected_cls and type(runner_of(p.text_rec_model)) is expected_cls
    with_plugin = run_ocr(p, one)
    p.close()

    paddlex_npu.uninstall()
    p = cpu_pipeline(config, engine)
    without_plugin = run_ocr(p, one)
    p.close()
    assert with_plugin == without_plugin


def test_hpi_backends_other_than_om_reach_paddlex(asset_root):
    """PaddleX's own HPI path is taken (and fails as stock PaddleX does here: no ultra-infer)."""
    from paddlex import create_predictor

    with pytest.raises(Exception, match="ultra-infer|high-performance inference plugin is not available"):
        create_predictor(
            "PP-OCRv4_mobile_det",
            model_dir=str(asset_root / "paddle" / "PP-OCRv4_mobile_det"),
            device="cpu",
            use_hpip=True,
            hpi_config={"backend": "onnxruntime"},
        )


def test_install_while_the_import_hook_is_pending_patches_once(tmp_path):
    """``python -m paddlex_npu.cli paddlex ...``: the import hook is pending when the command installs."""
    import subprocess
    import sys

    code = (
        "import paddlex_npu\n"
        "from paddlex_npu.paddlex.patcher import patched_attributes\n"
        "assert paddlex_npu.install() is True\n"
        "originals = [o for _, _, o, _ in patched_attributes()]\n"
        "assert not any(getattr(o, '__paddlex_npu_patched__', False) for o in originals), 'patched twice'\n"
        "print(len(originals))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0 and int(out.stdout.strip()) > 0, out.stderr[-3000:]
