"""A fake of pyACL (``acl``) for the selftest's device-only calls, written from the CANN pyACL reference, not from
paddlex-npu's code: every call returns what the pyACL documentation says it returns, with the values given here.

- ``acl.init(config_path="")`` -> ret (0; 100002 ``ACL_ERROR_REPEAT_INITIALIZE`` when ACL is already initialised);
  ``acl.finalize()`` -> ret; ``acl.get_soc_name()`` -> str;
- ``acl.rt.set_device(id)`` / ``acl.rt.reset_device(id)`` -> ret;
- ``acl.mdl.load_from_file(path)`` -> ``(model_id, ret)``; ``create_desc()`` -> desc; ``get_desc(desc, id)`` -> ret;
- ``acl.mdl.get_dynamic_batch(desc)`` -> ``({"batchCount", "batch"}, ret)``;
  ``acl.mdl.get_dynamic_hw(desc, -1)`` -> ``({"hwCount", "hw"}, ret)``;
- ``acl.mdl.get_input_dynamic_gear_count(desc, -1)`` -> ``(count, ret)``;
  ``acl.mdl.get_input_dynamic_dims(desc, -1, count)`` -> ``([{"name", "dimCount", "dims"}, ...], ret)``: per gear
  all dims of all inputs concatenated (CANN's ``aclmdlGetInputDynamicDims`` example: ``1,1,40,20,1,20,1,1``);
- ``acl.mdl.get_input_dims_range(desc, i)`` -> ``({"rangeCount", "range"}, ret)`` (CANN 8.0 on; absent before);
  ``acl.mdl.get_input_dims(desc, i)`` -> ``({"name", "dimCount", "dims"}, ret)``.

Failures, as pyACL returns them: a call named in ``fail`` returns its error code as ``ret`` with an empty value (an
empty dict for the calls that answer a dict, 0 for ids and counts, an empty list for the dims gears);
``get_input_dynamic_dims`` with a gear count past 4,096 returns ``None`` instead of a pair. The codes are CANN's
(aclError list): 100000 ACL_ERROR_INVALID_PARAM, 107001 ACL_ERROR_RT_INVALID_DEVICEID, 145000
ACL_ERROR_GE_PARAM_INVALID, 500002 ACL_ERROR_GE_FAILURE, 507011 ACL_ERROR_RT_MODEL_EXECUTE.
"""

from __future__ import annotations

import types
from typing import Any, Dict, List, Optional

ACL_ERROR_REPEAT_INITIALIZE = 100002
MAX_GEARS = 4096  # pyACL's limit on the gear count it copies dims for
EMPTY: Dict[str, Any] = {  # the value a failing call returns beside its ret
    "load_from_file": 0,
    "get_dynamic_batch": {},
    "get_dynamic_hw": {},
    "get_input_dynamic_gear_count": 0,
    "get_input_dynamic_dims": [],
    "get_input_dims_range": {},
    "get_input_dims": {},
}


class FakePyAcl:
    def __init__(
        self,
        *,
        soc: str = "Ascend310P3",
        initialised: bool = False,
        set_device_ret: int = 0,
        batch: Optional[List[int]] = None,
        hw: Optional[List[List[int]]] = None,
        dims: Optional[List[List[int]]] = None,
        ranges: Optional[List[List[List[int]]]] = None,
        input_dims: Optional[List[List[int]]] = None,
        has_dims_range: bool = True,
        fail: Optional[Dict[str, int]] = None,
        gear_count: Optional[int] = None,
    ) -> None:
        self.calls: List[tuple] = []
        self.fail = fail or {}
        self.gear_count = gear_count  # what get_input_dynamic_gear_count reports (default: the dims given)
        self.soc, self.initialised, self.set_device_ret = soc, initialised, set_device_ret
        self._batch, self._hw, self._dims = batch or [], hw or [], dims or []
        self._ranges, self._input_dims = ranges or [], input_dims or []
        self.rt = types.SimpleNamespace(set_device=self._set_device, reset_device=self._reset_device)
        mdl: Dict[str, Any] = {
            "load_from_file": self._load,
            "unload": lambda model_id: self._log("unload", model_id),
            "create_desc": lambda: "desc",
            "destroy_desc": lambda desc: self._log("destroy_desc", desc),
            "get_desc": lambda desc, model_id: self.fail.get("get_desc", 0),
            "get_num_inputs": lambda desc: len(self._input_dims),
            "get_dynamic_batch": lambda desc: ({"batchCount": len(self._batch), "batch": self._batch}, 0),
            "get_dynamic_hw": lambda desc, index: ({"hwCount": len(self._hw), "hw": self._hw}, 0),
            "get_input_dynamic_gear_count": lambda desc, index: (
                len(self._dims) if self.gear_count is None else self.gear_count,
                0,
            ),
            "get_input_dynamic_dims": self._dynamic_dims,
            "get_input_dims": self._input_dims_of,
        }
        if has_dims_range:
            mdl["get_input_dims_range"] = self._dims_range
        for name in set(mdl) & set(EMPTY) & set(self.fail):
            mdl[name] = self._failing(name)
        self.mdl = types.SimpleNamespace(**mdl)

    def _failing(self, name: str):
        def call(*args: Any):
            self.calls.append((name,) + args)
            return EMPTY[name], self.fail[name]

        return call

    def _log(self, *call: Any) -> int:
        self.calls.append(call)
        return 0

    def init(self, config_path: str = "") -> int:
        self.calls.append(("init",))
        if "init" in self.fail:
            return self.fail["init"]
        if self.initialised:
            return ACL_ERROR_REPEAT_INITIALIZE
        self.initialised = True
        return 0

    def finalize(self) -> int:
        self.initialised = False
        return self._log("finalize")

    def get_soc_name(self) -> str:
        return self.soc

    def _set_device(self, device_id: int) -> int:
        self.calls.append(("set_device", device_id))
        return self.set_device_ret

    def _reset_device(self, device_id: int) -> int:
        return self._log("reset_device", device_id)

    def _load(self, path: str):
        self.calls.append(("load_from_file", path))
        return 1, 0

    def _dynamic_dims(self, desc: Any, index: int, count: int):
        if count > MAX_GEARS:
            return None
        return [{"name": "", "dimCount": len(d), "dims": list(d)} for d in self._dims[:count]], 0

    def _dims_range(self, desc: Any, index: int):
        r = self._ranges[index]
        return {"rangeCount": len(r), "range": r}, 0

    def _input_dims_of(self, desc: Any, index: int):
        d = self._input_dims[index]
        return {"name": f"in{index}", "dimCount": len(d), "dims": d}, 0
