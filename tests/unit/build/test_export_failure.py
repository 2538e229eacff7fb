"""A failing PIR export: the op and the error read from paddle2onnx's output, and the fix that works; the export
environment's versions are the ones setup.cfg's ``export`` extra declares."""

from __future__ import annotations

import configparser
import json
from pathlib import Path

from paddlex_npu.build import export_env
from paddlex_npu.build.export import explain_export_failure, failed_op, is_pir, pir_version

SETUP_CFG = Path(__file__).resolve().parents[3] / "setup.cfg"

# paddle2onnx 2.0.2rc3's output on the PP-OCRv4 det model translated to PIR by paddlepaddle 3.3.1 (abridged)
LOG = """[Paddle2ONNX] Start parsing the Paddle model file...
[Paddle2ONNX] Start export pd_op.conv2d, op_id: 581
[Paddle2ONNX] Finish export pd_op.conv2d, op_id: 581
[Paddle2ONNX] Start export pd_op.nearest_interp, op_id: 583
p2o_worker export failed: RuntimeError: (Unimplemented) the 0th elementwise MUST be ir::FloatAttribute
  [Hint: Expected array_list[0].isa<::pir::FloatAttribute>() == true] (at pir_parser.cc:814)
"""
GOOD = "paddlepaddle 3.0.0 + paddle2onnx 2.0.2rc3"


def _pir(tmp_path: Path, version: int) -> Path:
    code = {"base_code": {"magic": "pir", "trainable": True, "version": version}, "program": {}}
    (tmp_path / "inference.json").write_text(json.dumps(code))
    (tmp_path / "inference.pdiparams").write_bytes(b"")
    return tmp_path


def test_the_op_that_started_and_never_finished_is_the_failed_one():
    assert failed_op(LOG) == "pd_op.nearest_interp (op_id 583)"
    assert failed_op("[Paddle2ONNX] Start export a, op_id: 1\n[Paddle2ONNX] Finish export a, op_id: 1\n") is None


def test_the_fix_depends_on_where_it_failed_and_who_wrote_the_json(tmp_path):
    model = _pir(tmp_path, 4)
    assert is_pir(model) and pir_version(model / "inference.json") == 4
    mine = export_env.ExportEnv(Path("/usr/bin/python3"), "this environment", "paddlepaddle 3.3.1 + paddle2onnx 2.1.0")
    msg = explain_export_failure(LOG, model, mine)
    assert "op pd_op.nearest_interp (op_id 583) failed" in msg and "MUST be ir::FloatAttribute" in msg
    assert "Fix: --export-env auto (paddlepaddle 3.0.0 + paddle2onnx 2.0.2rc3" in msg
    auto = export_env.ExportEnv(Path("/env/bin/python"), "the export environment /env", GOOD)
    msg = explain_export_failure(LOG, model, auto)
    assert "PIR version 4" in msg and "/env/bin/python" in msg and "translate SRC DST" in msg
    assert "convert the legacy .pdmodel folder" in msg and "--export-env auto" not in msg
    msg = explain_export_failure(LOG, _pir(tmp_path, 1), auto)
    assert "this paddle2onnx cannot export that op" in msg


def test_setup_cfg_export_extra_is_what_the_export_environment_installs():
    cfg = configparser.ConfigParser()
    cfg.read(SETUP_CFG)
    declared = [line.strip() for line in cfg["options.extras_require"]["export"].strip().splitlines()]
    assert declared == list(export_env.REQUIREMENTS)
    assert export_env.default_env_dir().name == f"export-env-{export_env.TAG}"
