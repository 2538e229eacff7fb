"""ONNX: read a model once, export a legacy Paddle model with paddle2onnx 1.3.1, check it against Paddle."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import ModelFileError
from ..run.dtypes import onnx_numpy_dtype
from .tasks import ConvertError

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
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
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
            "no inference.onnx in the model folder and paddle2onnx is not installed: "
            "`pip install --no-deps paddle2onnx==1.3.1` (2.x fails on PP-OCR models), or put inference.onnx there"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    so = next(folder.glob("paddle2onnx_cpp2py_export*.so"), None)
    if so is None:
        raise ConvertError(f"paddle2onnx at {folder} has no C++ export module: `pip install paddle2onnx==1.3.1`")
    mspec = importlib.util.spec_from_file_location("paddle2onnx_cpp2py_export", so)
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    return module.export


def export_onnx(model_dir: Path, dst: Path) -> Path:
    """Export ``inference.pdmodel``/``.pdiparams`` to ``dst`` with paddle2onnx 1.3.1."""
    pdmodel, params = model_dir / "inference.pdmodel", model_dir / "inference.pdiparams"
    if not pdmodel.is_file() or not params.is_file():
        if (model_dir / "inference.json").is_file():
            raise ConvertError(
                f"{model_dir} holds a PIR model (inference.json), which paddle2onnx 1.3.1 cannot read: export "
                "inference.onnx with `paddlex --paddle2onnx` on a machine where it works and put it in the folder"
            )
        raise ModelFileError(
            f"{model_dir} has no model to convert: it needs inference.onnx, or inference.pdmodel + "
            "inference.pdiparams (a PaddleX static model folder)"
        )
    export = _load_p2o_export()
    data = export(str(pdmodel), str(params), 11, True, False, True, True, True, {}, "onnxruntime", "", "", False)
    dst.write_bytes(data)
    return dst


def check_against_paddle(model_dir: Path, onnx: OnnxModel, feeds: Dict[str, np.ndarray], atol: float = 1e-4) -> float:
    """Run the Paddle model and the ONNX on ``feeds``; raise if any output differs by more than ``atol``."""
    from paddle import inference as pi

    config = pi.Config(str(model_dir / "inference.pdmodel"), str(model_dir / "inference.pdiparams"))
    config.disable_mkldnn()  # oneDNN fails on the det model's interpolation
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    for name in predictor.get_input_names():
        predictor.get_input_handle(name).copy_from_cpu(feeds[name])
    predictor.run()
    ref = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
    got = onnx.session.run(None, feeds)
    worst = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(ref, got))
    if worst > atol:
        raise ConvertError(f"the exported ONNX differs from Paddle by {worst:.2e} (> {atol}) on a sample input")
    return worst
