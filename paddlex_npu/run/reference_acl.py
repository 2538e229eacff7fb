"""What pyACL (``acl``) would report about an OM package, from its manifest and ONNX, for the CPU reference runtime.

Only the calls ``paddlex-npu selftest`` makes, with pyACL's calling conventions and return shapes (CANN pyACL
reference, "aclmdl" model-description functions): ``(value, ret)`` pairs, ``ret`` 0 on success. So the selftest's
comparison of a manifest with what ACL reports runs in CI on every package ``convert`` builds, and only the pyACL
calls themselves stay device-only.

- ``mdl.get_dynamic_batch(desc)`` -> ``({"batchCount": n, "batch": [...]}, ret)`` (dymbatch OMs);
- ``mdl.get_dynamic_hw(desc, -1)`` -> ``({"hwCount": n, "hw": [[h, w], ...]}, ret)`` (dymhw OMs);
- ``mdl.get_input_dynamic_gear_count(desc, -1)`` -> ``(n, ret)``; ``mdl.get_input_dynamic_dims(desc, -1, n)`` ->
  ``([{"name": ..., "dimCount": k, "dims": [...]}, ...], ret)``, one entry per gear holding **every dim of every
  input, concatenated in input order** (CANN ``aclmdlGetInputDynamicDims``; ais_bench's ``CheckDynamicDims``
  compares the same concatenation);
- ``mdl.get_input_dims_range(desc, i)`` -> ``({"rangeCount": k, "range": [[lo, hi], ...]}, ret)`` (CANN 8.0 on;
  fixed dims report ``[d, d]``; gear OMs report ``rangeCount`` 0). How ACL reports an unbounded dim is not
  documented: this view says ``[lo, -1]``, and the selftest records what the device says rather than assume it;
- ``mdl.get_input_dims(desc, i)`` -> ``({"name", "dimCount", "dims"}, ret)`` (-1 at the dynamic dims);
- ``get_soc_name()`` -> the chip the package was built for (on a device: the machine's chip).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..om import manifest as mf

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_GE_FAILURE = 500002  # what ACL returns for a query that does not fit the model (e.g. no batch gears)


class ReferenceAcl:
    """A pyACL-shaped view of OM packages (their ``inference.om.json``), keyed by the ``inference.om`` path."""

    def __init__(self, soc_name: str = "") -> None:
        self.soc_name = soc_name
        self.initialised = False
        self.devices: Dict[int, int] = {}
        self._models: Dict[int, mf.OMManifest] = {}
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
        manifest_path = Path(om_path).with_name(mf.MANIFEST_NAME)
        if not manifest_path.is_file():
            return 0, ACL_ERROR_INVALID_PARAM
        model_id = len(self._models) + 1
        self._models[model_id] = mf.load(manifest_path)
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

    def _man(self, desc: int) -> mf.OMManifest:
        return self._models[self._descs[desc]]

    def _get_num_inputs(self, desc: int) -> int:
        """A gear OM has one more input than the model: ATC's hidden ``ascend_mbatch_shape_data``."""
        man = self._man(desc)
        return len(man.inputs) + (1 if man.mode in mf.GEAR_MODES else 0)

    def _get_dynamic_batch(self, desc: int) -> Tuple[Dict[str, Any], int]:
        man = self._man(desc)
        batch = [g[0] for g in man.gears or []] if man.mode == "dymbatch" else []
        return {"batchCount": len(batch), "batch": batch}, ACL_SUCCESS

    def _get_dynamic_hw(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        man = self._man(desc)
        hw = [list(g) for g in man.gears or []] if man.mode == "dymhw" else []
        return {"hwCount": len(hw), "hw": hw}, ACL_SUCCESS

    def _get_input_dynamic_gear_count(self, desc: int, index: int) -> Tuple[int, int]:
        man = self._man(desc)
        return (len(man.gears or []) if man.mode == "dymdims" else 0), ACL_SUCCESS

    def _get_input_dynamic_dims(self, desc: int, index: int, count: int) -> Tuple[List[Dict[str, Any]], int]:
        man = self._man(desc)
        if man.mode != "dymdims" or count != len(man.gears or []):
            return [], ACL_ERROR_GE_FAILURE
        out = []
        for gear in man.gear_shapes():
            dims = [d for shape in gear for d in shape]
            out.append({"name": "", "dimCount": len(dims), "dims": dims})
        return out, ACL_SUCCESS

    def _get_input_dims_range(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        man = self._man(desc)
        if index >= len(man.inputs):
            return {"rangeCount": 0, "range": []}, ACL_ERROR_INVALID_PARAM
        if man.mode in mf.GEAR_MODES:
            return {"rangeCount": 0, "range": []}, ACL_SUCCESS
        ranges = [list(r) for r in man.input_ranges()[man.inputs[index].name]]
        return {"rangeCount": len(ranges), "range": ranges}, ACL_SUCCESS

    def _get_input_dims(self, desc: int, index: int) -> Tuple[Dict[str, Any], int]:
        man = self._man(desc)
        if index >= len(man.inputs):
            return {"name": "", "dimCount": 0, "dims": []}, ACL_ERROR_INVALID_PARAM
        spec = man.inputs[index]
        return {"name": spec.name, "dimCount": len(spec.shape), "dims": list(spec.shape)}, ACL_SUCCESS
