"""From a PaddleX model folder to an OM package: ONNX, ATC options for the task and chip, manifest, package.

``paddlex-npu convert MODEL_DIR -o OUT_DIR --soc-version Ascend310P3 [--mode dymshape|gears|static]``

1. ONNX: ``inference.onnx`` of the folder, else exported from ``inference.pdmodel``/``.pdiparams`` with
   paddle2onnx 1.3.1's C++ export (2.x fails on these models), then checked against Paddle on a sample input.
2. ATC options from the task (the PaddleX predictor of ``Global.model_name``) and ``inference.yml``: text
   detection ``x:1,3,H,W`` with H/W multiples of 32 up to the preprocessing's limit, text recognition
   ``x:N,3,48,W``, fixed-size classifiers and the rest batch only; user overrides win.
3. The exact ``atc`` command; run when ``atc`` is on PATH, else written to ``atc.sh``.
4. The package: ``inference.yml``, ``inference.om.json`` (the manifest), ``inference.onnx``, and
   ``inference.om`` when ATC ran. It is assembled in a temporary folder and moved into place only when
   complete, so a failure leaves no half-written package.
"""

from __future__ import annotations

import importlib.util
import math
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from . import manifest as mf
from .errors import ConfigError, ModelFileError, PaddlexNpuError
from .log import logger

MODES = ("dymshape", "gears", "static")
PRECISIONS = ("fp16", "fp32")
REC_MAX_WIDTH = 3200  # PaddleX's text recognition resizes lines up to this width
DET_DEFAULT_LIMIT = 960


class ConvertError(PaddlexNpuError, RuntimeError):
    """The conversion cannot go on; the message says why and what to do."""


@dataclass
class Task:
    """What varies in a model's inputs, as PaddleX's preprocessing feeds it."""

    predictor: str
    kind: str  # text_det | text_rec | batch | static
    limit: int = DET_DEFAULT_LIMIT  # text_det: largest side after preprocessing
    max_batch: int = 6
    image_hw: Optional[Tuple[int, int]] = None  # batch: the fixed H, W the preprocessing produces


@dataclass
class Conversion:
    model_name: str
    task: Task
    onnx_path: Path
    manifest: mf.OMManifest
    atc_args: List[str] = field(default_factory=list)

    @property
    def atc_command(self) -> str:
        return shlex.join(self.atc_args)


# ---- task ---------------------------------------------------------------------------------------------------
def _predictor_class(model_name: str) -> str:
    try:
        from paddlex.inference.models.bindings import default_registry

        engines = default_registry._registry.get(model_name)
        if engines:
            b = engines.get("paddle_static") or next(iter(engines.values()))
            return b.predictor.__name__
    except ImportError:  # PaddleX 3.0-3.4
        from paddlex.inference.models.base.predictor.base_predictor import BasePredictor

        if model_name in BasePredictor.all():
            return BasePredictor.all()[model_name].__name__
    raise ConvertError(
        f"PaddleX does not know the model {model_name!r} (Global.model_name of inference.yml), so its task and "
        "input shapes are unknown: fix Global.model_name, or pass --input-shape and --gears yourself"
    )


def _det_limit(cfg: Dict[str, Any]) -> int:
    for op in cfg.get("PreProcess", {}).get("transform_ops", []):
        args = (op or {}).get("DetResizeForTest") if isinstance(op, dict) else None
        if args:
            return int(args.get("resize_long") or args.get("limit_side_len") or DET_DEFAULT_LIMIT)
    return DET_DEFAULT_LIMIT


def _fixed_hw(cfg: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """The H, W a classifier's preprocessing ends with (CropImage size, or ResizeImage size [W, H])."""
    hw = None
    for op in cfg.get("PreProcess", {}).get("transform_ops", []) or []:
        if not isinstance(op, dict):
            continue
        args = next(iter(op.values())) or {}
        if "CropImage" in op and args.get("size"):
            size = args["size"]
            hw = (size, size) if isinstance(size, int) else (size[1], size[0])
        elif "ResizeImage" in op and args.get("size"):
            size = args["size"]
            hw = (size, size) if isinstance(size, int) else (size[1], size[0])
    return hw


def task_of(model_name: str, cfg: Dict[str, Any], max_batch: int = 6, max_side: Optional[int] = None) -> Task:
    predictor = _predictor_class(model_name)
    if predictor.startswith("TextDet"):
        limit = max_side or _det_limit(cfg)
        return Task(predictor, "text_det", limit=int(math.ceil(limit / 32) * 32), max_batch=1)
    if predictor.startswith("TextRec"):
        return Task(predictor, "text_rec", max_batch=max_batch)
    return Task(predictor, "batch", max_batch=max_batch, image_hw=_fixed_hw(cfg))


# ---- ONNX -----------------------------------------------------------------------------------------------------
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


def check_against_paddle(model_dir: Path, onnx_path: Path, feeds: Dict[str, np.ndarray], atol: float = 1e-4) -> float:
    """Run the Paddle model and the ONNX on ``feeds``; raise if any output differs by more than ``atol``."""
    import onnxruntime as ort
    from paddle import inference as pi

    config = pi.Config(str(model_dir / "inference.pdmodel"), str(model_dir / "inference.pdiparams"))
    config.disable_mkldnn()  # oneDNN fails on the det model's interpolation
    config.disable_glog_info()
    predictor = pi.create_predictor(config)
    for name in predictor.get_input_names():
        predictor.get_input_handle(name).copy_from_cpu(feeds[name])
    predictor.run()
    ref = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
    got = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, feeds)
    worst = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(ref, got))
    if worst > atol:
        raise ConvertError(f"the exported ONNX differs from Paddle by {worst:.2e} (> {atol}) on a sample input")
    return worst


# ---- shapes, gears, ATC ---------------------------------------------------------------------------------------
def onnx_inputs(onnx_path: Path) -> List[Tuple[str, List[int], str]]:
    import onnxruntime as ort

    from .runtimes.reference import _ORT_TYPES, numpy_dtype

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return [(i.name, [d if isinstance(d, int) and d > 0 else -1 for d in i.shape],
             numpy_dtype(_ORT_TYPES[i.type]).name) for i in sess.get_inputs()]  # fmt: skip


def task_shapes(task: Task, inputs: List[Tuple[str, List[int], str]]) -> List[List[int]]:
    """ATC ``--input_shape`` per input: -1 where the task varies a dim."""
    shapes = []
    for _, shape, _ in inputs:
        s = list(shape)
        if task.kind == "text_det" and len(s) == 4:
            s = [1, s[1] if s[1] > 0 else 3, -1, -1]
        elif task.kind == "text_rec" and len(s) == 4:
            s = [-1, s[1] if s[1] > 0 else 3, 48 if s[2] < 0 else s[2], -1]
        elif task.kind == "batch" and len(s) == 4 and task.image_hw and (s[2] < 0 or s[3] < 0):
            s = [-1, s[1] if s[1] > 0 else 3, *task.image_hw]
        shapes.append(s)
    return shapes


def default_ranges(task: Task, shapes: List[List[int]]) -> List[List[Tuple[int, int]]]:
    out = []
    for s in shapes:
        r = []
        for j, d in enumerate(s):
            if d > 0:
                r.append((d, d))
            elif task.kind == "text_det":
                r.append((32, task.limit))
            elif task.kind == "text_rec":
                r.append((1, task.max_batch) if j == 0 else (32, REC_MAX_WIDTH))
            elif j == 0:
                r.append((1, task.max_batch))
            else:
                r.append((1, -1))
        out.append(r)
    return out


def default_gears(task: Task, shapes: List[List[int]]) -> Tuple[str, List[List[int]]]:
    """(ATC gear mode, gears) a user without samples would start from."""
    if task.kind == "text_det":
        sides = sorted({int(math.ceil(task.limit * f / 32) * 32) for f in (1 / 3, 2 / 3, 1)})
        return "dymhw", [[h, w] for h in sides for w in sides]
    if task.kind == "text_rec":
        widths = [w for w in (320, 640, 960, 1600, REC_MAX_WIDTH)]
        return "dymdims", [[n, w] for n in sorted({1, task.max_batch}) for w in widths]
    if any(d < 0 for s in shapes for d in s[1:]):
        raise ConfigError(
            f"the inputs {shapes} vary in more than the batch and the task ({task.predictor}) does not say how: pass "
            "--input-shape with fixed dims (ATC syntax, e.g. 'x:-1,3,224,224') and/or --gears"
        )
    batches = sorted({b for b in (1, 2, 4, 8, 16, 32) if b <= max(task.max_batch, 2)} | {task.max_batch})
    return "dymbatch", [[b] for b in batches]


def gear_mode_for(shapes: List[List[int]], formats: List[str]) -> str:
    dyn = [[j for j, d in enumerate(s) if d < 0] for s in shapes]
    if all(d in ([], [0]) for d in dyn):
        return "dymbatch"
    if sum(1 for d in dyn if d) == 1 and any(d == [2, 3] for d in dyn) and formats[0] == "NCHW":
        return "dymhw"
    return "dymdims"


def parse_input_shape(text: str, names: Sequence[str]) -> Dict[str, List[int]]:
    """ATC syntax ``"x:1,3,-1,-1;y:1,2"``; names must be model inputs."""
    out = {}
    for part in text.split(";"):
        name, sep, dims = part.strip().rpartition(":")
        if not sep or name not in names:
            raise ConfigError(
                f"--input-shape {text!r}: {name or part!r} is not an input of the model ({', '.join(names)})"
            )
        try:
            out[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            raise ConfigError(f"--input-shape {text!r}: dims must be integers (-1 for a varying dim)") from None
    return out


def parse_gears(text: str) -> List[List[int]]:
    try:
        gears = [[int(v) for v in g.split(",")] for g in text.split(";") if g.strip()]
    except ValueError:
        raise ConfigError(f"--gears {text!r}: use 'auto' or ATC's syntax, e.g. '640,640;960,960'") from None
    if not mf.MIN_GEARS <= len(gears) <= mf.MAX_GEARS:
        raise ConfigError(f"--gears has {len(gears)} gears; ATC accepts {mf.MIN_GEARS} to {mf.MAX_GEARS}")
    return gears


def atc_args(onnx_path: Path, output: Path, soc: str, man: mf.OMManifest, precision: str) -> List[str]:
    """The ``atc`` command line for the manifest (ais-bench-api.md section 8 syntax)."""
    args = ["atc", "--framework=5", f"--model={onnx_path}", f"--output={output}", f"--soc_version={soc}"]
    nd = man.mode == "dymdims" or any(len(i.shape) != 4 for i in man.inputs)
    args.append(f"--input_format={'ND' if nd else 'NCHW'}")
    if man.mode == "dymshape":
        ranges = man.input_ranges()
        dims = {i.name: ",".join(str(lo) if lo == hi else "-1" if hi == -1 and lo == 1 else f"{lo}~{hi}"
                                 for lo, hi in ranges[i.name]) for i in man.inputs}  # fmt: skip
    else:
        dims = {i.name: ",".join(map(str, i.shape)) for i in man.inputs}
    args.append("--input_shape=" + ";".join(f"{n}:{d}" for n, d in dims.items()))
    gears = ";".join(",".join(map(str, g)) for g in man.gears or [])
    if man.mode == "dymbatch":
        args.append("--dynamic_batch_size=" + ",".join(str(g[0]) for g in man.gears))
    elif man.mode == "dymhw":
        args.append(f"--dynamic_image_size={gears}")
    elif man.mode == "dymdims":
        args.append(f"--dynamic_dims={gears}")
    args.append(f"--precision_mode_v2={'origin' if precision == 'fp32' else 'fp16'}")
    return args


# ---- the command ----------------------------------------------------------------------------------------------
def plan(model_dir: Path, work: Path, soc: str, mode: str = "dymshape", *, input_shape: Optional[str] = None,
         gears: Optional[str] = None, samples: Optional[Path] = None, max_gears: int = 8, max_batch: int = 6,
         max_side: Optional[int] = None, precision: str = "fp16") -> Conversion:
    """Work out everything for the package in ``work`` (ONNX written there); no ATC yet."""
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if gears == "auto" and not mf.MIN_GEARS <= max_gears <= mf.MAX_GEARS:
        raise ConfigError(f"--max-gears {max_gears}: ATC accepts {mf.MIN_GEARS} to {mf.MAX_GEARS} gears")
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision {precision!r}: choose one of {', '.join(PRECISIONS)}")
    if not model_dir.is_dir():
        raise ModelFileError(f"model folder {model_dir} does not exist")
    yml = model_dir / "inference.yml"
    if not yml.is_file():
        raise ModelFileError(f"{model_dir} has no inference.yml: it is not a PaddleX model folder")
    cfg = yaml.safe_load(yml.read_text(encoding="utf-8")) or {}
    model_name = (cfg.get("Global") or {}).get("model_name")
    if not model_name:
        raise ModelFileError(f"{yml} has no Global.model_name")
    task = task_of(model_name, cfg, max_batch=max_batch, max_side=max_side)

    onnx_path = work / "inference.onnx"
    if (model_dir / "inference.onnx").is_file():
        shutil.copyfile(model_dir / "inference.onnx", onnx_path)
    else:
        logger.info("exporting %s to ONNX with paddle2onnx 1.3.1", model_dir)
        export_onnx(model_dir, onnx_path)
        feeds = {n: np.random.default_rng(0).random(_sample_shape(task, s), dtype=np.float32).astype(dt)
                 for n, s, dt in onnx_inputs(onnx_path)}  # fmt: skip
        worst = check_against_paddle(model_dir, onnx_path, feeds)
        logger.info("-[✓] ONNX matches Paddle on a sample input (max abs diff %.2e)", worst)
    shutil.copyfile(yml, work / "inference.yml")

    inputs = onnx_inputs(onnx_path)
    names = [n for n, _, _ in inputs]
    shapes = task_shapes(task, inputs)
    if input_shape:
        given = parse_input_shape(input_shape, names)
        shapes = [given.get(n, s) for n, s in zip(names, shapes)]
    formats = ["NCHW" if len(s) == 4 else "ND" for s in shapes]
    specs = [mf.InputSpec(name=n, dtype=dt, format=f, shape=s) for (n, _, dt), s, f in zip(inputs, shapes, formats)]

    if mode == "static" or not any(d < 0 for s in shapes for d in s):
        if any(d < 0 for s in shapes for d in s):
            gear_mode, options = default_gears(task, shapes)
            largest = mf.OMManifest(mode=gear_mode, inputs=specs, gears=options).gear_shapes()[-1]
            specs = [sp.model_copy(update={"shape": g}) for sp, g in zip(specs, largest)]
        man = mf.OMManifest(mode="static", inputs=specs)
    elif mode == "dymshape":
        ranges = default_ranges(task, shapes)
        specs = [sp.model_copy(update={"range": r}) for sp, r in zip(specs, ranges)]
        man = mf.OMManifest(mode="dymshape", inputs=specs)
    else:
        gear_mode = gear_mode_for(shapes, formats)
        if gears == "auto":
            if samples is None:
                raise ConfigError("--gears auto needs --samples DIR with sample inputs to plan from")
            gear_list = _planned_gears(model_name, work, task, shapes, samples, max_gears)
        elif gears:
            gear_list = parse_gears(gears)
        else:
            gear_mode, gear_list = default_gears(task, shapes)
            gear_mode = gear_mode_for(shapes, formats) if task.kind == "batch" else gear_mode
        man = mf.parse({"mode": gear_mode, "inputs": [s.model_dump() for s in specs], "gears": gear_list},
                       "the gears for this model")  # fmt: skip
    man = man.model_copy(update={
        "soc_version": soc, "precision": precision, "onnx_sha256": mf.sha256(onnx_path),
        "outputs": _onnx_outputs(onnx_path),
    })  # fmt: skip
    man.check_soc()
    conv = Conversion(model_name, task, onnx_path, man)
    return conv


def _sample_shape(task: Task, shape: List[int]) -> List[int]:
    if task.kind == "text_det":
        return [1, 3, 640, 640][: len(shape)] if len(shape) == 4 else [d if d > 0 else 1 for d in shape]
    if task.kind == "text_rec":
        return [1, 3, 48, 320][: len(shape)] if len(shape) == 4 else [d if d > 0 else 1 for d in shape]
    return [d if d > 0 else 1 for d in shape]


def _onnx_outputs(onnx_path: Path) -> List[str]:
    import onnxruntime as ort

    return [o.name for o in ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).get_outputs()]


def _planned_gears(model_name: str, work: Path, task: Task, shapes: List[List[int]], samples: Path,
                   max_gears: int) -> List[List[int]]:
    """Plan gears from the real input shapes PaddleX's preprocessing makes of the sample inputs."""
    from paddlex import create_predictor

    from .planner import padding_ratio, plan_gears, sample_input_shapes

    files = sorted(p for p in Path(samples).iterdir() if p.is_file())
    if not files:
        raise ConfigError(f"--samples {samples} has no files")
    predictor = create_predictor(model_name, model_dir=str(work), device="npu:0", batch_size=task.max_batch,
                                 use_hpip=True, hpi_config={"backend": "om", "device_type": "npu",
                                                            "backend_config": {"runtime": "reference"}})  # fmt: skip
    try:
        seen = sample_input_shapes(predictor, [str(f) for f in files], batch_size=task.max_batch)
    finally:
        predictor.close()
    dyn = [(i, j) for i, s in enumerate(shapes) for j, d in enumerate(s) if d < 0]
    points = [[shape[i][j] for i, j in dyn] for shape in seen]
    gears = plan_gears(points, max_gears)
    top = [[max(p[k] for p in points) for k in range(len(dyn))]]
    print(f"planned {len(gears)} gears from {len(points)} sample inputs: padded/real = "
          f"{padding_ratio(points, gears):.3f} (one shape holding all: {padding_ratio(points, top):.3f})")
    if gear_mode_for(shapes, ["NCHW"] * len(shapes)) == "dymbatch":
        return [[g[0]] for g in gears]
    return gears


def run_atc(args: List[str], log: Path) -> None:
    """Run ATC, streaming its output with a progress line; raise with the log's tail on failure."""
    from tqdm import tqdm

    with open(log, "w") as f, tqdm(desc="atc", unit=" lines", leave=False) as bar:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            bar.update(1)
            bar.set_postfix_str(line.strip()[:60])
        rc = proc.wait()
    if rc != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise ConvertError(f"atc failed (exit {rc}); its last lines:\n{tail}")


def convert(model_dir: Path, out_dir: Path, soc: str, mode: str = "dymshape", *, overwrite: bool = False,
            run: Optional[bool] = None, **options: Any) -> Path:
    """Build the OM package in ``out_dir``; returns it. ``run``: run ATC (default: when it is on PATH)."""
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ConvertError(f"{out_dir} exists and is not empty: choose another -o or pass --overwrite")
    parent = out_dir.parent if str(out_dir.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=parent))
    except OSError as exc:
        raise ConvertError(f"cannot write the package under {parent} ({exc}): choose a writable -o") from exc
    try:
        conv = plan(model_dir, work, soc, mode, **options)
        run = shutil.which("atc") is not None if run is None else run

        def args_in(folder: Path) -> List[str]:  # the same command, for the package's final or working folder
            return atc_args(folder / "inference.onnx", folder / "inference", soc, conv.manifest,
                            conv.manifest.precision or "fp16")  # fmt: skip

        conv.atc_args = args_in(out_dir)
        if run:
            run_atc(args_in(work), work / "atc.log")
        else:
            script = "#!/usr/bin/env bash\nset -e\ncd \"$(dirname \"$0\")\"\n" + shlex.join(args_in(Path("."))) + "\n"
            (work / "atc.sh").write_text(script)
            (work / "atc.sh").chmod(0o755)
        conv.manifest.model_copy(update={"atc_command": conv.atc_command}).save(work / mf.MANIFEST_NAME)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        work.rename(out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    if run:
        print(f"OM package ready: {out_dir} (inference.om built by ATC)")
    else:
        print(f"OM package written to {out_dir} without inference.om: `atc` is not on PATH here. On a machine with "
              f"CANN, run {out_dir / 'atc.sh'}:\n  {conv.atc_command}")
    return out_dir
