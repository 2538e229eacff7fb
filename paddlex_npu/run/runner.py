"""The OM runner: PaddleX's runner contract around one :class:`~.session.Session`.

Contract (the same as PaddleX's own runners): called as ``runner(x=[arrays])`` or ``runner([arrays])`` with
the inputs sorted by input name; returns a list of numpy arrays in the model's output order with the model's
dtypes. This module imports no PaddleX: the version adapters wrap it.

:func:`build_om_runner` does the loading (package files, the manifest resolved once, the session, warm-up);
:class:`OMRunner` only runs calls.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..config import OMBackendConfig
from ..errors import (
    ConfigError,
    DeviceCallError,
    DeviceLostError,
    InputMismatchError,
    PaddlexNpuError,
    ShapeInferenceError,
)
from ..log import logger
from ..om import manifest as mf
from ..om.graph import load_graph, output_dims
from ..om.output_shapes import OutputShapes
from ..om.package import ONNX_RUNTIMES, OMPackage, resolve_om_package
from .buffers import OutputSizer, check_gear_budget, memory_budget
from .dtypes import numpy_dtype
from .gears import (
    InputShapeError,
    TaskPolicy,
    check_output_ranks,
    check_task_rules,
    policy_for,
    run_in_ranges,
    run_with_gears,
)
from .session import OpenedSession, open_session

TRIM_LOGS_EVERY = 4096  # session calls between two clears of the session's timing logs (OpenedSession.trim_logs)


def sort_inputs(inputs: Sequence[Any], names: Sequence[str]) -> List[Any]:
    """Reorder inputs given in name-sorted order into the model's order (as PaddleX's ``sort_inputs``)."""
    order = sorted(range(len(names)), key=names.__getitem__)
    return [inputs[order.index(i)] for i in range(len(inputs))]


class CTCReduced(list):
    """What a runner returns for an OM whose CTC output was reduced on the device (manifest ``reduction``
    ``ctc_greedy``): ``[indices [N, T] int32, scores [N, T] float32]``. The route's decode
    (:mod:`paddlex_npu.paddlex.ctc_decode`) takes it directly; any other caller sees a list of two arrays."""


def reduced_policy(policy: TaskPolicy) -> TaskPolicy:
    """The task's policy for reduced outputs: two ``[N, T]`` outputs, each cropped on T as the CTC output was."""
    crops = tuple((k, od, ii, idim) for oi, od, ii, idim in policy.crops if oi == 0 for k in range(2))
    return dataclasses.replace(policy, crops=crops, output_ranks=(2, 2))


def given_manifest(package: OMPackage, config: OMBackendConfig) -> Optional[mf.OMManifest]:
    """The manifest from ``backend_config['manifest']``, else the package's ``inference.om.json``, else None."""
    if config.manifest is not None:
        return mf.parse(config.manifest, "backend_config['manifest']")
    if package.manifest_path is not None:
        return mf.load(package.manifest_path)
    return None


class OMRunner:
    """Runs one OM model through a session in the mode its manifest says (default ``dymshape``).

    ``task`` is the PaddleX predictor class name; it picks the shape policy for gear and static OMs.
    """

    def __init__(
        self,
        opened: OpenedSession,
        manifest: mf.OMManifest,
        config: OMBackendConfig,
        *,
        name: str,
        device_id: int = 0,
        task: Optional[str] = None,
        onnx_path: Optional[Path] = None,
    ) -> None:
        self.name = name
        self.device_id = device_id
        self.config = config
        self.manifest = manifest
        self.policy = policy_for(task) if manifest.reduction is None else reduced_policy(policy_for(task))
        self._opened: Optional[OpenedSession] = opened
        session = opened.session
        self._in_descs = list(session.get_inputs())
        self._out_descs = list(session.get_outputs())
        self.input_names = [d.name for d in self._in_descs]
        self.output_names = [d.name for d in self._out_descs]
        self._in_dtypes = [numpy_dtype(d.datatype) for d in self._in_descs]
        if [i.name for i in manifest.inputs] != self.input_names:
            raise ConfigError(
                f"the OM manifest names inputs {[i.name for i in manifest.inputs]}, the OM has "
                f"{self.input_names}: the manifest belongs to another model"
            )
        _check_static_outputs(manifest, self._out_descs, name)
        check_output_ranks([list(d.shape) for d in self._out_descs], self.output_names, self.policy, name)
        fixed = _fixed_sizes(config, self.output_names)
        self.output_itemsizes = [numpy_dtype(d.datatype).itemsize for d in self._out_descs]
        self._solved = solved_output_shapes(manifest, self.output_names, config.data_dependent_max)
        self._sizer = OutputSizer(
            [list(d.shape) for d in self._out_descs],
            self.output_itemsizes,
            fixed,
            shapes=self._solved,
            infer=onnx_shape_inference(onnx_path, manifest, self.output_names, config.data_dependent_max, name)
            if onnx_path is not None
            else None,
            output_names=self.output_names,
        )
        unsized = self._sizer.unsized() if manifest.mode == "dymshape" else []
        if unsized:
            raise ConfigError(
                f"{name}: the size of outputs {unsized} cannot be derived: the manifest has no output_dims and the "
                "package has no inference.onnx. Rebuild the package with `paddlex-npu convert` (it records the "
                "output dims as expressions of the input dims), or set backend_config['custom_sizes'] (bytes per "
                "output)"
            )
        self._static_sizes = [int(d.size) for d in self._out_descs]
        self._all_static = fixed is None and all(self._static_sizes)
        self._lock = threading.Lock()
        self._fit_warned = False
        self._calls = 0
        self.loop: Optional[Any] = None  # run.loop.LoopDriver of a model split around its Loop

    @property
    def input_dtypes(self) -> List[np.dtype]:
        return list(self._in_dtypes)

    @property
    def mode(self) -> str:
        """The ais_bench mode this OM runs in (from its manifest)."""
        return self.manifest.mode

    @property
    def runtime(self) -> str:
        return self._session_or_raise().runtime

    @property
    def session(self) -> Any:
        return self._session_or_raise().session

    def __call__(self, x: Optional[Any] = None, **kwargs: Any) -> List[np.ndarray]:
        if x is None:  # ``runner(x=...)`` binds x itself: other keywords are PaddleX's and ignored
            raise TypeError("OM runner: missing the inputs `x`")
        arrays = [x] if isinstance(x, np.ndarray) else list(x)
        if len(arrays) != len(self.input_names):
            raise InputMismatchError(
                f"{self.name}: {len(arrays)} inputs given, the model has "
                f"{len(self.input_names)} ({', '.join(self.input_names)})"
            )
        arrays = sort_inputs(arrays, self.input_names)
        self._check_pixels(arrays)
        feeds = [np.ascontiguousarray(a, dtype=dt) for a, dt in zip(arrays, self._in_dtypes)]
        outputs = self.infer(feeds) if self.loop is None else self.loop(feeds, self.infer)
        return outputs if self.manifest.reduction is None else CTCReduced(outputs)

    def _check_pixels(self, arrays: List[Any]) -> None:
        """An input the OM normalises on the device takes 8-bit pixels: refuse anything else rather than cast it
        (float32 values normalised on the host would become garbage as uint8)."""
        norm = self.manifest.normalisation
        if norm is None:
            return
        got = np.asarray(arrays[self.input_names.index(norm.input)]).dtype
        if got != np.uint8:
            raise InputMismatchError(
                f"{self.name}: input {norm.input!r} is {got}; this package takes 8-bit pixels and normalises them on "
                "the device (convert's default for detection and recognition). PaddleX's predictor normalised them "
                "on the host: "
                "run it through paddlex_npu's route (import paddlex_npu before creating it), or convert the model "
                "with --no-device-normalise"
            )

    def infer(self, feeds: List[np.ndarray]) -> List[np.ndarray]:
        """One inference on feeds already in model order and dtypes, through the shape policy."""
        if self.mode == "dymshape":
            return run_in_ranges(
                self.manifest,
                feeds,
                self.policy,
                self._run_session,
                self.config.oversize,
                self._warn_fit,
            )
        return run_with_gears(
            self.manifest,
            feeds,
            self.policy,
            self._run_session,
            self.config.pad_value,
            self.config.oversize,
            self._warn_fit,
            self._solved_dims,
        )

    def _solved_dims(self, index: int, input_shapes: List[List[int]]) -> Optional[List[int]]:
        """The dims output ``index`` has for these (real, unpadded) inputs, when the manifest solved them (gear
        and static OMs only, which have no data-dependent outputs: the manifest refuses them outside dymshape)."""
        shapes = self._solved
        if shapes is None or not shapes.known(index):
            return None
        return shapes.shape(index, input_shapes)

    def _warn_fit(self, real: List[int], fitted: List[int]) -> None:
        """One warning per model when oversize ``fit`` resizes an input."""
        if self._fit_warned:
            return
        self._fit_warned = True
        larger = (
            "Rebuild the OM with wider ranges (paddlex-npu convert with a larger --max-side, or none)"
            if self.mode == "dymshape"
            else "Add a larger gear (paddlex-npu convert --gears auto plans one that holds every input)"
        )
        logger.warning(
            "%s: an input of shape %s is larger than the OM takes (%s); oversize 'fit' resized it to %s "
            "(%s), which may read less well. %s or set backend_config oversize: 'error' to refuse such inputs. "
            "Logged once per model",
            self.name,
            real,
            self.manifest.describe(),
            fitted,
            "image scaled, map scaled back" if self.policy.fit_image else "width squeezed",
            larger,
        )

    def _run_session(self, feeds: List[np.ndarray]) -> List[np.ndarray]:
        """One session call with output buffers sized for these feeds. The inputs are checked first, in Python:
        on the device a failed call says only "ACL: general failure" and leaks memory, so it is never retried."""
        opened = self._session_or_raise()
        self._check_feeds(feeds)
        sizes = self.output_sizes(feeds)
        with self._lock, opened.call_guard():
            if self._opened is not opened:  # closed while this call waited for the lock
                raise RuntimeError(f"OM runner for {self.name} is closed")
            self._calls += 1
            if self._calls % TRIM_LOGS_EVERY == 0:  # the sessions' per-call timing logs: memory flat over time
                opened.trim_logs()
            try:
                outputs = self._call(opened.session, feeds, sizes)
            except DeviceLostError:  # the context is gone: the worker must end, not read it as one failed call
                raise
            except RuntimeError as exc:
                raise DeviceCallError(
                    f"{self.name}: the {self.runtime} session failed ({str(exc).strip() or type(exc).__name__}) on "
                    f"inputs {[list(f.shape) for f in feeds]} ({self.mode}) with {sizes} bytes reserved for outputs "
                    f"{self.output_names}; the details are in the runtime's log above. "
                    + (
                        f"Outputs {self.manifest.data_dependent} depend on the input values and are sized for "
                        f"{self.config.data_dependent_max} rows: raise backend_config['data_dependent_max'] if "
                        "more can come"
                        if self.manifest.data_dependent
                        else "If an output can be larger, set backend_config['custom_sizes'] (bytes per output) "
                        "above those sizes"
                    )
                ) from exc
        return list(outputs)

    def output_sizes(self, feeds: Sequence[np.ndarray]) -> List[int]:
        """Bytes reserved per output for a call on these feeds (see :mod:`.buffers`)."""
        if self._all_static:
            return self._static_sizes
        return [max(s, d) for s, d in zip(self._sizer.sizes(feeds), self._static_sizes)]

    def _check_feeds(self, feeds: List[np.ndarray]) -> None:
        """Rank, fixed dims and dtype of each feed against the OM's descriptors (gears and ranges are the shape
        policy's, checked before this)."""
        for feed, desc, dt in zip(feeds, self._in_descs, self._in_dtypes):
            shape = list(feed.shape)
            if (
                feed.dtype != dt
                or len(shape) != len(desc.shape)
                or any(d > 0 and d != s for d, s in zip(desc.shape, shape))
            ):
                raise InputShapeError(
                    f"{self.name}: input {desc.name!r} is {feed.dtype}{shape}, the OM takes {dt}{list(desc.shape)} "
                    "(-1: any size): resize the input in PaddleX, or rebuild the OM for this shape"
                )

    def _call(self, session: Any, feeds: List[np.ndarray], sizes: List[int]) -> List[np.ndarray]:
        if self.mode != "dymshape" and any(d.size == 0 for d in self._out_descs):
            # ais_bench applies custom_sizes only in dymshape; in gear/static modes an output whose size the OM
            # does not know needs the sticky setter (set only then: the device copies whole buffers back).
            session.set_custom_outsize(sizes)
        return session.infer(feeds, mode=self.mode, custom_sizes=sizes)

    def warmup(self, runs: int, shapes: Optional[Dict[str, List[int]]] = None) -> None:
        """Run ``runs`` inferences on zero inputs, e.g. to compile kernels before the first request."""
        first_gear = self.manifest.gear_shapes()[0] if self.mode != "dymshape" else None
        feeds = []
        for k, (desc, dt) in enumerate(zip(self._in_descs, self._in_dtypes)):
            shape = (shapes or {}).get(desc.name) or (
                first_gear[k]
                if first_gear
                else [d if d > 0 else (1 if i == 0 else 64) for i, d in enumerate(desc.shape)]
            )
            feeds.append(np.zeros(shape, dtype=dt))
        for _ in range(runs):
            self.infer(feeds)
        logger.info("%s: %d warm-up run(s) done", self.name, runs)

    def warmup_gears(self) -> List[float]:
        """One call per gear (static: the one shape) on zero inputs of exactly that gear's shapes, so that the
        first request on a gear does not pay its first-run cost; returns and logs each gear's seconds."""
        if self.mode == "dymshape":
            return []
        times = []
        for gear in self.manifest.gear_shapes():
            feeds = [np.zeros(shape, dtype=dt) for shape, dt in zip(gear, self._in_dtypes)]
            t0 = time.perf_counter()
            self._run_session(feeds)
            times.append(time.perf_counter() - t0)
            logger.info("%s: warm-up of gear %s took %.1f ms", self.name, gear, times[-1] * 1000.0)
        logger.info("%s: %d gear(s) warmed up in %.1f ms", self.name, len(times), sum(times) * 1000.0)
        return times

    def close(self) -> None:
        """Free the session, after a call in flight on another thread has finished (the runner's lock)."""
        if self.loop is not None:
            self.loop.close()
        with self._lock:
            opened, self._opened = self._opened, None
            if opened is not None:  # the session restores the thread's context itself, unless it was the one freed
                opened.session.free_resource()

    def _session_or_raise(self) -> OpenedSession:
        if self._opened is None:
            raise RuntimeError(f"OM runner for {self.name} is closed")
        return self._opened


def _check_static_outputs(manifest: mf.OMManifest, descs: List[Any], name: str) -> None:
    """A static OM knows every output shape GE could infer when it built it; an output that still has -1 dims
    (or an unknown rank, ``[-2]``) is one GE could not type from the graph: data-dependent (NMS boxes), which only
    dymshape returns (see om/manifest.py), or computed from values GE does not fold (correction 33)."""
    unknown = [d.name for d in descs if any(x < 0 for x in d.shape)]
    if manifest.mode == "static" and unknown:
        raise ConfigError(
            f"{name}: this static OM has outputs {unknown} whose shape is not fixed: GE could not infer it from the "
            "graph, so ACL reports no shape for it and a static OM returns the whole output buffer as a flat array. "
            "If `paddlex-npu convert` built the package before it ended each static output in a Reshape to its "
            "shape (a split model's parts), rebuild it; if the shape depends on the input values (e.g. boxes "
            "after NMS), build the OM as dymshape (`paddlex-npu convert ... --mode dymshape`, Ascend310P/910) and "
            "mark them in the manifest's data_dependent"
        )


def _fixed_sizes(config: OMBackendConfig, outputs: List[str]) -> Optional[List[int]]:
    """``custom_sizes`` as one size per output (validated in range by the config); a list must match the outputs."""
    sizes = config.custom_sizes
    if sizes is None:
        return None
    if isinstance(sizes, int):
        return [sizes] * len(outputs)
    if len(sizes) != len(outputs):
        raise ConfigError(
            f"backend_config['custom_sizes'] has {len(sizes)} sizes, the model has {len(outputs)} outputs "
            f"({', '.join(outputs)}): give one size per output, or a single int for all"
        )
    return list(sizes)


def _check_warmup_shapes(config: OMBackendConfig, runner: OMRunner) -> None:
    unknown = sorted(set(config.warmup_shapes or {}) - set(runner.input_names))
    if unknown:
        raise ConfigError(
            f"backend_config['warmup_shapes'] names {unknown}, which are not inputs of {runner.name} "
            f"(its inputs: {', '.join(runner.input_names)})"
        )


def _check_budget(runner: OMRunner, config: OMBackendConfig) -> None:
    """Refuse gears (static: the one shape) whose buffers exceed the memory budget, before any call."""
    if runner.mode == "dymshape":
        return
    check_gear_budget(
        runner.name,
        runner.manifest.gear_shapes(),
        runner.input_names,
        [dt.itemsize for dt in runner._in_dtypes],
        sum(d.size for d in runner._out_descs),
        memory_budget(config.memory_budget),
    )


def _warn_on_checksum(package: OMPackage, manifest: Optional[mf.OMManifest]) -> None:
    """One warning when the ONNX beside the OM is not the one the manifest says the OM was built from."""
    if manifest is None or not manifest.onnx_sha256 or package.onnx_path is None:
        return
    actual = mf.sha256(package.onnx_path)
    if actual != manifest.onnx_sha256:
        logger.warning(
            "%s: inference.onnx (sha256 %s...) is not the ONNX the OM was built from (manifest onnx_sha256 %s...): "
            "the reference runtime runs this ONNX, the device runs the OM; rebuild the package with "
            "`paddlex-npu convert` so that both are the same model",
            package.model_dir,
            actual[:12],
            manifest.onnx_sha256[:12],
        )


def build_om_runner(
    model_dir: Any,
    *,
    runtime: str,
    device_id: int,
    config: OMBackendConfig,
    model_name: str = "",
    task: Optional[str] = None,
    runner_cls: type = OMRunner,
) -> OMRunner:
    """Load an OM package for ``runtime`` and return its runner (``runner_cls`` lets adapters subclass it).

    The manifest is resolved once here and handed to both the session (the reference runtime needs it) and
    the runner; without one, the OM's own descriptors decide (dymshape, or static when nothing varies).
    """
    package = resolve_om_package(model_dir, runtime)
    given = given_manifest(package, config)
    name = model_name or package.model_dir.name
    _check_package(package, given, runtime, task, name)
    opened = open_session(
        runtime,
        package,
        device_id,
        given,
        acl_json_path=config.acl_json_path,
        debug=config.debug,
        simulation=config.simulation,
        task=task,
    )
    manifest = given or _manifest_from_descriptors(opened)
    try:
        runner = runner_cls(
            opened, manifest, config, name=name, device_id=device_id, task=task, onnx_path=package.onnx_path
        )
    except BaseException:
        opened.session.free_resource()  # a package refused at load leaves no session (device memory) behind
        raise
    if manifest.loop is not None:
        _attach_loop(runner, package.model_dir, manifest.loop, runtime, device_id, config, name)
    _check_warmup_shapes(config, runner)
    _check_budget(runner, config)
    _log_loaded(runner, package, runtime)
    if config.warmup_gears:
        runner.warmup_gears()
    if config.warmup_runs:
        runner.warmup(config.warmup_runs, config.warmup_shapes)
    return runner


EXACT_TASK = "SplitLoopPart"  # run/tasks.py: an exact-shapes task


def _attach_loop(
    runner: OMRunner, model_dir: Path, spec: Any, runtime: str, device_id: int, config: Any, name: str
) -> None:
    """The step and tail packages of a model split around its Loop, behind the encoder's runner; they take their
    exact shapes only (no batch padding or splitting: the driver feeds one image at a time)."""
    from .loop import LoopDriver

    parts = []
    try:
        for folder in (spec.step, spec.tail, *([spec.first] if spec.first else [])):
            plain = config.model_copy(update={"warmup_runs": 0, "warmup_gears": False, "warmup_shapes": None})
            parts.append(
                build_om_runner(
                    Path(model_dir) / folder,
                    runtime=runtime,
                    device_id=device_id,
                    config=plain,
                    model_name=f"{name}/{folder}",
                    task=EXACT_TASK,
                )
            )
    except BaseException:
        for part in parts:
            part.close()
        runner.close()
        raise
    runner.loop = LoopDriver(spec, runner, *parts)


def _check_package(package: Any, given: Optional[mf.OMManifest], runtime: str, task: Optional[str], name: str) -> None:
    """What a package's manifest promises, checked before a session opens: its chip, its task's rules, and (on
    the NPU) the chip ATC built it for against this machine's (``acl.get_soc_name()``); then its checksum."""
    if given is not None:
        given.check_soc()
        check_task_rules(given, policy_for(task), name)
        if runtime == "ais_bench":
            from .device_ids import check_om_soc

            check_om_soc(given.soc_version, str(package.om_path))
    _warn_on_checksum(package, given)
    if runtime != "ais_bench" and package.onnx_path is not None:
        _refuse_unbuildable(package.onnx_path, name)


def _refuse_unbuildable(onnx_path: Path, name: str) -> None:
    """The CPU runtimes run the ONNX an OM was built from: a graph ATC cannot build (a Loop, a Scan) is refused, not
    run as if the device could."""
    from ..om.atc_ops import describe, unbuildable_control_flow
    from ..om.graph import load_graph

    found = unbuildable_control_flow(load_graph(onnx_path))
    if found:
        raise ConfigError(
            f"{name}: {onnx_path} has nodes no ATC builds ({describe(found)}), so no OM of it can run on the device "
            "and the CPU runtimes do not run it either: rebuild the package with `paddlex-npu convert` (it splits a "
            "model around its one top-level Loop into device models driven by a host loop)"
        )


def _log_loaded(runner: OMRunner, package: Any, runtime: str) -> None:
    on_onnx = runtime in ONNX_RUNTIMES and package.onnx_path is not None  # the CPU runs the ONNX, not the OM
    runs = package.onnx_path.name if on_onnx else package.om_path.name
    built = ", the ONNX the OM is built from" if on_onnx else ""
    logger.info(
        "OM runner for %s: %s (%s%s) on npu:%d via %s (inputs %s)",
        runner.name,
        runs,
        runner.manifest.mode,
        built,
        runner.device_id,
        runtime,
        runner.input_names,
    )


def solved_output_shapes(manifest: mf.OMManifest, names: Sequence[str], bound: int) -> Optional[OutputShapes]:
    """The manifest's ``output_dims`` in the OM's output order (by name when the manifest names its outputs)."""
    dims = manifest.output_dims
    if dims is None:
        return None
    if manifest.outputs and set(manifest.outputs) == set(names):
        by_name = dict(zip(manifest.outputs, dims))
        dims = [by_name[n] for n in names]
    elif len(dims) != len(names):
        raise ConfigError(
            f"the OM manifest has output_dims for {len(dims)} outputs, the OM has {len(names)} ({', '.join(names)}): "
            "the manifest belongs to another model"
        )
    return OutputShapes(dims, bound)


def onnx_shape_inference(
    onnx_path: Path, manifest: mf.OMManifest, names: Sequence[str], bound: int, model: str
) -> Callable[[List[List[int]]], Optional[List[List[int]]]]:
    """Output dims for concrete input shapes, for a package whose manifest has no ``output_dims``: ONNX shape
    inference on those shapes (3 to 250 ms per new input shape on PP-OCR models; the sizer caches it per shape),
    and where it cannot tell (paddle2onnx's reshapes in PP-OCRv4 rec), the dims solved from the graph once
    (:mod:`.shape_solver`, 0.1-10 s). In the OM's output order; data-dependent dims left open are ``bound``.
    Packages built by ``convert`` carry ``output_dims`` and never call it."""
    state: Dict[str, Any] = {}
    lock = threading.Lock()
    loose = set(manifest.data_dependent)

    def solved() -> Optional[OutputShapes]:
        with lock:
            if "solved" not in state:
                from .shape_solver import derive_file

                logger.info(
                    "%s: solving the output dims from inference.onnx (rebuild the package with `paddlex-npu "
                    "convert` to have them in its manifest)",
                    model,
                )
                try:
                    state["solved"] = OutputShapes(derive_file(onnx_path, sorted(loose)), bound)
                except PaddlexNpuError:  # sympy missing: the sizer names custom_sizes and convert
                    state["solved"] = None
        return state["solved"]

    def infer(shapes: List[List[int]]) -> Optional[List[List[int]]]:
        with lock:
            if "graph" not in state:
                state["graph"] = load_graph(onnx_path)
                state["names"] = [o.name for o in state["graph"].graph.output]
        graph_names = state["names"]
        if len(graph_names) != len(names):
            return None
        try:
            dims = output_dims(state["graph"], shapes, graph_names)
        except ShapeInferenceError as exc:
            raise InputShapeError(f"{model}: the model cannot take inputs {shapes}: {exc}") from None
        out: List[List[int]] = []
        for i, (n, g) in enumerate(zip(names, graph_names)):
            ds = [bound if d <= 0 and (n in loose or g in loose) else d for d in (dims[i] if dims else [0])]
            if any(d <= 0 for d in ds):
                fallback = solved()
                if fallback is not None and fallback.known(i):
                    ds = fallback.shape(i, shapes)
            out.append(ds)
        return out

    return infer


def _manifest_from_descriptors(opened: OpenedSession) -> mf.OMManifest:
    ins = list(opened.session.get_inputs())
    outs = list(opened.session.get_outputs())
    return mf.default_for(
        [d.name for d in ins],
        [list(d.shape) for d in ins],
        [numpy_dtype(d.datatype).name for d in ins],
        [d.name for d in outs],
        [list(d.shape) for d in outs],
    )
