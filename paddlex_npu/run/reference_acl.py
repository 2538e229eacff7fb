"""What pyACL (``acl``) would report about an OM package, for the CPU reference runtime: read from the ATC command
line the package records and the ONNX graph ATC converted, not from the manifest selftest checks.

The answers come from an independent source of truth: the ``atc_command`` recorded in the package (what ATC was
given), parsed as ATC's option reference defines its options, with the input order of the ``inference.onnx``
graph (ACL reports inputs in model order):

- ``--input_shape="name:d,d,...;name:..."``: per input, each dim an integer, ``-1`` (varies: a gear dim, or an
  unbounded range in dynamic-shape builds) or ``lo~hi`` (a range); inputs not named keep the ONNX graph's shape;
- ``--dynamic_batch_size="1,2,4"``: batch gears (the -1 dims of ``--input_shape`` are the batch);
- ``--dynamic_image_size="h,w;h,w"``: H, W gears;
- ``--dynamic_dims="v,v;v,v"``: per gear, the values of the ``-1`` dims of ``--input_shape`` in the order they are
  written there.

Only the calls ``paddlex-npu selftest`` makes, with pyACL's calling conventions and return shapes (CANN pyACL
reference, "aclmdl" model-description functions): ``(value, ret)`` pairs, ``ret`` 0 on success.

- ``mdl.get_dynamic_batch(desc)`` -> ``({"batchCount": n, "batch": [...]}, ret)``;
- ``mdl.get_dynamic_hw(desc, -1)`` -> ``({"hwCount": n, "hw": [[h, w], ...]}, ret)``;
- ``mdl.get_input_dynamic_gear_count(desc, -1)`` -> ``(n, ret)``; ``mdl.get_input_dynamic_dims(desc, -1, n)`` ->
  ``([{"name": ..., "dimCount": k, "dims": [...]}, ...], ret)``, one entry per gear holding **every dim of every
  input, concatenated in input order** (CANN ``aclmdlGetInputDynamicDims``: ``data(1,1,40,-1)``, ``label(1,-1)``,
  ``mask(-1,-1)`` with ``--dynamic_dims="20,20,1,1;..."`` -> ``1,1,40,20,1,20,1,1``);
- ``mdl.get_input_dims_range(desc, i)`` -> ``({"rangeCount": k, "range": [[lo, hi], ...]}, ret)`` (CANN 8.0 on;
  fixed dims ``[d, d]``; gear OMs ``rangeCount`` 0). How ACL reports an unbounded dim (ATC ``-1``) is not
  documented: this view says ``[1, -1]``, and the selftest records what the device says rather than judge it;
- ``mdl.get_input_dims(desc, i)`` -> ``({"name", "dimCount", "dims"}, ret)`` (-1 at the dynamic dims);
- ``get_soc_name()`` -> the chip given (on a device: the machine's chip).
"""

from __future__ import annotations

import json
import shlex
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_GE_FAILURE = 500002  # what ACL returns for a query that does not fit the model (e.g. no batch gears)


@dataclass
class AtcBuild:
    """What an ATC command line says about the OM it builds, inputs in model order."""

    inputs: List[Tuple[str, List[str]]] = field(default_factory=list)  # name, dims as written (int, -1, lo~hi)
    batch: List[int] = field(default_factory=list)
    hw: List[List[int]] = field(default_factory=list)
    dims: List[List[int]] = field(default_factory=list)
    soc: str = ""
    written: List[Tuple[str, List[str]]] = field(default_factory=list)  # --input_shape in its own order

    def gear_dims(self) -> List[List[int]]:
        """``--dynamic_dims``: every dim of every input per gear, the ``-1`` dims filled in the order
        ``--input_shape`` writes them, concatenated in model input order."""
        out = []
        for gear in self.dims:
            values = iter(gear)
            filled = {name: [next(values) if d == "-1" else int(d) for d in dims] for name, dims in self.written}
            out.append([d for name, _ in self.inputs for d in filled[name]])
        return out


def _options(command: str) -> Dict[str, str]:
    """``--name=value`` (or ``--name value``) options of a shell command line."""
    words, out = shlex.split(command), {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
            out[name] = value if sep else (words[i + 1] if i + 1 < len(words) else "")
    return out


def _gears(text: str) -> List[List[int]]:
    return [[int(v) for v in gear.split(",")] for gear in text.replace(" ", "").split(";") if gear]


def onnx_inputs(onnx_path: Path) -> List[Tuple[str, List[str]]]:
    """The graph inputs of an ONNX file (initializers aside) with their dims (``-1`` where not fixed)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    weights = {t.name for t in graph.initializer}
    out = []
    for value in graph.input:
        if value.name in weights:
            continue
        dims = [str(d.dim_value) if d.HasField("dim_value") else "-1" for d in value.type.tensor_type.shape.dim]
        out.append((value.name, dims))
    return out


def parse_atc_command(command: str, onnx_path: Optional[Path] = None) -> AtcBuild:
    """An ATC command line read as ATC's option reference defines ``--input_shape``, ``--dynamic_batch_size``,
    ``--dynamic_image_size``, ``--dynamic_dims`` and ``--soc_version``; inputs in the ONNX graph's order."""
    opts = _options(command)
    written = []
    for part in opts.get("input_shape", "").split(";"):
        name, sep, dims = part.strip().rpartition(":")
        if sep:
            written.append((name, [d.strip() for d in dims.split(",")]))
    given = dict(written)
    inputs = [(n, given.get(n, dims)) for n, dims in onnx_inputs(onnx_path)] if onnx_path else list(written)
    batch = [int(b) for b in opts.get("dynamic_batch_size", "").replace(" ", "").split(",") if b]
    return AtcBuild(
        inputs=inputs,
        batch=batch,
        hw=_gears(opts.get("dynamic_image_size", "")),
        dims=_gears(opts.get("dynamic_dims", "")),
        soc=opts.get("soc_version", ""),
        written=written,
    )


def _dim_range(dim: str) -> List[int]:
    if "~" in dim:
        lo, hi = dim.split("~")
        return [int(lo), int(hi)]
    return [1, -1] if dim == "-1" else [int(dim), int(dim)]


class ReferenceAcl:
    """A pyACL-shaped view of OM packages, keyed by the ``inference.om`` path: each package's recorded ATC command
    line (``inference.om.json`` ``atc_command``) and its ``inference.onnx``."""

    def __init__(self, soc_name: str = "") -> None:
        self.soc_name = soc_name
        self.initialised = False
        self.devices: Dict[int, int] = {}
        self._models: Dict[int, AtcBuild] = {}
        self._descs: Dict[int, int] = {}
        self.rt = types.SimpleNamespace(set_device=self._set_device, reset_device=self._reset_device)
        self.mdl = types.SimpleNamespace(
            load_from_file=self._load_from_file,
            unload=self._unload,
            create_desc=self._create_desc,
            get_desc=self._get_desc,
            destroy_desc=self._destroy_desc,
            get_num_inputs=self._get_num_inputs,
            get_dynamic_batch=self._get_dynamic_batch,
            get_dynamic_hw=self._get_dynamic_hw,
            get_input_dynamic_gear_count=self._get_input_dynamic_gear_count,
            get_input_dynamic_dims=self._get_input_dynamic_dims,
            get_input_dims_range=self._get_input_dims_range,
            get_input_dims=self._get_input_dims,
        )

    # ---- process and device -------------------------------------------------------------------------
    def init(self, config_path: str = "") -> int:
        if self.initialised:
            return ACL_ERROR_REPEAT_INITIALIZE
        self.initialised = True
        return ACL_SUCCESS

    def finalize(self) -> int:
        self.initialised = False
        return ACL_SUCCESS

    def get_soc_name(self) -> str:
        return self.soc_name

    def _set_device(self, device_id: int) -> int:
        self.devices[device_id] = self.devices.get(device_id, 0) + 1
        return ACL_SUCCESS

    def _reset_device(self, device_id: int) -> int:
        if not self.devices.get(device_id):
            return ACL_ERROR_INVALID_PARAM
        self.devices[device_id] -= 1
        return ACL_SUCCESS

    # ---- model and description ----------------------------------------------------------------------
    def _load_from_file(self, om_path: str) -> Tuple[int, int]:
        """The package's recorded ATC command (an OM without one cannot be described here)."""
        folder = Path(om_path).parent
        try:
            command = json.loads((folder / "inference.om.json").read_text(encoding="utf-8")).get("atc_command")
        except (OSError, ValueError):
            command = None
        if not command:
            return 0, ACL_ERROR_INVALID_PARAM
        onnx_path = folder / "inference.onnx"
        model_id = len(self._models) + 1
        self._models[model_id] = parse_atc_command(command, onnx_path if onnx_path.is_file() else None)
        return model_id, ACL_SUCCESS

    def _unload(self, model_id: int) -> int:
        return ACL_SUCCESS if self._models.pop(model_id, None) is not None else ACL_ERROR_INVALID_PARAM

    def _create_desc(self) -> int:
        desc = len(self._descs) + 1
        self._descs[desc] = 0
        return desc

    def _get_desc(self, desc: int, model_id: int) -> int:
        if model_id not in self._models:
            return ACL_ERROR_INVALID_PARAM
        self._descs[desc] = model_id
        return ACL_SUCCESS

    def _destroy_desc(self, desc: int) -> int:
        self._descs.pop(desc, None)
        return ACL_SUCCESS

    def _build(self, desc: int) -> AtcBuild:
        return self._models[self._descs[desc]]

    def _geared(self, build: AtcBuild) -> bool:
        return bool(build.batch or build.hw or build.dims)

    def _get_num_inputs(self, desc: int) -> int:
        """A gear OM has one more input than the model: ATC's hidden ``ascend_mbatch_shape_data``."""
        build = self._build(desc)
        return len(build.inputs) + (1 if self._geared(build) else 0)

    def _get_dynamic_batch(self, desc: int) -> Tuple[Dict[str, Any], int]:
        batch = list(self._build(desc).batch)
        return {"batchCount": len(batch), "batch": batch}, ACL_SUCCESS

    def _get_dynamic_hw(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        hw = [list(g) for g in self._build(desc).hw]
        return {"hwCount": len(hw), "hw": hw}, ACL_SUCCESS

    def _get_input_dynamic_gear_count(self, desc: int, index: int) -> Tuple[int, int]:
        return len(self._build(desc).dims), ACL_SUCCESS

    def _get_input_dynamic_dims(self, desc: int, index: int, count: int) -> Tuple[List[Dict[str, Any]], int]:
        build = self._build(desc)
        if not build.dims or count != len(build.dims):
            return [], ACL_ERROR_GE_FAILURE
        return [{"name": "", "dimCount": len(d), "dims": d} for d in build.gear_dims()], ACL_SUCCESS

    def _get_input_dims_range(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        build = self._build(desc)
        if index >= len(build.inputs):
            return {}, ACL_ERROR_INVALID_PARAM
        if self._geared(build):
            return {"rangeCount": 0, "range": []}, ACL_SUCCESS
        ranges = [_dim_range(d) for d in build.inputs[index][1]]
        return {"rangeCount": len(ranges), "range": ranges}, ACL_SUCCESS

    def _get_input_dims(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        build = self._build(desc)
        if index >= len(build.inputs):
            return {}, ACL_ERROR_INVALID_PARAM
        name, dims = build.inputs[index]
        values = [-1 if d == "-1" or "~" in d else int(d) for d in dims]
        return {"name": name, "dimCount": len(values), "dims": values}, ACL_SUCCESS
