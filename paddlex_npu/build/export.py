"""ONNX: read a model once; export a legacy Paddle model with paddle2onnx 1.3.1 (here) or a PIR model with
paddle2onnx 2.x (in an export environment, :mod:`.export_env`); check the ONNX against Paddle."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..deps import require
from ..errors import ConvertError, ModelFileError
from ..run.dtypes import onnx_numpy_dtype
from . import export_env

InputInfo = Tuple[str, List[int], str]  # (name, dims with -1 for symbolic, numpy dtype name)


@dataclass
class OnnxModel:
    """An ONNX file opened once with ONNX Runtime: its inputs, outputs and a session to run it."""

    path: Path
    session: Any
    inputs: List[InputInfo]
    outputs: List[str]

    @classmethod
    def open(cls, path: Path) -> OnnxModel:
        ort = require("onnxruntime", "convert (it checks the ONNX against Paddle)")

        options = ort.SessionOptions()
        options.log_severity_level = 3  # paddle2onnx 2.x leaves unused initializers, each a warning
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        inputs = [
            (i.name, [d if isinstance(d, int) and d > 0 else -1 for d in i.shape], onnx_numpy_dtype(i.type).name)
            for i in sess.get_inputs()
        ]
        return cls(Path(path), sess, inputs, [o.name for o in sess.get_outputs()])


def _load_p2o_export():
    """paddle2onnx 1.3.1's C++ ``export``, loaded without its Python package (which imports paddle)."""
    spec = importlib.util.find_spec("paddle2onnx")
    if spec is None or not spec.submodule_search_locations:
        raise ConvertError(
            "no inference.onnx in the model folder and paddle2onnx is not installed: `pip install paddlepaddle` "
            "(convert checks the ONNX against Paddle) and then `pip install --no-deps paddle2onnx==1.3.1` (2.x "
            "fails on PP-OCR models), or put inference.onnx there"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    so = next(folder.glob("paddle2onnx_cpp2py_export*.so"), None)
    if so is None:
        raise ConvertError(f"paddle2onnx at {folder} has no C++ export module: `pip install paddle2onnx==1.3.1`")
    mspec = importlib.util.spec_from_file_location("paddle2onnx_cpp2py_export", so)
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    return module.export


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at 2 for the block (C and C++ code that writes to stdout included)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # what the C library buffered for fd 1 goes out before it is restored
        os.dup2(saved, 1)
        os.close(saved)


def export_onnx(model_dir: Path, dst: Path) -> Path:
    """Export ``inference.pdmodel``/``.pdiparams`` to ``dst`` with paddle2onnx 1.3.1."""
    pdmodel, params = model_dir / "inference.pdmodel", model_dir / "inference.pdiparams"
    if not pdmodel.is_file() or not params.is_file():
        raise ModelFileError(
            f"{model_dir} has no model to convert: it needs inference.onnx, inference.pdmodel + inference.pdiparams "
            "(legacy Paddle) or inference.json + inference.pdiparams (PIR), as a PaddleX static model folder has"
        )
    export = _load_p2o_export()
    with _stdout_to_stderr():  # paddle2onnx's C++ log: a command's stdout carries its answer only (assets | head)
        data = export(str(pdmodel), str(params), 11, True, False, True, True, True, {}, "onnxruntime", "", "", False)
    dst.write_bytes(data)
    return dst


def _paddle_outputs(model: Path, model_dir: Path, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """The outputs of Paddle Inference in this environment (oneDNN off: it fails on the det model's interpolation)."""
    from paddle import inference as pi

    config = pi.Config(str(model), str(model_dir / "inference.pdiparams"))
    config.disable_mkldnn()
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    for name in predictor.get_input_names():
        predictor.get_input_handle(name).copy_from_cpu(feeds[name])
    predictor.run()
    return [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]


def _compare(ref: List[np.ndarray], got: List[np.ndarray], atol: float) -> float:
    if len(ref) != len(got):
        raise ConvertError(f"the exported ONNX has {len(got)} outputs and the Paddle model {len(ref)}")
    worst = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(ref, got))
    if worst > atol:
        raise ConvertError(f"the exported ONNX differs from Paddle by {worst:.2e} (> {atol}) on a sample input")
    return worst


def check_against_paddle(model_dir: Path, onnx: OnnxModel, feeds: Dict[str, np.ndarray], atol: float = 1e-4) -> float:
    """Run the Paddle model and the ONNX on ``feeds``; raise if any output differs by more than ``atol``."""
    ref = _paddle_outputs(model_dir / "inference.pdmodel", model_dir, feeds)
    return _compare(ref, onnx.session.run(None, feeds), atol)


def is_pir(model_dir: Path) -> bool:
    """A PIR model folder: ``inference.json`` + ``inference.pdiparams`` and no legacy ``inference.pdmodel``."""
    return (model_dir / "inference.json").is_file() and not (model_dir / "inference.pdmodel").is_file()


def pir_version(model: Path) -> Optional[int]:
    """The PIR version a JSON model declares (``base_code.version``: paddlepaddle 3.0 writes 1, 3.3 writes 4)."""
    with open(model, "rb") as f:
        head = f.read(4096).decode("utf-8", "replace")
    found = re.search(r'"base_code"\s*:\s*\{[^}]*"version"\s*:\s*(\d+)', head)
    return int(found.group(1)) if found else None


def no_export_env(model_dir: Path) -> ConvertError:
    """A PIR folder with no paddle2onnx 2.x at hand: the error offers the export environment."""
    return ConvertError(
        f"{model_dir} holds a PIR model (inference.json), and this environment has no paddle2onnx 2.x to read it "
        "(paddle2onnx 1.3.1 reads .pdmodel only; 2.x fails on PP-OCR .pdmodel models, so it is kept apart). Pass "
        "--export-env auto: paddlex-npu then makes an export environment with "
        f"{' '.join(export_env.REQUIREMENTS)} at {export_env.default_env_dir()} ({export_env.SIZE}) and exports "
        "there; or --export-env PATH of a virtual environment with those packages"
    )


def export_pir(model_dir: Path, dst: Path, env: export_env.ExportEnv) -> Path:
    """Export ``inference.json``/``.pdiparams`` to ``dst`` with paddle2onnx 2.x in ``env`` (a subprocess)."""
    if not (model_dir / "inference.pdiparams").is_file():
        raise ModelFileError(f"{model_dir} has inference.json but no inference.pdiparams: copy the model's weights")
    out = export_env.run_worker(env, "export", str(model_dir), str(dst))
    if out.returncode != 0 or not dst.is_file():
        raise ConvertError(explain_export_failure(out.stdout + out.stderr, model_dir, env))
    return dst


_START = re.compile(r"Start export (\S+), op_id: (\d+)")
_FINISH = re.compile(r"Finish export (\S+), op_id: (\d+)")


def failed_op(log: str) -> Optional[str]:
    """The op paddle2onnx started exporting and never finished (``pd_op.nearest_interp (op_id 583)``)."""
    started = [m.groups() for m in _START.finditer(log)]
    finished = {m.groups() for m in _FINISH.finditer(log)}
    open_ops = [op for op in started if op not in finished]
    return f"{open_ops[-1][0]} (op_id {open_ops[-1][1]})" if open_ops else None


def _error_line(log: str) -> str:
    for line in reversed(log.splitlines()):
        if "p2o_worker export failed:" in line:
            return line.split("failed:", 1)[1].strip()
        if re.search(r"Error|error:", line):
            return line.strip()
    return "(no error line in its output)"


def explain_export_failure(log: str, model_dir: Path, env: export_env.ExportEnv) -> str:
    """Which op failed, with paddle2onnx's error, and the fix that works for the JSON at hand."""
    op = failed_op(log)
    version = pir_version(model_dir / "inference.json")
    head = (
        f"paddle2onnx ({env.versions}, in {env.label}) could not export {model_dir}: "
        + (f"op {op} failed" if op else "it failed before any op")
        + f": {_error_line(log)}"
    )
    if f"paddle2onnx {export_env.P2O}" not in env.versions or f"paddlepaddle {export_env.PADDLE}" not in env.versions:
        fix = (
            f"Fix: --export-env auto (paddlepaddle {export_env.PADDLE} + paddle2onnx {export_env.P2O}, which "
            "export the JSON that paddlepaddle 3.0 writes, PIR version 1)"
        )
    elif version is not None and version > 1:
        fix = (
            "Fix: paddle2onnx reads a PIR JSON as the Paddle that wrote it laid it out, and this one is PIR version "
            f"{version} (paddlepaddle {export_env.PADDLE} writes 1): save the model with paddlepaddle "
            f"{export_env.PADDLE} (e.g. from its legacy inference.pdmodel: `{env.python} {export_env.WORKER} "
            "translate SRC DST`) and convert that, convert the legacy .pdmodel folder directly (paddle2onnx 1.3.1 "
            "reads it), or put an inference.onnx in the folder"
        )
    else:
        fix = (
            "Fix: this paddle2onnx cannot export that op: convert the model's legacy .pdmodel folder (paddle2onnx "
            "1.3.1 reads it), or put an inference.onnx exported elsewhere in the folder"
        )
    return f"{head}. {fix}"


def check_pir_against_paddle(
    model_dir: Path, onnx: OnnxModel, feeds: Dict[str, np.ndarray], env: export_env.ExportEnv, atol: float = 1e-4
) -> Tuple[float, str]:
    """Run the PIR model with Paddle Inference in ``env`` and the ONNX here on ``feeds``; (max abs diff, where
    Paddle ran). A Paddle too old to load the JSON gives way to this environment's Paddle, when there is one."""
    with tempfile.TemporaryDirectory() as tmp:
        feeds_npz, outs_npz = Path(tmp) / "feeds.npz", Path(tmp) / "outs.npz"
        np.savez(feeds_npz, **feeds)
        out = export_env.run_worker(env, "run", str(model_dir), str(feeds_npz), str(outs_npz))
        where = env.label
        if out.returncode == 0:
            with np.load(outs_npz) as data:
                ref = [data[f"arr_{i}"] for i in range(len(data.files))]
        elif importlib.util.find_spec("paddle") is not None:
            ref, where = _paddle_outputs(model_dir / "inference.json", model_dir, feeds), "this environment"
        else:
            raise ConvertError(
                f"Paddle Inference in {env.label} cannot run {model_dir} to check the ONNX: {_error_line(out.stderr)}"
            )
    return _compare(ref, onnx.session.run(None, feeds), atol), where
