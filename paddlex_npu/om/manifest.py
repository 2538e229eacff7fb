"""The OM manifest: how ATC built an ``inference.om``, in a JSON sidecar ``inference.om.json``.

An OM file does not say which gears or ranges it accepts (ais_bench has no getter for them), so the package
records it. Schema (``schema: "paddlex-npu/om-manifest/1"``)::

    {
      "schema": "paddlex-npu/om-manifest/1",
      "mode": "dymshape" | "dymbatch" | "dymhw" | "dymdims" | "static",
      "inputs": [                              # in the model's input order
        {"name": "x", "dtype": "float32", "format": "NCHW",
         "shape": [1, 3, -1, -1],              # -1: a dim that varies (ATC --input_shape)
         "range": [[1, 1], [3, 3], [32, 4000], [32, 4000]]}   # dymshape only: per dim [lo, hi], hi -1 = unbounded
      ],
      "gears": [[640, 640], [960, 960]],       # gear modes: per gear, the values of every -1 dim of all inputs in
                                               # input order (the layout of ATC --dynamic_dims); dymbatch: [[1],[4]]
      "outputs": ["sigmoid_0.tmp_0"],
      "data_dependent": ["boxes"],             # outputs whose shape depends on input values (NMS boxes, ...)
      "output_dims": [[null, 6], [1]],         # per output, its dims: int, an expression of the input dims
                                               # ("d0_0", "floor((d0_3 + 3)/8)"; d<input>_<dim>), or null where
                                               # the input values decide (bounded by data_dependent_max)
      "soc_version": "Ascend310P3", "precision": "fp16" | "fp32",
      "keep_dtype": ["Conv.3"],                # operators ATC keeps in float32 under fp16 (ATC --keep_dtype)
      "onnx_sha256": "<sha256 of the inference.onnx ATC converted>",
      "atc_command": "atc --framework=5 ...",
      "reduction": {"kind": "ctc_greedy", "source": "softmax_11.tmp_0", "classes": 6625},
      "normalisation": {"kind": "affine_uint8", "input": "x", "alpha": [0.0171, ...], "beta": [-2.1179, ...]},
      "loop": {"step": "step", "tail": "tail", "node": "Loop.0", ...}
    }

``static`` has no -1 dims; ``dymbatch`` varies dim 0 of the inputs that have a -1 there (one value per gear);
``dymhw`` varies H and W of the NCHW inputs with -1 there (two values per gear: H, W, the same for each);
``dymdims`` any dims (ND); ``dymshape`` ranges. ATC accepts 2 to 100 gears.

What ATC would refuse is refused here, with the reason: ``dymhw`` (``--dynamic_image_size``) needs
``--input_format`` NCHW, so every input must be a 4-D NCHW tensor (a model with a second, non-image input such
as ``scale_factor [1, 2]`` uses ``dymdims`` with ND); ranges only in ``dymshape`` (ATC takes ranges or gears, not
both). A range ``[lo, -1]`` is written ``-1`` for ATC (there is no ``lo~-1``); the runner checks ``lo`` in Python.

``data_dependent`` names the outputs whose shape depends on the input values, not only on the input shapes
(``boxes [M, 6]`` after NMS; ``box_num [1]`` is not one). ACL reports an output's real shape only in
``dymshape`` (ais_bench reads ``aclmdlGetDatasetTensorDesc`` there, ``aclmdlGetCurOutputDims`` otherwise, which
knows gears and static shapes only) and CANN's gear options do not support such networks, so a manifest with
``data_dependent`` outputs must be ``dymshape`` (its inputs may then be fully fixed) and cannot run on Ascend
310/310B. ``paddlex-npu convert`` fills it from the ONNX graph (:mod:`.graph`); an OM without a manifest whose
inputs are all fixed but whose outputs have -1 dims is taken as such a model.

``reduction`` (optional; absent in packages built before it, or with ``convert --no-reduce``): the OM's outputs
are a reduction of the model's own. ``ctc_greedy``: a recognition model's CTC output ``source`` ``[N, T,
classes]`` was reduced on the device to ``ctc_indices [N, T]`` (int32, the argmax over the classes) and
``ctc_scores [N, T]`` (float32, the max), the two things PaddleX's greedy ``CTCLabelDecode`` takes of it
(:mod:`paddlex_npu.build.reduction`).

``normalisation`` (optional; absent in packages built before it, or with ``convert --no-device-normalise``): the
OM takes the image's 8-bit pixels on ``input`` (dtype uint8, still NCHW) and normalises them on the device as
PaddleX's ``NormalizeImage`` does on the host, ``float32(x) * alpha[c] + beta[c]`` per channel
(:mod:`paddlex_npu.build.normalisation`). ``rec_uint8_masked``: a recognition model's lines, ``[N, C, H + 1, W]``
uint8: rows ``0..H-1`` the resized pixels, row ``mask_row`` (= H) of channel 0 is 1 where a line has a pixel and 0
where PaddleX pads; the OM computes PaddleX's ``((float32(x) / 255) - 0.5) / 0.5`` and sets the padding to 0.0.

``loop`` (optional): the model was split around a data-dependent ``Loop`` that ATC cannot build
(:mod:`.loop_split`): this OM is the encoder, the sub-folders ``step/`` and ``tail/`` are packages of their own, and
the runner drives the decoder step on the host (``run/loop.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import ConfigError, ModelFileError
from .loop_split import LoopSpec

SCHEMA = "paddlex-npu/om-manifest/1"
MANIFEST_NAME = "inference.om.json"
Mode = Literal["static", "dymbatch", "dymhw", "dymdims", "dymshape"]
GEAR_MODES = ("dymbatch", "dymhw", "dymdims")
MIN_GEARS, MAX_GEARS = 2, 100
NO_DYMSHAPE_SOCS = ("Ascend310", "Ascend310B")  # CANN: no dynamic shape (ranges) on 310 / 310B
CTC_OUTPUTS = ("ctc_indices", "ctc_scores")  # a ctc_greedy reduction's outputs, in this order


# Input dtypes an OM can have (aclDataType's, by their numpy names).
DTYPES = (
    "float32",
    "float16",
    "int8",
    "int32",
    "uint8",
    "int16",
    "uint16",
    "uint32",
    "int64",
    "uint64",
    "float64",
    "bool",
)
FORMATS = ("NCHW", "NHWC", "ND")


class InputSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: str = "float32"
    format: str = "NCHW"
    shape: List[int]
    range: Optional[List[Tuple[int, int]]] = None

    @model_validator(mode="after")
    def _check(self) -> InputSpec:
        if self.dtype not in DTYPES:
            raise ValueError(f"input {self.name}: dtype {self.dtype!r} is not one an OM takes ({', '.join(DTYPES)})")
        if self.format not in FORMATS:
            raise ValueError(f"input {self.name}: format {self.format!r} is not one of {', '.join(FORMATS)}")
        if any(d == 0 or d < -1 for d in self.shape):
            raise ValueError(f"input {self.name}: shape {self.shape} has dims that are neither positive nor -1")
        for j, (lo, hi) in enumerate(self.range or []):
            fixed = self.shape[j] if j < len(self.shape) else -1
            if lo < 1 or (hi != -1 and hi < lo):
                raise ValueError(f"input {self.name}: range [{lo}, {hi}] of dim {j} is empty or below 1 (lo <= hi)")
            if fixed > 0 and (lo, hi) != (fixed, fixed):
                raise ValueError(f"input {self.name}: dim {j} is fixed at {fixed}, so its range is [{fixed}, {fixed}]")
        return self

    @property
    def dynamic_dims(self) -> List[int]:
        return [i for i, d in enumerate(self.shape) if d < 0]


class OutputReduction(BaseModel):
    """How the OM's outputs reduce the model's own (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["ctc_greedy"]
    source: str  # the model's output that was reduced
    classes: int = Field(gt=0)  # its class axis' length


class InputNormalisation(BaseModel):
    """How the OM normalises an input's 8-bit pixels itself (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["affine_uint8", "rec_uint8_masked"]
    input: str  # the input that takes uint8 pixels
    alpha: List[float]  # per channel: PaddleX's NormalizeImage scale / std (rec_uint8_masked: none)
    beta: List[float]  # per channel: -mean / std (rec_uint8_masked: none)
    mask_row: Optional[int] = None  # rec_uint8_masked: the row after the lines' H rows that marks their pixels


class OMManifest(BaseModel):
    """See the module docstring for the schema."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(SCHEMA, alias="schema")
    mode: Mode
    inputs: List[InputSpec]
    gears: Optional[List[List[int]]] = None
    outputs: List[str] = Field(default_factory=list)
    data_dependent: List[str] = Field(default_factory=list)
    output_dims: Optional[List[Optional[List[Union[int, str, None]]]]] = None
    soc_version: Optional[str] = None
    precision: Optional[str] = None
    keep_dtype: Optional[List[str]] = None  # operators ATC keeps in their original precision (--keep_dtype)
    onnx_sha256: Optional[str] = None
    atc_command: Optional[str] = None
    reduction: Optional[OutputReduction] = None
    normalisation: Optional[InputNormalisation] = None
    loop: Optional[LoopSpec] = None  # a model split around its Loop: this OM is the encoder (om/loop_split.py)
    # device memory one call allocates, bytes: {"inputs": ..., "outputs": ...} (ais_bench mallocs both per call)
    reserved: Optional[Dict[str, int]] = None

    @model_validator(mode="after")
    def _check(self) -> OMManifest:
        if self.schema_ != SCHEMA:
            raise ValueError(f"schema {self.schema_!r} is not {SCHEMA!r}")
        if self.reduction is not None and self.outputs and tuple(self.outputs) != CTC_OUTPUTS:
            raise ValueError(f"a ctc_greedy reduction's outputs are {list(CTC_OUTPUTS)}, not {self.outputs}")
        if self.normalisation is not None:
            spec = next((i for i in self.inputs if i.name == self.normalisation.input), None)
            if spec is None or spec.dtype != "uint8":
                raise ValueError(f"normalisation: input {self.normalisation.input!r} is not one of the uint8 inputs")
        self._check_data_dependent()
        self._check_output_dims()
        n_dyn = sum(len(i.dynamic_dims) for i in self.inputs)
        if self.mode == "static":
            if n_dyn:
                raise ValueError("a static OM has no -1 dims")
        elif n_dyn == 0 and not (self.mode == "dymshape" and self.data_dependent):
            raise ValueError(f"mode {self.mode} needs -1 dims in the input shapes")
        if self.mode in GEAR_MODES:
            self._check_gears(n_dyn)
        elif self.gears:
            raise ValueError(f"mode {self.mode} takes no gears")
        for spec in self.inputs:
            if spec.range is not None and self.mode != "dymshape":
                raise ValueError(
                    f"input {spec.name}: ranges are for dymshape only (ATC takes --input_shape ranges or gears, "
                    f"not both); drop the range or use mode dymshape"
                )
            if spec.range is not None and len(spec.range) != len(spec.shape):
                raise ValueError(f"input {spec.name}: range has {len(spec.range)} dims, shape {len(spec.shape)}")
        return self

    def _check_data_dependent(self) -> None:
        unknown = [n for n in self.data_dependent if self.outputs and n not in self.outputs]
        if unknown:
            raise ValueError(f"data_dependent names {unknown}, which are not outputs ({', '.join(self.outputs)})")
        if self.data_dependent and self.mode != "dymshape":
            raise ValueError(
                f"outputs {self.data_dependent} have data-dependent shapes (e.g. boxes after NMS), which ACL reports "
                f"only in dymshape (aclmdlGetCurOutputDims knows gears and static shapes only; on the device a "
                f"{self.mode} OM would return the whole output buffer as a flat array): build the OM as dymshape "
                "(`paddlex-npu convert ... --mode dymshape`, Ascend310P/910; Ascend310/310B cannot run this model)"
            )

    def _check_output_dims(self) -> None:
        from .output_shapes import check

        if self.output_dims is None:
            return
        if self.outputs and len(self.output_dims) != len(self.outputs):
            raise ValueError(f"output_dims has {len(self.output_dims)} entries, outputs {len(self.outputs)}")
        for name, dims in zip(self.outputs or [None] * len(self.output_dims), self.output_dims):
            check(dims or [], f"output_dims of output {name}")

    def _check_gears(self, n_dyn: int) -> None:
        if not self.gears or not MIN_GEARS <= len(self.gears) <= MAX_GEARS:
            raise ValueError(f"mode {self.mode} needs {MIN_GEARS} to {MAX_GEARS} gears (ATC's limit)")
        per_gear = {"dymbatch": 1, "dymhw": 2}.get(self.mode, n_dyn)
        if any(len(g) != per_gear or min(g) <= 0 for g in self.gears):
            raise ValueError(f"each {self.mode} gear needs {per_gear} positive values, got {self.gears}")
        if self.mode == "dymbatch" and any(i.dynamic_dims not in ([], [0]) for i in self.inputs):
            raise ValueError("dymbatch varies only dim 0 of the inputs")
        if self.mode == "dymhw":
            others = [
                f"{i.name} ({i.format}, rank {len(i.shape)})"
                for i in self.inputs
                if i.format != "NCHW" or len(i.shape) != 4
            ]
            if others:
                raise ValueError(
                    f"dymhw (ATC --dynamic_image_size) needs --input_format NCHW, but inputs {others} are not 4-D "
                    "NCHW images: use mode dymdims (ATC --dynamic_dims with --input_format ND) for this model"
                )
            if any(i.dynamic_dims not in ([], [2, 3]) for i in self.inputs):
                raise ValueError(
                    "dymhw needs NCHW inputs with -1 at H and W and no other -1 dims (each H,W gear applies to every "
                    "such input, as ATC --dynamic_image_size does)"
                )

    # ---- derived views ---------------------------------------------------------------------------------
    def input_ranges(self) -> Dict[str, List[Tuple[int, int]]]:
        """Per input, per dim, the (lo, hi) it accepts in dymshape (hi -1: unbounded)."""
        out = {}
        for spec in self.inputs:
            default = [(d, d) if d > 0 else (1, -1) for d in spec.shape]
            out[spec.name] = [tuple(r) for r in spec.range] if spec.range else default
        return out

    def gear_shapes(self) -> List[List[List[int]]]:
        """Per gear, the full shape of every input (static: the one fixed shape)."""
        if self.mode == "static":
            return [[list(i.shape) for i in self.inputs]]
        if self.mode not in GEAR_MODES:
            raise ValueError(f"mode {self.mode} has no gears")
        shapes = []
        for gear in self.gears or []:
            per_input, k = [], 0
            for spec in self.inputs:
                shape = list(spec.shape)
                for j in spec.dynamic_dims:
                    if self.mode == "dymbatch":
                        shape[j] = gear[0]
                    elif self.mode == "dymhw":
                        shape[j] = gear[j - 2]
                    else:
                        shape[j] = gear[k]
                        k += 1
                per_input.append(shape)
            shapes.append(per_input)
        return shapes

    def max_bytes(self, index: int, itemsize: int) -> int:
        """Largest byte size of input ``index`` over the gears (0 for dymshape, as ACL reports)."""
        if self.mode == "dymshape":
            return 0
        return max(math.prod(g[index]) for g in self.gear_shapes()) * itemsize

    def describe(self) -> str:
        """One line for error messages: the gears or ranges this OM accepts."""
        if self.mode == "dymshape":
            return "dymshape ranges " + "; ".join(
                f"{n}:[{','.join(range_label(lo, hi) for lo, hi in r)}]" for n, r in self.input_ranges().items()
            )
        return f"{self.mode} gears " + " | ".join(
            ";".join(f"{spec.name}:{','.join(map(str, s))}" for spec, s in zip(self.inputs, g))
            for g in self.gear_shapes()
        )

    def check_soc(self) -> None:
        """Refuse a dymshape OM on a chip without dynamic shape (Ascend 310/310B)."""
        soc = (self.soc_version or "").strip()
        if self.mode != "dymshape" or not no_dymshape(soc):
            return
        if self.data_dependent:
            raise ConfigError(
                f"this model's outputs {self.data_dependent} have data-dependent shapes (e.g. boxes after NMS), which "
                f"only a dynamic-shape (dymshape) OM reports, and {soc} has no dynamic shape support (CANN: Ascend "
                "310/310B run gears only, and gears cannot return such outputs): this model cannot run on "
                f"{soc}; use an Ascend 310P or 910 (or run it on the CPU)"
            )
        raise ConfigError(
            f"this OM is a dynamic-shape (dymshape) model for {soc}, but {soc} has no dynamic shape "
            "support (CANN: Ascend 310/310B run gears only). Rebuild it with gears, e.g. "
            f"`paddlex-npu convert MODEL_DIR -o OUT_DIR --soc-version {soc} --mode gears`, i.e. ATC "
            "--dynamic_dims / --dynamic_image_size / --dynamic_batch_size"
        )

    # ---- I/O -------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_none=True), indent=2, ensure_ascii=False) + "\n"

    def save(self, path: Union[str, Path]) -> Path:
        path = Path(path)
        path.write_text(self.to_json(), encoding="utf-8")
        return path


def no_dymshape(soc: str) -> bool:
    """Whether a chip has no dynamic shape (Ascend310, Ascend310B1..): gears only."""
    return any(soc == s or soc.startswith(s) and soc[len(s) :].isdigit() for s in NO_DYMSHAPE_SOCS)


def range_text(lo: int, hi: int) -> str:
    """One dim as ATC's ``--input_shape`` writes it: ``3`` (fixed), ``-1`` (unbounded) or ``lo~hi``. ATC has no
    ``lo~-1``: an unbounded dim is ``-1`` whatever its lower bound, which the runner checks in Python."""
    return str(lo) if lo == hi else "-1" if hi == -1 else f"{lo}~{hi}"


def range_label(lo: int, hi: int) -> str:
    """One dim for messages: ``3``, ``-1`` (any), ``>=32`` (unbounded above) or ``lo~hi``."""
    return f">={lo}" if hi == -1 and lo > 1 else range_text(lo, hi)


def in_ranges(dims: Sequence[int], ranges: Sequence[Tuple[int, int]]) -> bool:
    """Whether a shape lies within per-dim (lo, hi) ranges (hi -1: unbounded)."""
    return len(dims) == len(ranges) and all(lo <= d and (hi == -1 or d <= hi) for d, (lo, hi) in zip(dims, ranges))


def parse(raw: Any, where: str) -> OMManifest:
    """Validate a manifest given as a dict (or an OMManifest); errors name ``where``."""
    if isinstance(raw, OMManifest):
        return raw
    try:
        return OMManifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid OM manifest in {where}: {problems}") from None


def load(path: Union[str, Path]) -> OMManifest:
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path} cannot be read as JSON ({exc}): rewrite it (schema: {SCHEMA})") from exc
    return parse(raw, str(path))


def sha256(path: Union[str, Path]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_for(
    input_names: Sequence[str],
    input_shapes: Sequence[Sequence[int]],
    input_dtypes: Sequence[str],
    output_names: Sequence[str],
    output_shapes: Optional[Sequence[Sequence[int]]] = None,
) -> OMManifest:
    """What an OM without a manifest is taken to be: dymshape with the descriptors' -1 dims unbounded, or
    static when nothing is dynamic. When no input varies, an output with a -1 dim can only be data-dependent
    (NMS boxes): such a model is dymshape with those outputs marked."""
    dynamic = any(d <= 0 for s in input_shapes for d in s)  # 0 or -1: not fixed, as the shapes below take it
    data_dependent = []
    if not dynamic and output_shapes is not None:
        data_dependent = [n for n, s in zip(output_names, output_shapes) if any(d < 0 for d in s)]
    return OMManifest(
        mode="dymshape" if dynamic or data_dependent else "static",
        inputs=[
            InputSpec(name=n, dtype=t, shape=[int(d) if d > 0 else -1 for d in s])
            for n, s, t in zip(input_names, input_shapes, input_dtypes)
        ],
        outputs=list(output_names),
        data_dependent=data_dependent,
    )
