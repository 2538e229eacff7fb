"""The export worker: run with the Python of an export environment (paddlepaddle + paddle2onnx 2.x), never
imported by paddlex-npu itself, so it imports nothing of paddlex-npu. Three commands:

    python p2o_worker.py export MODEL_DIR ONNX_OUT        inference.json/.pdiparams -> ONNX (paddle2onnx 2.x)
    python p2o_worker.py run MODEL_DIR FEEDS_NPZ OUT_NPZ   Paddle Inference on the feeds, outputs in order
    python p2o_worker.py translate SRC_DIR DST_DIR         legacy .pdmodel -> PIR inference.json (this Paddle)

Exit 0 on success; on failure, the error on stderr (with paddle2onnx's own log before it) and exit 2.
The last stdout line is a JSON object: the versions used and what was written.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

OPSET = 11  # as the legacy route; paddle2onnx raises it where an op needs more (auto_upgrade_opset)


def _versions() -> Dict[str, str]:
    import importlib.metadata as md

    out = {}
    for dist in ("paddlepaddle", "paddle2onnx"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "none"
    return out


def export(model_dir: Path, dst: Path) -> Dict[str, str]:
    """paddle2onnx's C++ export, called directly: its Python ``export`` logs a failure and returns nothing."""
    import paddle  # noqa: F401  (loads the libraries the C++ export links against)
    from paddle2onnx import paddle2onnx_cpp2py_export as c_p2o

    model, params = model_dir / "inference.json", model_dir / "inference.pdiparams"
    data = c_p2o.export(str(model), str(params), OPSET, True, True, True, True, True, {}, "onnxruntime", "", "", False)
    dst.write_bytes(data)
    return {"onnx": str(dst)}


def _predictor(model: Path, params: Path, **options: bool):
    from paddle import inference as pi

    config = pi.Config(str(model), str(params))
    config.disable_mkldnn()  # oneDNN fails on interpolation, and its ops would end up in a translated JSON
    config.disable_glog_info()
    for name, value in options.items():
        getattr(config, name)(value)
    return config


def run(model_dir: Path, feeds_npz: Path, out_npz: Path) -> Dict[str, str]:
    import numpy as np
    from paddle import inference as pi

    model = model_dir / "inference.json"
    if not model.is_file():
        model = model_dir / "inference.pdmodel"
    predictor = pi.create_predictor(_predictor(model, model_dir / "inference.pdiparams"))
    feeds = np.load(feeds_npz)
    for name in predictor.get_input_names():
        predictor.get_input_handle(name).copy_from_cpu(feeds[name])
    predictor.run()
    outs: List = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
    np.savez(out_npz, *outs)
    return {"outputs": str(len(outs))}


def translate(src: Path, dst: Path) -> Dict[str, str]:
    """A legacy model translated to PIR by this Paddle's Paddle Inference, saved as ``inference.json``."""
    from paddle import inference as pi

    with tempfile.TemporaryDirectory() as cache:
        model = src / "inference.json" if (src / "inference.json").is_file() else src / "inference.pdmodel"
        config = _predictor(model, src / "inference.pdiparams")
        config.enable_new_ir(True)
        config.switch_ir_optim(False)
        config.enable_save_optim_model(True)
        config.set_optim_cache_dir(cache)
        pi.create_predictor(config)
        dst.mkdir(parents=True, exist_ok=True)
        for ext in ("json", "pdiparams"):
            made = Path(cache) / f"_optimized.{ext}"
            if not made.is_file():
                raise RuntimeError(f"Paddle Inference wrote no {made.name}: this Paddle cannot save PIR models")
            shutil.copyfile(made, dst / f"inference.{ext}")
    return {"model": str(dst / "inference.json")}


COMMANDS = {"export": (export, 2), "run": (run, 3), "translate": (translate, 2)}


def main(argv: List[str]) -> int:
    if not argv or argv[0] not in COMMANDS or len(argv) - 1 != COMMANDS[argv[0]][1]:
        print(__doc__, file=sys.stderr)
        return 64
    func = COMMANDS[argv[0]][0]
    try:
        result = func(*[Path(a) for a in argv[1:]])
    except Exception as exc:  # the caller reads the cause from stderr
        print(f"p2o_worker {argv[0]} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    print(json.dumps({**_versions(), **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
