"""Minimal stand-ins for pyACL (``acl``) and ais_bench's ``InferSession``, for the context and API-generation
logic of ``paddlex_npu.run.ais`` on a machine without an NPU. They imitate only what that logic relies on, from
ais_bench's ``backend/base/module/DeviceManager/DeviceManager.cpp`` at both of its states around Ascend tools'
commit a04bd85b (2024-12-09): ``InitDevices`` calls ``aclInit`` once per process; when it returns 100002
(``ACL_ERROR_REPEAT_INITIALIZE``: something initialised ACL first) the newer one borrows the device's current
context for the first session on a device (``CreateContext``), the older one fails ("[100002][...]");
``free_resource`` destroys the session's context; every call makes the session's context current. pyACL: ``init``
returns 0 or 100002; ``rt.set_device`` makes the device's default context current (one per device in a process,
CANN ``acl.rt.set_device``); a failing aclruntime open or context call raises ``RuntimeError("[<code>][<text>] ")``
(``ErrorCode.cpp`` GetError).

A failing ``infer``/``run`` raises ``RuntimeError("[-1][ACL: general failure] ")`` whatever ACL said, as every
ais_bench generation does (Yanguan619/aclruntime @8da7f645, ``ais-bench_workload/tool/ais_bench/backend/``:
``base/module/ModelInfer/model_process.cpp:1196-1203`` Execute returns FAILED after ``ACLERR_LOG`` (stdout),
``ModelInferenceProcessor.cpp:630-634`` maps it to ``APP_ERR_ACL_FAILURE`` (-1), ``PyInferenceSession.cpp:414-417``
throws ``GetError(ret)``, ``ErrorCode.cpp:98-104`` and ``include/Base/ErrorCode/ErrorCode.h:32, 303`` make the text;
the 2026 rewrite @df1f9a44 the same, ``aclruntime/src/ModelInfer/model_process.cpp:1454-1459``). The ACL code is
seen only through pyACL on the failing thread: ``acl.rt.get_last_error(level)`` / ``peek_at_last_error(level)``
(CANN 8.0 on; ``acl_rt.h:1173, 1183``) and ``acl.rt.query_device_status(device_id)`` -> ``(status, ret)``
(``acl_rt.h:3247``), each left out with ``last_error=False`` / ``device_status=False`` (older CANN)."""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any, List, Optional

ACL_GENERAL_FAILURE = "[-1][ACL: general failure] "  # ErrorCode.cpp:98-104 GetError(APP_ERR_ACL_FAILURE)


class FakeAcl:
    """``acl.rt.get_context`` / ``set_context`` on one thread; ``foreign``: a context another library made."""

    def __init__(
        self,
        foreign: Optional[str] = None,
        initialised: bool = False,
        *,
        last_error: bool = True,
        device_status: bool = True,
    ) -> None:
        self.current = foreign
        self.initialised = foreign is not None or initialised  # aclInit already called by another library
        self.contexts: List[str] = [foreign] if foreign else []
        self.destroyed: List[str] = []
        self.set_calls: List[str] = []
        self.device_refs: dict = {}
        self.abnormal: set = set()  # devices query_device_status reports abnormal
        self._thread = threading.local()
        rt = dict(
            get_context=self.get_context,
            set_context=self.set_context,
            set_device=self.set_device,
            reset_device=self.reset_device,
        )
        if last_error:
            rt.update(get_last_error=self.get_last_error, peek_at_last_error=self.peek_at_last_error)
        if device_status:
            rt["query_device_status"] = self.query_device_status
        self.rt = types.SimpleNamespace(**rt)

    def fail(self, code: int, device_id: Optional[int] = None) -> RuntimeError:
        """A device call of this thread failed with ACL ``code`` (``device_id``: and lost that device): the
        exception ais_bench raises for it."""
        self._thread.last = code
        if device_id is not None:
            self.abnormal.add(device_id)
        return RuntimeError(ACL_GENERAL_FAILURE)

    def get_last_error(self, level: int) -> int:
        """``ret = acl.rt.get_last_error(level)``: the thread's last runtime error, cleared by the read."""
        code, self._thread.last = getattr(self._thread, "last", 0), 0
        return code

    def peek_at_last_error(self, level: int) -> int:
        return getattr(self._thread, "last", 0)

    def query_device_status(self, device_id: int):
        """``device_status, ret = acl.rt.query_device_status(device_id)``: 0 normal, 1 abnormal."""
        return int(device_id in self.abnormal), 0

    def init(self, config_path: str = "") -> int:
        """A pyACL user's own ``acl.init()``."""
        if self.initialised:
            return 100002
        self.initialised = True
        return 0

    def set_device(self, device_id: int) -> int:
        self.device_refs[device_id] = self.device_refs.get(device_id, 0) + 1
        self.current = f"default-ctx-{device_id}"
        return 0

    def reset_device(self, device_id: int) -> int:
        self.device_refs[device_id] -= 1
        return 0

    def get_context(self):
        """CANN pyACL reference: ``context, ret = acl.rt.get_context()``, context an int (the pointer address): 0
        with ACL_ERROR_RT_CONTEXT_NULL when the thread has none."""
        return (self.current, 0) if self.current else (0, 107002)

    def set_context(self, context: str) -> int:
        if context in self.destroyed:
            raise AssertionError(f"set_context on the destroyed context {context}")
        self.set_calls.append(context)
        self.current = context
        return 0


def _failure(cls: Any) -> Optional[int]:
    """The ACL code this call of a session class fails with (``fail_with``; ``fail_calls``: how many calls fail
    from now on, None for every one), or None."""
    if cls.fail_with is None or cls.fail_calls == 0:
        return None
    if cls.fail_calls is not None:
        cls.fail_calls -= 1
    return cls.fail_with


def _create_context(acl: FakeAcl, cls: Any, device_id: int, borrows: bool) -> str:
    """DeviceManager.cpp InitDevices (aclInit once per process) and CreateContext for a new session. Before
    a04bd85b (Yanguan619/aclruntime @a04bd85b^), ``InitDevices`` returns 100002 with ``initCounter_ = 0``
    (``DeviceManager.cpp:54-68``) and its only caller, the ``TensorContext`` constructor, logs it and goes on
    (``Tensor/TensorContext/TensorContext.cpp:27-39``); ``CreateContext`` sets the device and creates a context
    (``DeviceManager.cpp:209-230``): the session opens. ``cls.init_counter`` 0 remembers that for
    ``free_resource``."""
    if cls.ais_init is None:
        cls.ais_init = 100002 if acl.initialised else 0
        cls.init_counter = 0 if cls.ais_init and not borrows else 1
    if borrows and cls.ais_init == 100002 and device_id not in cls.devices:
        # aclInit said "repeat initialize", so the first context of the device is aclrtGetCurrentContext after
        # aclrtSetDevice: the thread's, else the device's default context
        context = acl.current or f"default-ctx-{device_id}"
    else:
        context = f"ais-ctx-{len(acl.contexts)}"
        acl.contexts.append(context)
    acl.initialised = True
    cls.devices.add(device_id)
    acl.current = context
    return context


class _Pybind:
    """The ``aclruntime.InferenceSession`` an ``InferSession`` keeps as ``.session``: ``free_resource``
    (``PyInferenceSession.cpp`` FreeResource) returns an int and never raises: SetContext, Destroy (the model and
    its memory), then DestroyContext, which returns 1009 (``APP_ERR_COMM_OUT_OF_RANGE``, ``ErrorCode.h:63, 72``)
    while ``initCounter_`` is 0 (``DeviceManager.cpp@a04bd85b^:138-142``): the context is left alive."""

    def __init__(self, acl: FakeAcl, owner: Any, context: str) -> None:
        self.acl, self.owner, self.context = acl, owner, context
        self.freed = False

    def free_resource(self) -> int:
        self.acl.current = self.context
        self.freed = True
        if self.owner.init_counter == 0:
            return 1009
        if self.context not in self.acl.destroyed:
            self.acl.destroyed.append(self.context)
        return 0


def session_class(acl: FakeAcl, *, new_api: bool = True, borrows: bool = True) -> type:
    """An ``InferSession`` class: ``new_api`` has ``infer_mode_switch``, ``out_array``, ``free_resource`` and
    ``reset_summaryinfo`` (2023-09+); the old one (interface.py of 2023-01) runs dymbatch/dymhw without setting a
    gear, has no ``free_resource`` and resets its timings with ``reset_sumaryinfo``. ``borrows``: DeviceManager.cpp
    from 2024-12 on; without it, a session in a process where ACL was initialised first fails."""

    class FakeInferSession:
        @property
        def freed(self) -> bool:
            return self.pybind.freed  # kept: the route detaches .session after freeing

        devices: set = set()
        ais_init: Optional[int] = None  # aclInit's return in ais_bench's InitDevices (None: not called yet)
        init_counter = 1  # DeviceManager's initCounter_ (0 after a failed aclInit, before a04bd85b)
        fail_with: Optional[int] = None  # an ACL code the next infer fails with
        fail_calls: Optional[int] = None  # how many calls fail with it (None: every one)

        def __init__(
            self, device_id: int, model_path: str, acl_json_path: Any = None, debug: bool = False, loop: int = 1
        ) -> None:
            # interface.py InferSession.__init__ keeps device_id, model_path and loop as attributes (2023-01,
            # 5e564044), and from 2024-02 (3ffe8a42) also acl_json_path and debug
            self.device_id, self.model_path, self.loop = device_id, model_path, loop
            if new_api:
                self.acl_json_path, self.debug = acl_json_path, debug
            self.calls: List[tuple] = []
            self.infer_kwargs: dict = {}  # the keyword arguments of the last infer
            self.exec_time_list: List[float] = []  # the C++ execTimeList, one entry per execution
            self.context = _create_context(acl, FakeInferSession, device_id, borrows)
            self.session = self.pybind = _Pybind(acl, FakeInferSession, self.context)
            if new_api:
                self.infer_mode_switch = {m: None for m in ("static", "dymbatch", "dymhw", "dymdims", "dymshape")}

        def get_inputs(self):
            return [types.SimpleNamespace(name="x", shape=[-1, 3, -1, -1], datatype=0, size=0, realsize=0)]

        def get_outputs(self):
            return [types.SimpleNamespace(name="y", shape=[-1, 3, -1, -1], datatype=0, size=0, realsize=0)]

        def set_dynamic_batchsize(self, b: int) -> None:
            self.calls.append(("set_dynamic_batchsize", b))

        def set_dynamic_hw(self, h: int, w: int) -> None:
            self.calls.append(("set_dynamic_hw", h, w))

        def set_custom_outsize(self, custom_sizes: Any) -> None:  # interface.py: ``self.session.set_custom_outsize``
            self.calls.append(("set_custom_outsize", custom_sizes))

        if new_api:

            def free_resource(self) -> None:
                """interface.py@a04bd85b^:237-239: the pybind's int is dropped."""
                if hasattr(self.session, "free_resource"):
                    self.session.free_resource()

            def reset_summaryinfo(self) -> None:  # interface.py: ``self.session.reset_sumaryinfo()``
                self.exec_time_list.clear()

            def infer(self, feeds, mode="static", custom_sizes=100000, out_array=True):
                acl.current = self.context
                self.calls.append(("infer", mode))
                self.infer_kwargs = {"mode": mode, "custom_sizes": custom_sizes, "out_array": out_array}
                code = _failure(FakeInferSession)
                if code is not None:
                    raise acl.fail(code)
                self.exec_time_list.append(1.0)
                return list(feeds)

        else:  # interface.py of 2023-01: no free_resource, the C++ name reset_sumaryinfo, infer without out_array

            def reset_sumaryinfo(self) -> None:
                self.exec_time_list.clear()

            def infer(self, feeds, mode="static", custom_sizes=100000):
                acl.current = self.context
                self.calls.append(("infer", mode))
                self.infer_kwargs = {"mode": mode, "custom_sizes": custom_sizes}
                self.exec_time_list.append(1.0)
                return list(feeds)

    return FakeInferSession


def aclruntime_module(acl: FakeAcl, *, borrows: bool = True) -> types.ModuleType:
    """``aclruntime`` of 2026-08 (Yanguan619/aclruntime df1f9a44, ``PyInferenceSession.cpp`` RegistInferenceSession):
    ``InferenceSession(model_path, device_id, options)`` with the methods the 2026 ``InferSession`` reaches, directly
    or through its ``__getattr__``; ``session_options``. ``free_resource`` (FreeResource) destroys the session's
    context; a second call finds nothing left to free (``Destroy`` is guarded by ``InitFlag_``)."""
    module = types.ModuleType("aclruntime")

    class session_options:  # noqa: N801 - pybind's name
        def __init__(self) -> None:
            self.acl_json_path, self.log_level, self.loop = "", 2, 1

    class InferenceSession:
        devices: set = set()
        ais_init: Optional[int] = None
        init_counter = 1
        fail_with: Optional[int] = None  # an ACL code the next run fails with
        fail_calls: Optional[int] = None  # how many calls fail with it (None: every one)

        def __init__(self, model_path: str, device_id: int, opts: session_options) -> None:
            self.model_path, self.device_id, self.opts = model_path, device_id, opts
            self.calls: List[tuple] = []
            self.freed = False
            self.free_calls = 0
            self.exec_time_list: List[float] = []
            self.context = _create_context(acl, InferenceSession, device_id, borrows)

        def get_inputs(self):
            return [types.SimpleNamespace(name="x", shape=[-1, 3, -1, -1], datatype=0, size=0, realsize=0)]

        def get_outputs(self):
            return [types.SimpleNamespace(name="y", shape=[-1, 3, -1, -1], datatype=0, size=0, realsize=0)]

        def options(self) -> session_options:
            return self.opts

        def run(self, out_names: List[str], inputs: list) -> list:
            acl.current = self.context
            self.calls.append(("run", list(out_names)))
            code = _failure(InferenceSession)
            if code is not None:
                raise acl.fail(code)
            self.exec_time_list.append(1.0)
            return list(inputs)

        def summary(self) -> Any:
            return types.SimpleNamespace(exec_time_list=list(self.exec_time_list))

        def reset_summaryinfo(self) -> None:
            self.exec_time_list.clear()

        def set_context(self) -> None:
            acl.current = self.context
            self.calls.append(("set_context",))

        def set_staticbatch(self) -> None:
            self.calls.append(("set_staticbatch",))

        def set_dynamic_batchsize(self, b: int) -> None:
            self.calls.append(("set_dynamic_batchsize", b))

        def set_dynamic_hw(self, h: int, w: int) -> None:
            self.calls.append(("set_dynamic_hw", h, w))

        def set_dynamic_shape(self, dims: str) -> None:
            self.calls.append(("set_dynamic_shape", dims))

        def set_custom_outsize(self, custom_sizes: Any) -> None:
            self.calls.append(("set_custom_outsize", custom_sizes))

        def free_resource(self) -> int:
            """FreeResource: SetContext, Destroy, DestroyContext. A second call finds its context gone: SetContext
            fails and "set context failed" is logged at ERROR (``PyInferenceSession.cpp@df1f9a44:152-158``)."""
            self.free_calls += 1
            if self.freed:
                module.errors.append(f"set context failed ({self.model_path})")
                return 107002
            acl.current = self.context
            acl.destroyed.append(self.context)
            self.freed = True
            return 0

    module.session_options = session_options
    module.InferenceSession = InferenceSession
    module.errors = []  # ERROR lines aclruntime logged
    return module


def session_class_2026(aclruntime: types.ModuleType) -> type:
    """``InferSession`` of interface.py at Yanguan619/aclruntime df1f9a44 (2026-08-12): no ``free_resource`` nor
    ``set_context`` of its own, a ``__getattr__`` that forwards every unknown name to ``self.session`` (the
    ``aclruntime.InferenceSession``), ``__del__`` freeing the session's resources when collected. Its module is
    ``ais_bench.infer.interface`` (:func:`install` puts ``aclruntime`` there, as upstream's ``import aclruntime``).
    Argument checks, zero copy, pipelines and iterations are left out: nothing here reaches them."""

    live_sessions: weakref.WeakSet = weakref.WeakSet()  # interface.py:74

    class InferSession:
        @staticmethod
        def _finalize_acl() -> None:
            """The atexit hook (interface.py:173-190): frees every live session's pybind session, then detaches."""
            for sess in list(live_sessions):
                if getattr(sess, "session", None) is not None:
                    func = getattr(sess.session, "free_resource", None)
                    if func is not None:
                        func()
                    sess.session = None

        def __init__(
            self,
            device_id: int,
            model_path: str,
            acl_json_path: Any = None,
            debug: bool = False,
            loop: int = 1,
            weight_dir: Any = None,
            options: Any = None,
        ) -> None:
            self.device_id = device_id
            self.model_path = model_path
            self.loop = loop
            self.options = options if options is not None else aclruntime.session_options()
            self.acl_json_path = acl_json_path
            self.debug = debug
            self.weight_dir = weight_dir
            if acl_json_path is not None:
                self.options.acl_json_path = self.acl_json_path
            self.options.log_level = 1 if self.debug else 2
            self.options.loop = self.loop
            self.session = aclruntime.InferenceSession(self.model_path, self.device_id, self.options)
            live_sessions.add(self)  # interface.py:146
            self.outputs_names = [meta.name for meta in self.session.get_outputs()]
            self.infer_mode_switch = {
                "static": self._static_prepare,
                "dymbatch": self._dymbatch_prepare,
                "dymhw": self._dymhw_prepare,
                "dymshape": self._dymshape_prepare,
            }

        def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> bool:
            if hasattr(self.session, "free_resource"):
                self.session.free_resource()
            self.session = None
            return False

        def __getattr__(self, name: str) -> Any:
            return getattr(self.session, name)

        def get_inputs(self):
            return self.session.get_inputs()

        def get_outputs(self):
            return self.session.get_outputs()

        def reset_summaryinfo(self) -> None:
            self.session.reset_summaryinfo()

        def infer(self, feeds, mode="static", custom_sizes=100000, out_array=True, iteration_times=1, in_out_list=None):
            shapes = [list(f.shape) for f in feeds]
            if self.infer_mode_switch.get(mode) is not None:
                self.infer_mode_switch.get(mode)(shapes, custom_sizes)
            out_names = [out_desc.name for out_desc in self.get_outputs()]
            return self.session.run(out_names, feeds)

        def __del__(self) -> None:
            try:
                if hasattr(self, "session") and self.session is not None:
                    func = getattr(self.session, "free_resource", None)
                    if func is not None:
                        func()
                    self.session = None
            except Exception:  # noqa: BLE001 - as upstream: never raise from __del__
                pass

        def infer_pipeline(self, feeds_list, mode="static", custom_sizes=100000): ...

        def summary(self):
            return self.session.summary()

        def _static_prepare(self, shapes, custom_sizes):
            self.set_staticbatch()

        def _dymbatch_prepare(self, shapes, custom_sizes):
            indesc = self.get_inputs()
            for i, shape in enumerate(shapes):
                for j, dim in enumerate(shape):
                    if indesc[i].shape[j] < 0:
                        self.set_dynamic_batchsize(dim)
                        return
            raise RuntimeError("not a dymbatch model!")

        def _dymhw_prepare(self, shapes, custom_sizes):
            indesc = self.get_inputs()
            for i, shape in enumerate(shapes):
                if indesc[i].shape[2] < 0 and indesc[i].shape[3] < 0:
                    self.set_dynamic_hw(shape[2], shape[3])
                    return
            raise RuntimeError("not a dymhw model!")

        def _dymshape_prepare(self, shapes, custom_sizes):
            dims = ";".join(f"{d.name}:{','.join(map(str, s))}" for d, s in zip(self.get_inputs(), shapes))
            self.session.set_dynamic_shape(dims)
            if isinstance(custom_sizes, int):
                custom_sizes = [custom_sizes] * len(self.get_outputs())
            self.session.set_custom_outsize(custom_sizes)

    InferSession.__module__ = "ais_bench.infer.interface"
    return InferSession


def install(monkeypatch: Any, acl: FakeAcl, session_cls: type, aclruntime: Optional[types.ModuleType] = None) -> None:
    """Put the fakes where ``import acl`` and ``from ais_bench.infer.interface import InferSession`` find them;
    ``aclruntime``: the module interface.py imported (read through ``interface.aclruntime``)."""
    import sys

    interface = types.ModuleType("ais_bench.infer.interface")
    interface.InferSession = session_cls
    if aclruntime is not None:
        interface.aclruntime = aclruntime
    monkeypatch.setitem(sys.modules, "acl", acl)
    monkeypatch.setitem(sys.modules, "ais_bench", types.ModuleType("ais_bench"))
    monkeypatch.setitem(sys.modules, "ais_bench.infer", types.ModuleType("ais_bench.infer"))
    monkeypatch.setitem(sys.modules, "ais_bench.infer.interface", interface)
