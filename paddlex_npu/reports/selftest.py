"""``paddlex-npu selftest``: the hardware acceptance run, one pass/fail/skip per check, as a report object.

On an Ascend machine, for the bundled PP-OCRv4 models (det, rec) found as OM packages under ``om_root``
(``paddlex-npu assets`` builds their ONNX folders, ``paddlex-npu convert`` their OMs): each runs through the route
on ais_bench and on the CPU reference runtime with the same text inputs, rendered at their native size, at a base
shape and at the largest the package takes (:mod:`.route_check`: rec's greedy CTC texts equal, a reduced package's
``ctc_scores`` within the fp16 tolerance, texts that differ only at near-ties told apart; det's DB maps thresholded
at 0.3 agree on at least 99% of pixels),
and its manifest is compared with what ACL reports about the OM through pyACL (batch / H-W gears; dims gears as
every dim of every input concatenated; dymshape ranges, with what ACL says of unbounded dims recorded in the
report; static shapes), after ``aclInit`` (0 or "repeat initialize") and ``aclrtSetDevice``, reset afterwards.
Every pyACL answer is checked before it is read: a ``ret`` other than 0 or an answer of the wrong shape (pyACL
returns an empty dict with the error code, and ``None`` past its gear limit) fails the check naming the call and
its code.
Without a device every check says why it could not run, and the report is not ok.

``runtime="reference"`` runs the same checks on the CPU against packages built by ``paddlex-npu convert`` (no
``inference.om`` needed): the route on the reference runtime against ONNX Runtime on the unpadded input, and the
manifest against :class:`~paddlex_npu.run.reference_acl.ReferenceAcl`, so the acceptance code runs in CI. Nothing
is printed here (the CLI prints).
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import runtimes
from ..errors import AclCallError, ConfigError
from ..run.device_ids import VISIBLE_ENV, device_hint, soc_matches
from ..version import __version__
from .route_check import CTC_SCORE_ATOL, call_shapes, compare, reference_probs, render, shapes_text
from .route_check import kind as route_kind

PASS, FAIL, SKIP = "pass", "fail", "skip"
RUNTIMES = runtimes.SELFTEST_NAMES
MODELS = ("PP-OCRv4_mobile_det", "PP-OCRv4_mobile_rec")  # the acceptance set: expected where no package is found
# the PaddleX predictor class each kind runs as on the route (its shape policy: run/tasks.py)
TASKS = {
    "det": "TextDetPredictor",
    "rec": "TextRecPredictor",
    "table": "TableStructurePredictor",
    "layout": "DetPredictor",
    "orientation": "ClasPredictor",
    "classification": "ClasPredictor",
}
LAYOUT = (
    "give a folder holding one OM package per model in a subfolder of its own (every package there is checked, "
    f"or those named with --models; the acceptance set is subfolders named {' and '.join(MODELS)}: "
    "`paddlex-npu convert ASSETS/om/MODEL -o ROOT/MODEL --soc-version SOC`; `paddlex-npu assets` prints ASSETS)"
)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    data: Dict[str, Any] = field(default_factory=dict)


@dataclass
class PackageReport:
    """One package: its kind and the checks run on it (also in the report's flat list)."""

    name: str
    kind: str
    folder: str
    checks: List[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.status == PASS for c in self.checks)


@dataclass
class SelftestReport:
    checks: List[Check] = field(default_factory=list)
    machine: Dict[str, Any] = field(default_factory=dict)
    packages: List[PackageReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every check passed (a skipped check is not a pass: it was not verified)."""
        return bool(self.checks) and all(c.status == PASS for c in self.checks)

    def add(self, package: PackageReport) -> None:
        self.packages.append(package)
        self.checks += package.checks

    def to_json(self) -> str:
        out: Dict[str, Any] = {"schema": "paddlex-npu/selftest/1", "ok": self.ok, "machine": self.machine}
        out["checks"] = [asdict(c) for c in self.checks]
        out["packages"] = [
            {"name": p.name, "kind": p.kind, "folder": p.folder, "ok": p.ok, "checks": [asdict(c) for c in p.checks]}
            for p in self.packages
        ]
        return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def _ais_bench() -> Check:
    from ..errors import RuntimeUnavailableError
    from ..run.ais import load_session_class

    try:
        load_session_class()
    except RuntimeUnavailableError as exc:
        return Check("ais_bench", FAIL, f"cannot run anything on an NPU here: {exc}")
    return Check("ais_bench", PASS, "ais_bench.infer.interface.InferSession importable")


def _pyacl(acl: Any = None) -> Tuple[Check, Any]:
    """pyACL, imported (or the one given): the manifests are checked against what ACL reports through it."""
    if acl is not None:
        return Check("pyACL", PASS, "acl given"), acl
    try:
        import acl  # type: ignore[import-not-found,no-redef]
    except ImportError as exc:
        why = f"`import acl` fails ({exc}): source CANN's set_env.sh (it puts pyACL on PYTHONPATH)"
        return Check("pyACL", FAIL, f"{why}; without it the manifests cannot be checked against ACL"), None
    return Check("pyACL", PASS, f"acl importable ({getattr(acl, '__file__', 'built in')})"), acl


def _package(om_root: Optional[Path], model: str, runtime: str = "ais_bench", parts: Sequence[str] = ()) -> Check:
    """The package's files (and each part's, for a split model: ``parts``) present for ``runtime``."""
    name = f"package {model}"
    if om_root is None:
        return Check(name, SKIP, "no --om-root: build packages with `paddlex-npu assets` + `paddlex-npu convert`")
    folder = Path(om_root) / model
    if not folder.is_dir():
        return Check(name, FAIL, f"{om_root} has no {model} folder: {LAYOUT}")
    needed = ("inference.onnx", "inference.yml", "inference.om.json")
    if runtime == "ais_bench":
        needed = ("inference.om",) + needed
    missing = [str(Path(p) / f) for p in ("", *parts) for f in needed if not (folder / p / f).is_file()]
    if missing:
        return Check(name, FAIL, f"{folder} lacks {', '.join(missing)}: `paddlex-npu convert` builds it (ATC on PATH)")
    return Check(name, PASS, str(folder), {"parts": list(parts)} if parts else {})


def _compare(model: str, device: Any, reference: Any, charset: Optional[List[str]] = None, probs: Any = None) -> Check:
    """One call's outputs (an array, or the list of them) compared as :func:`.route_check.compare` does."""
    as_list = [(list(x) if isinstance(x, (list, tuple)) else [x]) for x in (device, reference)]
    verdict = compare(model, as_list[0], as_list[1], charset, probs)
    return Check(f"route {model}: ais_bench vs reference", PASS if verdict.ok else FAIL, verdict.detail, verdict.data)


def rec_charset(model_dir: Path) -> Optional[List[str]]:
    """The characters of a recognition package (``inference.yml`` PostProcess ``character_dict``, PaddleX's
    CTCLabelDecode: the blank first, the space last), or None."""
    import yaml

    try:
        config = yaml.safe_load((Path(model_dir) / "inference.yml").read_text(encoding="utf-8"))
        chars = list(config["PostProcess"]["character_dict"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return None
    return [""] + [str(c) for c in chars] + [" "]


def _route_name(model: str, runtime: str) -> str:
    if runtime == "reference":
        return f"route {model}: reference package vs ONNX Runtime"
    return f"route {model}: ais_bench vs reference"


def _route(om_root: Path, model: str, device_id: int, runtime: str = "ais_bench", kind: Optional[str] = None) -> Check:
    """The model through the route (runner, shape policy, session) on the device, against the same route on the CPU
    reference runtime with the package's precision (fp16 as ATC builds it: :mod:`..run.reference_precision`), at
    each of :func:`.route_check.call_shapes`. ``runtime`` reference: the route on the
    reference runtime (gear padding and cropping included) against ONNX Runtime on the unpadded input. ``kind``:
    det or rec (default: from the model's name)."""
    from ..om import manifest as mf

    kind = kind or route_kind(model)
    folder = om_root / model
    man = mf.load(folder / mf.MANIFEST_NAME)
    shapes = call_shapes(man, kind)
    sides = ("ais_bench", "reference") if runtime == "ais_bench" else ("reference",)
    norm = man.normalisation
    feeds = {name: render(kind, shape, norm is not None, norm and norm.mask_row) for name, shape in shapes.items()}
    from ..run.reference import numerics

    with numerics("package" if runtime == "ais_bench" else "fp32"):  # the device's precision against the device
        outs = {rt: _route_outputs(folder, kind, device_id, rt, feeds) for rt in sides}
    if runtime == "reference":
        outs["ais_bench"] = outs["reference"]
        outs["reference"] = _onnx_outputs(folder, feeds)
    charset = rec_charset(folder) if kind == "rec" else None
    per_shape, failed = {}, []
    atol = None if runtime == "reference" and man.mode != "dymshape" else CTC_SCORE_ATOL  # padded vs unpadded
    for name, x in feeds.items():
        probs = _probs(folder, man, x)
        verdict = compare(kind, outs["ais_bench"][name], outs["reference"][name], charset, probs, atol)
        per_shape[name] = {"shape": shapes[name], "ok": verdict.ok, "detail": verdict.detail, **verdict.data}
        if not verdict.ok:
            failed.append(f"{name} {'x'.join(map(str, shapes[name]))}: {verdict.detail}")
    if failed:
        return Check(_route_name(model, runtime), FAIL, "; ".join(failed), per_shape)
    detail = f"{shapes_text(shapes)}: " + "; ".join(v["detail"] for v in per_shape.values())
    return Check(_route_name(model, runtime), PASS, detail, per_shape)


def _route_outputs(folder: Path, kind: str, device_id: int, runtime: str, feeds: Dict[str, Any]) -> Dict[str, Any]:
    """Every output of the route at each shape, one runner per side."""
    from ..config import OMBackendConfig
    from ..run.runner import build_om_runner

    runner = build_om_runner(folder, runtime=runtime, device_id=device_id, config=OMBackendConfig(), task=TASKS[kind])
    try:
        return {name: [np.asarray(o) for o in runner(x)] for name, x in feeds.items()}
    finally:
        runner.close()


def _onnx_outputs(folder: Path, feeds: Dict[str, Any]) -> Dict[str, Any]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(folder / "inference.onnx"), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return {k: [np.asarray(o) for o in sess.run(None, {name: x[0]})] for k, x in feeds.items()}


def _probs(folder: Path, man: Any, x: List[Any]) -> Optional[Callable[[], Any]]:
    """For a reduced recogniser: the reference's full probabilities, computed only when asked (texts differ)."""
    if man.reduction is None:
        return None
    return lambda: reference_probs(str(folder / "inference.onnx"), x, man.reduction.source)


ACL_ERROR_REPEAT_INITIALIZE = 100002  # aclInit in a process where ACL is already initialised (ais_bench did it)


def acl_value(call: str, answer: Any, *keys: str) -> Any:
    """The value of a pyACL ``(value, ret)`` answer, after its ``ret`` and, for a dict, its ``keys`` were checked."""
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise AclCallError(call, None, f"not a (value, ret) pair: {answer!r}")
    value, ret = answer
    if ret != 0:
        raise AclCallError(call, ret)
    missing = [k for k in keys if not isinstance(value, dict) or k not in value]
    if value is None or missing:
        raise AclCallError(call, ret, f"answered {value!r} without {', '.join(missing) or 'a value'}")
    return value


def expected_acl_gears(man: Any) -> List[List[int]]:
    """The gears of ``man`` as ACL reports them: dymbatch ``[b]``, dymhw ``[h, w]``, dymdims every dim of every input
    concatenated in input order (``aclmdlGetInputDynamicDims``: ``data(1,1,40,-1)``, ``label(1,-1)`` at gear
    ``20,20`` -> ``1,1,40,20,1,20``), where the manifest stores only the values of the -1 dims."""
    if man.mode == "dymdims":
        return [[d for shape in gear for d in shape] for gear in man.gear_shapes()]
    return [list(g) for g in man.gears or []]


def _acl_gears(acl: Any, desc: Any, mode: str) -> List[List[int]]:
    """What ACL reports for a gear ``mode`` (pyACL: ``(info, ret)`` pairs, each checked)."""
    if mode == "dymbatch":
        info = acl_value("acl.mdl.get_dynamic_batch", acl.mdl.get_dynamic_batch(desc), "batch")
        return [[int(b)] for b in info["batch"]]
    if mode == "dymhw":
        info = acl_value("acl.mdl.get_dynamic_hw", acl.mdl.get_dynamic_hw(desc, -1), "hw")
        return [[int(v) for v in hw] for hw in info["hw"]]
    count = acl_value("acl.mdl.get_input_dynamic_gear_count", acl.mdl.get_input_dynamic_gear_count(desc, -1))
    dims = acl_value("acl.mdl.get_input_dynamic_dims", acl.mdl.get_input_dynamic_dims(desc, -1, count))
    return [[int(v) for v in d["dims"][: d.get("dimCount", len(d["dims"]))]] for d in dims]


def _compare_gears(name: str, man: Any, reported: List[List[int]]) -> Check:
    expected = expected_acl_gears(man)
    data = {"mode": man.mode, "manifest_gears": man.gears, "expected": expected, "acl": reported}
    same = sorted(expected) == sorted(reported)
    detail = f"{man.mode} gears as ACL reports them: expected {expected}, ACL {reported}"
    return Check(name, PASS if same else FAIL, detail, data)


def _compare_ranges(name: str, man: Any, acl: Any, desc: Any) -> Check:
    """dymshape: every bounded dim's [lo, hi] must be what ACL reports (``get_input_dims_range``, CANN 8.0 on; older
    pyACL: ``get_input_dims``, -1 at the dynamic dims). How ACL reports an unbounded dim is not documented: what it
    says is recorded in the report (``data.unbounded``), not judged."""
    ranges = man.input_ranges()
    has_range = hasattr(acl.mdl, "get_input_dims_range")
    per_input, problems, unbounded = [], [], []
    for i, spec in enumerate(man.inputs):
        want = [list(r) for r in ranges[spec.name]]
        if has_range:
            info = acl_value("acl.mdl.get_input_dims_range", acl.mdl.get_input_dims_range(desc, i), "range")
            got = [[int(v) for v in r] for r in info["range"][: info.get("rangeCount", len(info["range"]))]]
        else:
            info = acl_value("acl.mdl.get_input_dims", acl.mdl.get_input_dims(desc, i), "dims")
            dims = info["dims"][: info.get("dimCount", len(info["dims"]))]
            got = [[int(d), int(d)] if d > 0 else [-1, -1] for d in dims]
        per_input.append({"input": spec.name, "manifest": want, "acl": got})
        if len(got) != len(want):
            problems.append(f"{spec.name}: ACL reports {len(got)} dims, the manifest {len(want)}")
            continue
        for j, ((lo, hi), (alo, ahi)) in enumerate(zip(want, got)):
            entry = {"input": spec.name, "dim": j, "manifest": [lo, hi], "acl": [alo, ahi]}
            if has_range:
                wrong = hi != -1 and [lo, hi] != [alo, ahi]
            else:  # get_input_dims: a fixed dim is its value, a dynamic one -1; the range itself is not told
                wrong = alo != (lo if lo == hi else -1)
            if wrong:
                problems.append(f"{spec.name} dim {j}: manifest [{lo}, {hi}], ACL [{alo}, {ahi}]")
            elif hi == -1 or (lo != hi and not has_range):
                unbounded.append(entry)  # how ACL reports it is not documented (or not readable): recorded
    call = "get_input_dims_range" if has_range else "get_input_dims (this pyACL has no get_input_dims_range)"
    data = {"mode": "dymshape", "call": call, "inputs": per_input, "unbounded": unbounded}
    if problems:
        return Check(name, FAIL, "dymshape ranges differ from the manifest: " + "; ".join(problems), data)
    note = f"; {len(unbounded)} unbounded or unchecked dim(s) recorded as ACL reports them" if unbounded else ""
    return Check(name, PASS, f"dymshape ranges agree with ACL ({call}){note}", data)


def _manifest_vs_acl(acl: Any, om_root: Path, model: str, device_id: int) -> Check:
    """Load the OM with pyACL and compare what ACL says about it with its manifest. ACL is initialised here when
    nothing in the process did it yet (``aclInit``: 0, or 100002 "repeat initialize"), the device is set and reset
    around the check, and every ``ret`` is looked at."""
    from ..om import manifest as mf

    name = f"manifest {model} vs ACL"
    man = mf.load(om_root / model / mf.MANIFEST_NAME)
    ret = acl.init()
    if ret not in (0, ACL_ERROR_REPEAT_INITIALIZE):
        return Check(name, FAIL, f"aclInit returned {ret}: check the CANN install (`npu-smi info`, set_env.sh)")
    we_initialised = ret == 0
    try:
        ret = acl.rt.set_device(device_id)
        if ret != 0:
            return Check(name, FAIL, f"aclrtSetDevice({device_id}) returned {ret}: {device_hint(device_id)}")
        try:
            return _check_loaded(acl, name, man, om_root / model / "inference.om")
        except AclCallError as exc:
            return Check(name, FAIL, f"{exc}: ACL could not describe the OM", {"call": exc.call, "ret": exc.ret})
        finally:
            acl.rt.reset_device(device_id)
    finally:
        if we_initialised:
            acl.finalize()


def _check_loaded(acl: Any, name: str, man: Any, om: Path) -> Check:
    device_soc = acl.get_soc_name() if hasattr(acl, "get_soc_name") else ""
    if man.soc_version and device_soc and not soc_matches(man.soc_version, device_soc):
        return Check(
            name,
            FAIL,
            f"the OM was built for {man.soc_version}, this device is {device_soc}: rebuild it with "
            f"`paddlex-npu convert ... --soc-version {device_soc}`",
            {"soc_version": man.soc_version, "device": device_soc},
        )
    model_id = acl_value("acl.mdl.load_from_file", acl.mdl.load_from_file(str(om)))
    desc = acl.mdl.create_desc()
    try:
        ret = acl.mdl.get_desc(desc, model_id)
        if ret != 0:
            raise AclCallError("acl.mdl.get_desc", ret)
        if man.mode == "dymshape":
            check = _compare_ranges(name, man, acl, desc)
        elif man.mode == "static":
            check = _compare_static(name, man, acl, desc)
        else:
            check = _compare_gears(name, man, _acl_gears(acl, desc, man.mode))
        check.data["device_soc"] = device_soc
        return check
    finally:
        acl.mdl.destroy_desc(desc)
        acl.mdl.unload(model_id)


def _compare_static(name: str, man: Any, acl: Any, desc: Any) -> Check:
    got = []
    for i in range(len(man.inputs)):
        info = acl_value("acl.mdl.get_input_dims", acl.mdl.get_input_dims(desc, i), "dims")
        got.append([int(d) for d in info["dims"][: info.get("dimCount", len(info["dims"]))]])
    want = [list(i.shape) for i in man.inputs]
    data = {"mode": "static", "manifest": want, "acl": got}
    same = got == want
    return Check(name, PASS if same else FAIL, f"static input shapes: manifest {want}, ACL {got}", data)


def _guarded(name: str, run: Callable[[], Check]) -> Check:
    try:
        return run()
    except Exception as exc:  # a failing check is reported, the others still run
        return Check(name, FAIL, f"{type(exc).__name__}: {exc}")


def _model_checks(
    om_root: Optional[Path], model: str, device_id: int, runtime: str, ais: Check, acl: Any, kind: Optional[str] = None
) -> List[Check]:
    """An OCR det or rec package: its files, the route at its base and top shapes, its manifest against ACL."""
    route, versus = _route_name(model, runtime), f"manifest {model} vs ACL"
    package = _package(om_root, model, runtime)
    if package.status != PASS or ais.status != PASS:
        why = "no package" if package.status != PASS else "no ais_bench"
        return [package, Check(route, SKIP, f"not run: {why}"), Check(versus, SKIP, f"not run: {why}")]
    root = Path(om_root)  # type: ignore[arg-type]
    checks = [package, _guarded(route, lambda: _route(root, model, device_id, runtime, kind))]
    return checks + [_versus_acl(acl, root, model, device_id)]


def _versus_acl(acl: Any, root: Path, model: str, device_id: int) -> Check:
    """``manifest <model> vs ACL`` (``model`` may be a part: ``SLANet_plus/step``), or why it could not run."""
    versus = f"manifest {model} vs ACL"
    if acl is None:
        return Check(versus, SKIP, "not run: no pyACL")
    return _guarded(versus, lambda: _manifest_vs_acl(acl, root, model, device_id))


def _sides_name(runtime: str) -> str:
    return "reference package vs ONNX Runtime" if runtime == "reference" else "ais_bench vs reference"


def _route_call(folder: Path, kind: str, device_id: int, runtime: str, feeds: Dict[str, np.ndarray]) -> List[Any]:
    """One call of the route (``build_om_runner``: runner, shape policy, session; a split model's host loop) on
    ``feeds`` by input name; every output."""
    from ..config import OMBackendConfig
    from ..run.runner import build_om_runner

    runner = build_om_runner(folder, runtime=runtime, device_id=device_id, config=OMBackendConfig(), task=TASKS[kind])
    try:  # the runner takes PaddleX's order: inputs sorted by name
        return [np.asarray(o) for o in runner(x=[feeds[n] for n in sorted(runner.input_names)])]
    finally:
        runner.close()


def _two_sides(folder: Path, kind: str, device_id: int, runtime: str, feeds: Dict[str, np.ndarray]) -> Tuple[Any, Any]:
    """(device, reference) outputs: ais_bench against the route on the CPU reference runtime at the package's
    precision; ``runtime`` reference: the route on the reference runtime against the package's own ONNX on ONNX
    Runtime (a split model's parts driven by the host loop as ``convert`` samples it)."""
    from ..om import manifest as mf
    from ..run.reference import numerics
    from . import package_kinds as pk

    if runtime == "ais_bench":
        device = _route_call(folder, kind, device_id, "ais_bench", feeds)
        with numerics("package"):
            return device, _route_call(folder, kind, device_id, "reference", feeds)
    with numerics("fp32"):
        device = _route_call(folder, kind, device_id, "reference", feeds)
    man = mf.load(folder / mf.MANIFEST_NAME)
    if man.loop is not None:
        return device, pk.onnx_loop(folder, man.loop, feeds)
    return device, pk.onnx_outputs(folder / "inference.onnx", feeds)


def _verdict_check(name: str, verdict: Any) -> Check:
    return Check(name, PASS if verdict.ok else FAIL, verdict.detail, verdict.data)


def _part_check(root: Path, model: str, part: str, device_id: int, runtime: str) -> Check:
    """One part of a split package opened on the runtime on its own, its inputs and outputs against its manifest."""
    from ..config import OMBackendConfig
    from ..run.runner import EXACT_TASK, build_om_runner
    from . import package_kinds as pk

    folder = root / model / part
    task = TASKS["table"] if not part else EXACT_TASK  # the encoder loads its parts behind it, as on the route
    runner = build_om_runner(folder, runtime=runtime, device_id=device_id, config=OMBackendConfig(), task=task)
    try:
        verdict = pk.part_interface(runner, folder / "inference.onnx")
    finally:
        runner.close()
    return _verdict_check(f"part {model}/{part or 'encoder'}: opened, inputs and outputs as the manifest", verdict)


def _table_checks(root: Path, model: str, device_id: int, runtime: str, acl: Any, tmp: Path) -> List[Check]:
    """A split table package: each part opened and described, the host loop on a rendered table against the
    reference side, the structure read as drawn, each part's manifest against ACL."""
    from ..om import manifest as mf
    from . import package_kinds as pk

    folder = root / model
    man = mf.load(folder / mf.MANIFEST_NAME)
    parts = ["", *([man.loop.first] if man.loop.first else []), man.loop.step, man.loop.tail]
    checks = [
        _guarded(
            f"part {model}/{p or 'encoder'}: opened, inputs and outputs as the manifest",
            lambda p=p: _part_check(root, model, p, device_id, runtime),
        )
        for p in parts
    ]
    loop_name = f"loop {model}: {_sides_name(runtime)}"

    def loop() -> Check:
        spec = man.inputs[0]
        feeds = {spec.name: pk.table_input(spec.shape[-1], tmp)}
        device, reference = _two_sides(folder, "table", device_id, runtime, feeds)
        verdict = pk.compare_table(device, reference, pk.table_characters(pk.read_yml(folder)))
        return _verdict_check(loop_name, verdict)

    looped = _guarded(loop_name, loop)
    drawn = f"table {model}: reads as drawn"
    if "rows" in looped.data:
        checks += [looped, _verdict_check(drawn, pk.table_reads_as_drawn(pk.Verdict(True, "", looped.data)))]
    else:
        checks += [looped, Check(drawn, SKIP, "not run: the loop gave no structure")]
    return checks + [_versus_acl(acl, root, f"{model}/{p}" if p else model, device_id) for p in parts]


def _image_checks(root: Path, model: str, kind: str, device_id: int, runtime: str, acl: Any, tmp: Path) -> List[Check]:
    """A layout or orientation / classification package: one rendered page or line through the route against the
    reference side, its manifest against ACL."""
    from ..om import manifest as mf
    from . import package_kinds as pk

    folder = root / model
    name = f"route {model}: {_sides_name(runtime)}"

    def route() -> Check:
        man, cfg = mf.load(folder / mf.MANIFEST_NAME), pk.read_yml(folder)
        if kind == "layout":
            feeds = pk.layout_inputs(man, tmp)
            device, reference = _two_sides(folder, kind, device_id, runtime, feeds)
            return _verdict_check(name, pk.compare_layout(device, reference, cfg.get("label_list") or []))
        feeds = pk.classifier_input(man, cfg)
        labels = ((cfg.get("PostProcess") or {}).get("Topk") or {}).get("label_list") or []
        device, reference = _two_sides(folder, kind, device_id, runtime, feeds)
        return _verdict_check(name, pk.compare_classes(device, reference, labels))

    return [_guarded(name, route), _versus_acl(acl, root, model, device_id)]


def _package_report(
    om_root: Optional[Path], model: str, device_id: int, runtime: str, ais: Check, acl: Any, tmp: Path
) -> PackageReport:
    """One package: its kind, then the checks of that kind (an unknown kind is reported as not checked)."""
    from ..om import manifest as mf
    from . import package_kinds as pk

    folder = Path(om_root) / model if om_root is not None else Path(model)
    try:
        man = mf.load(folder / mf.MANIFEST_NAME) if (folder / mf.MANIFEST_NAME).is_file() else None
    except Exception:  # a broken manifest: the kind from inference.yml, the package check says the rest
        man = None
    kind = pk.package_kind(folder, man) if folder.is_dir() else ("det" if model.endswith("det") else "rec")
    report = PackageReport(model, kind, str(folder))
    if kind in ("det", "rec"):
        report.checks = _model_checks(om_root, model, device_id, runtime, ais, acl, kind)
        return report
    parts = [p for p in (man.loop.first, man.loop.step, man.loop.tail) if p] if man and man.loop else []
    package = _package(om_root, model, runtime, parts)
    report.checks = [package]
    if kind not in pk.CHECKED_KINDS:
        report.checks.append(Check(f"kind {model}", SKIP, "not checked: kind unknown (" + _unknown_why(folder) + ")"))
    elif package.status != PASS or ais.status != PASS:
        why = "no package" if package.status != PASS else "no ais_bench"
        report.checks.append(Check(f"{kind} {model}", SKIP, f"not run: {why}"))
    elif kind == "table":
        report.checks += _table_checks(Path(om_root), model, device_id, runtime, acl, tmp)  # type: ignore[arg-type]
    else:
        report.checks += _image_checks(Path(om_root), model, kind, device_id, runtime, acl, tmp)  # type: ignore[arg-type]
    return report


def _unknown_why(folder: Path) -> str:
    from . import package_kinds as pk

    post = pk.read_yml(folder).get("PostProcess")
    name = post.get("name") if isinstance(post, dict) else None
    return (
        f"inference.yml PostProcess {name!r}" if name else "no PostProcess in inference.yml and no loop in the manifest"
    )


def package_names(om_root: Optional[Path], models: Optional[Sequence[str]] = None) -> List[str]:
    """The packages to check: ``models`` when given, else every subfolder of ``om_root`` holding a package (an
    ``inference.om.json`` or ``inference.om``), else the acceptance set :data:`MODELS`."""
    if models:
        return list(models)
    if om_root is None or not Path(om_root).is_dir():
        return list(MODELS)
    found = sorted(
        p.name
        for p in Path(om_root).iterdir()
        if p.is_dir() and any((p / f).is_file() for f in ("inference.om.json", "inference.om"))
    )
    return found or list(MODELS)


def check_om_root(om_root: Optional[Path]) -> None:
    """Refuse an OM root that is not a folder (every package check would only say its files are missing)."""
    if om_root is None or Path(om_root).is_dir():
        return
    what = "is a file, not a folder" if Path(om_root).exists() else "does not exist"
    raise ConfigError(f"the OM root {om_root} {what}: {LAYOUT}")


def run_selftest(
    om_root: Optional[Path] = None,
    device_id: int = 0,
    runtime: str = "ais_bench",
    acl: Any = None,
    models: Optional[Sequence[str]] = None,
) -> SelftestReport:
    """Every check, in order; a check that cannot run says why (skip) and the report is then not ok. An
    ``om_root`` that is no folder raises :class:`ConfigError`.

    ``runtime`` ``ais_bench`` (the device) or ``reference`` (the CPU: the same checks against the packages, with
    :class:`~paddlex_npu.run.reference_acl.ReferenceAcl` standing in for pyACL). ``acl``: the pyACL module to use
    (default: ``import acl`` on the device). ``models``: the package folders to check (default: every package
    under ``om_root``, see :func:`package_names`); each is checked as its kind says."""
    import tempfile

    if runtime not in RUNTIMES:
        raise ConfigError(f"selftest --runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    check_om_root(om_root)
    report = SelftestReport(machine=_machine(runtime))
    if runtime == "reference":
        from ..run.reference_acl import ReferenceAcl

        ais = Check("runtime", PASS, "CPU reference runtime (ONNX Runtime on each package's inference.onnx)")
        why = "pyACL calls answered from each package's recorded ATC command and ONNX graph (run/reference_acl.py)"
        acl_check = Check("pyACL", PASS, why)
        acl = acl or ReferenceAcl()
    else:
        ais, (acl_check, acl) = _ais_bench(), _pyacl(acl)
    if acl is not None and hasattr(acl, "get_soc_name"):
        report.machine["soc_name"] = acl.get_soc_name() or None
    report.checks += [ais, acl_check]
    with tempfile.TemporaryDirectory(prefix="paddlex-npu-selftest-") as tmp:  # the rendered table and page
        for model in package_names(om_root, models):
            report.add(_package_report(om_root, model, device_id, runtime, ais, acl, Path(tmp)))
    return report


def _machine(runtime: str) -> Dict[str, Any]:
    return {
        "paddlex_npu": __version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "runtime": runtime,
        "ASCEND_RT_VISIBLE_DEVICES": os.environ.get(VISIBLE_ENV),
    }
