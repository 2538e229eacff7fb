"""selftest's package kinds beyond OCR det and rec: what a package is, the inputs it is called with, and how two
sides' outputs are compared.

Kinds (:func:`package_kind`, from the manifest and ``inference.yml``, no PaddleX needed): ``det`` (PostProcess
``DBPostProcess``), ``rec`` (``CTCLabelDecode``), ``table`` (a manifest ``loop``: an encoder and its ``first/``,
``step/`` and ``tail/`` parts driven by a host loop; or PostProcess ``TableLabelDecode``), ``layout`` (a ``label_list``
and a boxes output), ``orientation`` (PostProcess ``Topk`` whose labels are angles) or ``classification`` (other
``Topk`` labels); anything else is ``unknown`` and selftest says it was not checked.

Inputs: a table rendered by :mod:`paddlex_npu.samples.tables` and preprocessed as PaddleX's ``TableRunnerPredictor``
does (BGR, long side to the input's side, ImageNet normalisation, zero padding to the square); the document page of
:func:`~paddlex_npu.samples.tables.render_page` resized to the layout input (``scale_factor`` and ``im_shape`` as
PaddleX feeds them); a text line rendered at a classifier's input size (:func:`.route_check.render`).

Comparisons (each a :class:`.route_check.Verdict`):

- table: the structure tokens, decoded as PaddleX's ``TableLabelDecode`` does (per step the best class, up to
  ``eos``), equal; the cell boxes (``loc`` outputs, normalised to the input) of the decoded steps within
  :data:`LOC_ATOL` and the tokens' probabilities within :data:`.route_check.CTC_SCORE_ATOL` (fp16). An autoregressive
  decoder's later steps follow from its earlier ones, so the first differing token fails the check (its reference
  top-2 margin is reported: a near-tie says fp16 flipped it);
- layout: the same boxes on both sides, matched by class and overlap: corners within :data:`BOX_PX` input pixels,
  scores within :data:`SCORE_ATOL`; a box on one side only fails (its score is reported);
- orientation / classification: the same best class (or a near-tie, top-2 margin below
  :data:`.route_check.TIE_MARGIN`), probabilities within :data:`SCORE_ATOL`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .precision_preview import _iou
from .route_check import CTC_SCORE_ATOL, TIE_MARGIN, Verdict, render

LOC_ATOL = 0.01  # |device - reference| of a cell box coordinate, normalised to the input (5 px of a 488 side)
BOX_PX = 3.0  # a layout box corner, in input pixels, fp16 against fp32
SCORE_ATOL = 0.02  # a layout box's score or a class probability, fp16 against fp32
IOU_MATCH = 0.5  # two layout boxes of one class overlapping this much are the same box
TABLE_ROWS = 4  # the rendered table: a header and three items (samples.tables)
OCR_KINDS = {"DBPostProcess": "det", "CTCLabelDecode": "rec"}
CHECKED_KINDS = ("det", "rec", "table", "layout", "orientation", "classification")


def read_yml(folder: Path) -> Dict[str, Any]:
    """A package's ``inference.yml`` ({} when it is missing or unreadable)."""
    import yaml

    try:
        cfg = yaml.safe_load((Path(folder) / "inference.yml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def _is_angle(label: Any) -> bool:
    return str(label).removesuffix("_degree").isdigit()


def package_kind(folder: Path, manifest: Any = None) -> str:
    """The kind of the package in ``folder`` (see the module docstring); ``manifest``: its loaded manifest."""
    if manifest is not None and manifest.loop is not None:
        return "table"
    cfg = read_yml(folder)
    post = cfg.get("PostProcess") if isinstance(cfg.get("PostProcess"), dict) else {}
    name = post.get("name")
    if name in OCR_KINDS:
        return OCR_KINDS[name]
    if name == "TableLabelDecode":
        return "table"
    topk = post.get("Topk")
    if isinstance(topk, dict):
        labels = topk.get("label_list") or []
        return "orientation" if labels and all(_is_angle(x) for x in labels) else "classification"
    outputs = list(getattr(manifest, "outputs", None) or [])
    if cfg.get("label_list") and (getattr(manifest, "data_dependent", None) or "boxes" in outputs):
        return "layout"
    return "unknown"


def table_characters(cfg: Dict[str, Any]) -> List[str]:
    """The classes of a table structure model as PaddleX's ``TableLabelDecode`` builds them: ``sos``, the dict
    (``<td>`` merged into ``<td></td>`` under ``merge_no_span_structure``), ``eos``."""
    post = cfg.get("PostProcess") or {}
    chars = [str(c) for c in post.get("character_dict") or []]
    if post.get("merge_no_span_structure", True):
        if "<td></td>" not in chars:
            chars.append("<td></td>")
        if "<td>" in chars:
            chars.remove("<td>")
    return ["sos"] + chars + ["eos"]


def _hw(shape: Sequence[int], default: Tuple[int, int]) -> Tuple[int, int]:
    h, w = shape[-2], shape[-1]
    return (h if h > 0 else default[0], w if w > 0 else default[1])


def table_input(side: int, folder: Path) -> np.ndarray:
    """The sample table (a header and three rows, ruled) rendered into ``folder``, as PaddleX feeds SLANet: BGR, the
    long side resized to ``side``, ImageNet-normalised, zero-padded to ``side`` x ``side``, NCHW."""
    from PIL import Image

    from ..samples.tables import HEADER, ITEMS, render_table

    path = render_table([HEADER] + ITEMS, Path(folder) / "selftest-table.png")
    img = Image.open(path).convert("RGB")
    scale = side / max(img.size)
    img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BILINEAR)
    bgr = np.asarray(img, np.float32)[:, :, ::-1] / 255
    norm = (bgr - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    out = np.zeros((side, side, 3), np.float32)
    out[: norm.shape[0], : norm.shape[1]] = norm
    return np.ascontiguousarray(out.transpose(2, 0, 1)[None])


def layout_inputs(man: Any, folder: Path) -> Dict[str, np.ndarray]:
    """The sample document page (title, paragraphs, a table) resized to the layout model's image input, with the
    ``scale_factor`` (``[[H / h, W / w]]``) and ``im_shape`` (``[[H, W]]``) PaddleX feeds beside it, by input name."""
    from PIL import Image

    from ..samples.tables import render_page

    png, _ = render_page(Path(folder))
    page = Image.open(png).convert("RGB")
    image = next(spec for spec in man.inputs if len(spec.shape) == 4)
    h, w = _hw(image.shape, (800, 608))
    x = np.asarray(page.resize((w, h), Image.BICUBIC), np.float32) / 255
    x = ((x - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).transpose(2, 0, 1)[None]
    feeds = {image.name: np.ascontiguousarray(x, np.float32)}
    for spec in man.inputs:
        if spec is not image:
            pair = [h / page.height, w / page.width] if "scale" in spec.name else [h, w]
            feeds[spec.name] = np.array([pair], spec.dtype)
    return feeds


def classifier_input(man: Any, cfg: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """A text line rendered at the classifier's input size (fixed dims of the manifest, else ``ResizeImage.size``
    [W, H] or ``CropImage.size`` of inference.yml, else 224), batch 1 (or the fixed batch)."""
    spec = man.inputs[0]
    default = (224, 224)
    for op in (cfg.get("PreProcess") or {}).get("transform_ops") or []:
        args = next(iter(op.values())) if isinstance(op, dict) and op else None
        if isinstance(args, dict) and isinstance(args.get("size"), list):
            default = (int(args["size"][1]), int(args["size"][0]))
        elif isinstance(args, dict) and isinstance(args.get("size"), int):
            default = (int(args["size"]), int(args["size"]))
    h, w = _hw(spec.shape, default)
    batch = spec.shape[0] if spec.shape[0] > 0 else 1
    return {spec.name: render("rec", [batch, 3, h, w], man.normalisation is not None)[0]}


def _decode(probs: np.ndarray, end: int) -> List[int]:
    """PaddleX's TableLabelDecode steps: the best class per step up to ``eos`` (from step 1 on); sos/eos dropped
    later by the caller. Returns the steps' classes, ``eos`` excluded."""
    best = probs[0].argmax(-1)
    out = []
    for i, c in enumerate(best):
        if i > 0 and int(c) == end:
            break
        out.append(int(c))
    return out


def _split_table(outs: List[np.ndarray], classes: int) -> Tuple[np.ndarray, np.ndarray]:
    """(structure probabilities [1, T, classes], cell boxes [1, T, k]) among a table model's outputs."""
    arrays = [np.asarray(o) for o in outs]
    probs = next(a for a in arrays if a.ndim == 3 and a.shape[-1] == classes)
    loc = next(a for a in arrays if a.ndim == 3 and a is not probs)
    return probs, loc


def compare_table(device: List[np.ndarray], reference: List[np.ndarray], characters: List[str]) -> Verdict:
    """Structure tokens equal, cell boxes and token probabilities within the fp16 tolerances (module docstring)."""
    (dp, dl), (rp, rl) = (_split_table(o, len(characters)) for o in (device, reference))
    end = len(characters) - 1
    ours, theirs = _decode(dp, end), _decode(rp, end)
    spell = lambda steps: [characters[c] for c in steps if 0 < c < end]  # noqa: E731
    data: Dict[str, Any] = {
        "device_tokens": "".join(spell(ours)),
        "reference_tokens": "".join(spell(theirs)),
        "steps": len(theirs),  # decoder steps up to eos, the start one included
        "tokens": len(spell(theirs)),
        "rows": spell(theirs).count("<tr>"),
        "rendered_rows": TABLE_ROWS,
    }
    if ours != theirs:
        k = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        data["first_differing_step"] = k
        if k < rp.shape[1]:
            row = np.sort(rp[0, k].astype(np.float64))
            data["reference_margin"] = float(row[-1] - row[-2])
        tie = data.get("reference_margin", 1.0) < TIE_MARGIN
        why = f"a near-tie (margin < {TIE_MARGIN}): fp16 may flip it" if tie else "not a near-tie"
        return Verdict(False, f"structure tokens differ from step {k} ({why}); the later steps follow from it", data)
    n = len(theirs)
    data["loc_max_abs"] = float(np.abs(dl[0, :n].astype(np.float64) - rl[0, :n]).max()) if n else 0.0
    data["score_max_abs"] = float(np.abs(dp[0, :n].max(-1).astype(np.float64) - rp[0, :n].max(-1)).max()) if n else 0.0
    problems = []
    if data["loc_max_abs"] > LOC_ATOL:
        problems.append(f"cell boxes differ by {data['loc_max_abs']:.4f} (> {LOC_ATOL})")
    if data["score_max_abs"] > CTC_SCORE_ATOL:
        problems.append(f"token probabilities differ by {data['score_max_abs']:.4f} (> {CTC_SCORE_ATOL})")
    if problems:
        return Verdict(False, "; ".join(problems), data)
    detail = (
        f"{data['tokens']} structure tokens equal ({data['rows']} rows, {n} decoder steps), "
        f"cell boxes within {data['loc_max_abs']:.2g} "
        f"(<= {LOC_ATOL}), probabilities within {data['score_max_abs']:.2g}"
    )
    return Verdict(True, detail, data)


def table_reads_as_drawn(verdict: Verdict) -> Verdict:
    """The decoded structure has the rendered table's rows (both sides equal yet wrong would pass the comparison)."""
    rows = verdict.data.get("rows")
    ok = rows == TABLE_ROWS
    return Verdict(ok, f"the structure has {rows} <tr> for the {TABLE_ROWS} rows drawn", {"rows": rows})


def _boxes(outs: List[np.ndarray]) -> np.ndarray:
    """The detected boxes [n, 6] (class, score, x1, y1, x2, y2) of a detector's outputs, cut at its box count."""
    arrays = [np.asarray(o) for o in outs]
    boxes = next(a for a in arrays if a.ndim == 2 and a.shape[-1] >= 6)
    nums = [a for a in arrays if a is not boxes and a.size == 1]
    n = int(nums[0].reshape(-1)[0]) if nums else len(boxes)
    return boxes[:n, :6].astype(np.float64)


def _match(dev: np.ndarray, ref: np.ndarray) -> Tuple[List[Tuple[int, int]], List[int], List[int]]:
    """Reference boxes matched to device boxes of the same class, best overlap first."""
    pairs, free = [], set(range(len(dev)))
    for j in np.argsort(-ref[:, 1]) if len(ref) else []:
        cands = [(i, _iou(dev[i, 2:], ref[j, 2:])) for i in free if dev[i, 0] == ref[j, 0]]
        best = max(cands, key=lambda c: c[1], default=None)
        if best is not None and best[1] >= IOU_MATCH:
            pairs.append((best[0], int(j)))
            free.discard(best[0])
    matched = {j for _, j in pairs}
    return pairs, sorted(free), [j for j in range(len(ref)) if j not in matched]


def compare_layout(device: List[np.ndarray], reference: List[np.ndarray], labels: Sequence[str] = ()) -> Verdict:
    """The same boxes on both sides: class, corners within :data:`BOX_PX`, scores within :data:`SCORE_ATOL`."""
    dev, ref = _boxes(device), _boxes(reference)
    pairs, only_dev, only_ref = _match(dev, ref)
    name = lambda c: labels[int(c)] if 0 <= int(c) < len(labels) else int(c)  # noqa: E731
    corner = max((float(np.abs(dev[i, 2:] - ref[j, 2:]).max()) for i, j in pairs), default=0.0)
    score = max((abs(float(dev[i, 1] - ref[j, 1])) for i, j in pairs), default=0.0)
    data: Dict[str, Any] = {
        "device_boxes": len(dev),
        "reference_boxes": len(ref),
        "classes": sorted({str(name(c)) for c in ref[:, 0]}),
        "corner_max_abs": corner,
        "score_max_abs": score,
        "device_only": [[str(name(dev[i, 0])), float(dev[i, 1])] for i in only_dev],
        "reference_only": [[str(name(ref[j, 0])), float(ref[j, 1])] for j in only_ref],
    }
    problems = []
    if only_dev or only_ref:
        problems.append(f"boxes on one side only: device {data['device_only']}, reference {data['reference_only']}")
    if corner > BOX_PX:
        problems.append(f"box corners differ by {corner:.2f} px (> {BOX_PX})")
    if score > SCORE_ATOL:
        problems.append(f"box scores differ by {score:.4f} (> {SCORE_ATOL})")
    if not len(ref):
        problems.append("the reference found no box on the sample page: nothing was compared")
    if problems:
        return Verdict(False, "; ".join(problems), data)
    detail = (
        f"{len(ref)} boxes ({', '.join(data['classes'])}) equal: corners within {corner:.2g} px, scores {score:.2g}"
    )
    return Verdict(True, detail, data)


def compare_classes(device: List[np.ndarray], reference: List[np.ndarray], labels: Sequence[str] = ()) -> Verdict:
    """The same best class per sample (or a near-tie), probabilities within :data:`SCORE_ATOL`."""
    d, r = np.asarray(device[0], np.float64), np.asarray(reference[0], np.float64)
    if d.shape != r.shape:
        return Verdict(False, f"output shapes differ: {d.shape} vs {r.shape}")
    d, r = d.reshape(len(d), -1), r.reshape(len(r), -1)
    name = lambda c: labels[int(c)] if 0 <= int(c) < len(labels) else int(c)  # noqa: E731
    top = np.sort(r, -1)
    margins = (top[:, -1] - top[:, -2]).tolist() if r.shape[1] > 1 else [1.0] * len(r)
    differ = [k for k in range(len(r)) if d[k].argmax() != r[k].argmax()]
    diff = float(np.abs(d - r).max())
    data: Dict[str, Any] = {
        "device_class": [str(name(c)) for c in d.argmax(-1)],
        "reference_class": [str(name(c)) for c in r.argmax(-1)],
        "prob_max_abs": diff,
        "reference_margin": margins,
    }
    problems = []
    if any(margins[k] >= TIE_MARGIN for k in differ):
        problems.append(f"best class differs at samples {differ} (reference top-2 margins {margins})")
    if diff > SCORE_ATOL:
        problems.append(f"probabilities differ by {diff:.4f} (> {SCORE_ATOL})")
    if problems:
        return Verdict(False, "; ".join(problems), data)
    note = f" (near-ties at {differ})" if differ else ""
    return Verdict(True, f"best class {data['device_class']} equal{note}, probabilities within {diff:.2g}", data)


def onnx_outputs(onnx_path: Path, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """Every output of an ONNX model on ONNX Runtime's CPU engine, its inputs by name."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})]


class _OrtPart:
    """One part of a split model on ONNX Runtime, from named arrays to named arrays (a 0-d value fed to its ``[1]``
    input, ``<name>__1d``, as the route does)."""

    def __init__(self, onnx_path: Path) -> None:
        import onnxruntime as ort

        from ..run.dtypes import onnx_numpy_dtype

        options = ort.SessionOptions()
        options.log_severity_level = 3  # paddle2onnx's stale shape annotations: a warning per step otherwise
        self.sess = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.inputs = [(i.name, onnx_numpy_dtype(i.type), i.shape) for i in self.sess.get_inputs()]
        self.output_names = [o.name for o in self.sess.get_outputs()]

    def __call__(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        from ..om.loop_split import SCALAR_SUFFIX

        arrays = {}
        for name, dtype, shape in self.inputs:
            value = np.asarray(feeds[name.removesuffix(SCALAR_SUFFIX)], dtype)
            fixed = all(isinstance(d, int) and d > 0 for d in shape)
            arrays[name] = value.reshape(shape) if fixed and value.size == int(np.prod(shape)) else value
        return dict(zip(self.output_names, self.sess.run(None, arrays)))


def onnx_loop(folder: Path, spec: Any, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """A split package's own ONNX parts (encoder, first, step, tail) on ONNX Runtime, driven by the host loop as
    ``convert`` samples it (:func:`paddlex_npu.run.loop.run_split`): the tail's outputs in its order."""
    from ..run.loop import run_split

    folder = Path(folder)
    step, tail = _OrtPart(folder / spec.step / "inference.onnx"), _OrtPart(folder / spec.tail / "inference.onnx")
    first = _OrtPart(folder / spec.first / "inference.onnx") if spec.first else None
    out = run_split(spec, _OrtPart(folder / "inference.onnx"), step, tail, feeds, first)
    return [np.asarray(out[name]) for name in tail.output_names]


def _output_name_matches(reported: str, recorded: str) -> bool:
    """An output name as the runtime reports it against the one the manifest recorded: the same, or GE's
    ``<node>:<edge>:<tensor>`` of that tensor (ais-bench-api.md, correction 32)."""
    return reported == recorded or reported.endswith(f":{recorded}")


def part_interface(runner: Any, onnx_path: Optional[Path]) -> Verdict:
    """A loaded part's inputs (names, dtypes, shapes) and outputs (count, names, dtypes, static dims) as its
    runtime reports them, against its manifest (and, for output dtypes, the part's ONNX graph)."""
    from ..run.dtypes import numpy_dtype

    man, session = runner.manifest, runner.session
    problems: List[str] = []
    ins = []
    for desc, spec in zip(session.get_inputs(), man.inputs):
        got = {"name": desc.name, "dtype": str(numpy_dtype(desc.datatype)), "shape": [int(d) for d in desc.shape]}
        ins.append(got)
        open_ok = man.mode == "dymshape"
        same_shape = all(g == m or (g < 0 and open_ok) for g, m in zip(got["shape"], spec.shape))
        if got["name"] != spec.name or got["dtype"] != spec.dtype or len(got["shape"]) != len(spec.shape):
            problems.append(f"input {spec.name} {spec.dtype} {spec.shape}: the runtime reports {got}")
        elif not same_shape:
            problems.append(f"input {spec.name} shape {spec.shape}: the runtime reports {got['shape']}")
    outs, want = _outputs(session, onnx_path), list(man.outputs)
    if len(session.get_inputs()) != len(man.inputs) or len(outs) != len(want):
        problems.append(
            f"{len(session.get_inputs())} inputs, {len(outs)} outputs: the manifest has "
            f"{len(man.inputs)} and {len(want)}"
        )
    dims = list(man.output_dims or [None] * len(want))
    for got, name, dim in zip(outs, want, dims):
        if not _output_name_matches(got["name"], name):
            problems.append(f"output {name}: the runtime names it {got['name']!r}")
        if got.get("onnx_dtype") and got["dtype"] != got["onnx_dtype"]:
            problems.append(f"output {name}: dtype {got['dtype']}, the ONNX {got['onnx_dtype']}")
        fixed = dim is not None and all(isinstance(d, int) for d in dim)
        if man.mode == "static" and fixed and got["shape"] != list(dim):
            problems.append(f"output {name}: dims {got['shape']}, the manifest {dim}")
    dtypes = sorted({i["dtype"] for i in ins})
    data = {"mode": man.mode, "inputs": ins, "outputs": outs, "input_dtypes": dtypes}
    if problems:
        return Verdict(False, "; ".join(problems), data)
    return Verdict(True, f"{len(ins)} inputs ({', '.join(dtypes)}), {len(outs)} outputs as the manifest says", data)


def _outputs(session: Any, onnx_path: Optional[Path]) -> List[Dict[str, Any]]:
    """The outputs a session reports (name, dtype, dims), with the part's ONNX output dtype beside each."""
    from ..run.dtypes import numpy_dtype

    onnx_dtypes: List[Optional[str]] = []
    if onnx_path is not None and Path(onnx_path).is_file():
        import onnx
        from onnx.helper import tensor_dtype_to_np_dtype

        graph = onnx.load(str(onnx_path), load_external_data=False).graph
        onnx_dtypes = [str(tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)) for o in graph.output]
    outs = []
    for k, desc in enumerate(session.get_outputs()):
        entry = {"name": desc.name, "dtype": str(numpy_dtype(desc.datatype)), "shape": [int(d) for d in desc.shape]}
        entry["onnx_dtype"] = onnx_dtypes[k] if k < len(onnx_dtypes) else None
        outs.append(entry)
    return outs
