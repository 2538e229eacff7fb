"""``paddlex-npu selftest``: the hardware acceptance run, one pass/fail/skip per check, as a report object.

On an Ascend machine, for the bundled PP-OCRv4 models (det, rec) found as OM packages under ``om_root``
(``paddlex-npu assets`` builds their ONNX folders, ``paddlex-npu convert`` their OMs): each runs through the route
on ais_bench and on the CPU reference runtime with the same synthetic text inputs (rec: greedy CTC texts equal;
det: the DB maps thresholded at 0.3 agree on at least 99% of pixels, i.e. the same boxes within a few pixels),
and its manifest is compared with what ACL reports about the OM through pyACL (batch / H-W / dims gears;
dymshape ranges where pyACL has ``get_input_dims_range``). Without a device every check says why it could not
run, and the report is not ok. Nothing is printed here (the CLI prints).
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..errors import ConfigError
from ..version import __version__

PASS, FAIL, SKIP = "pass", "fail", "skip"
MODELS = ("PP-OCRv4_mobile_det", "PP-OCRv4_mobile_rec")
TASKS = {"PP-OCRv4_mobile_det": "TextDetPredictor", "PP-OCRv4_mobile_rec": "TextRecPredictor"}
LAYOUT = (
    f"give a folder holding one OM package per model, in subfolders named {' and '.join(MODELS)} "
    "(`paddlex-npu convert ASSETS/om/MODEL -o ROOT/MODEL --soc-version SOC`; `paddlex-npu assets` prints ASSETS)"
)
DET_AGREEMENT = 0.99  # share of pixels whose DB map (> 0.3) agrees between the device and the reference


@dataclass
class Check:
    name: str
    status: str
    detail: str
    data: Dict[str, Any] = field(default_factory=dict)


@dataclass
class SelftestReport:
    checks: List[Check] = field(default_factory=list)
    machine: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check passed (a skipped check is not a pass: it was not verified)."""
        return bool(self.checks) and all(c.status == PASS for c in self.checks)

    def to_json(self) -> str:
        out = {"schema": "paddlex-npu/selftest/1", "ok": self.ok, "machine": self.machine}
        out["checks"] = [asdict(c) for c in self.checks]
        return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def _ais_bench() -> Check:
    from ..errors import RuntimeUnavailableError
    from ..run.ais import load_session_class

    try:
        load_session_class()
    except RuntimeUnavailableError as exc:
        return Check("ais_bench", FAIL, f"cannot run anything on an NPU here: {exc}")
    return Check("ais_bench", PASS, "ais_bench.infer.interface.InferSession importable")


def _pyacl() -> Check:
    try:
        import acl  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return Check(
            "pyACL", SKIP, "`import acl` fails (source CANN's set_env.sh): manifests cannot be checked against ACL"
        )
    return Check("pyACL", PASS, "acl importable")


def _package(om_root: Optional[Path], model: str) -> Check:
    name = f"package {model}"
    if om_root is None:
        return Check(name, SKIP, "no --om-root: build packages with `paddlex-npu assets` + `paddlex-npu convert`")
    folder = Path(om_root) / model
    if not folder.is_dir():
        return Check(name, FAIL, f"{om_root} has no {model} folder: {LAYOUT}")
    missing = [f for f in ("inference.om", "inference.onnx", "inference.yml") if not (folder / f).is_file()]
    if missing:
        return Check(name, FAIL, f"{folder} lacks {', '.join(missing)}: `paddlex-npu convert` builds it (ATC on PATH)")
    return Check(name, PASS, str(folder))


def _inputs(model: str) -> List[np.ndarray]:
    """A rendered text line (PIL's built-in font), normalised as PaddleX's preprocessing does."""
    from PIL import Image, ImageDraw

    h, w = (160, 640) if model.endswith("det") else (48, 320)
    img = Image.new("RGB", (w // 4, h // 4), "white")
    ImageDraw.Draw(img).text((4, h // 16), "NPU 2024", fill="black")
    x = np.asarray(img.resize((w, h)), np.float32) / 255
    if model.endswith("det"):
        x = (x - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    else:
        x = (x - 0.5) / 0.5
    return [x.transpose(2, 0, 1)[None].astype(np.float32)]


def _compare(model: str, device: np.ndarray, reference: np.ndarray) -> Check:
    name = f"route {model}: ais_bench vs reference"
    if device.shape != reference.shape:
        return Check(name, FAIL, f"output shapes differ: {device.shape} vs {reference.shape}")
    diff = float(np.abs(device - reference).max())
    if model.endswith("det"):
        agree = float(np.mean((device > 0.3) == (reference > 0.3)))
        status = PASS if agree >= DET_AGREEMENT else FAIL
        return Check(name, status, f"DB maps agree on {agree:.4f} of pixels (>= {DET_AGREEMENT})", {"max_abs": diff})
    same = device.argmax(-1).tolist() == reference.argmax(-1).tolist()
    detail = "greedy CTC texts equal" if same else "greedy CTC texts differ"
    return Check(name, PASS if same else FAIL, detail, {"max_abs": diff})


def _route(om_root: Path, model: str, device_id: int) -> Check:
    from ..config import OMBackendConfig
    from ..run.runner import build_om_runner

    outs = {}
    for runtime in ("ais_bench", "reference"):
        runner = build_om_runner(
            om_root / model, runtime=runtime, device_id=device_id, config=OMBackendConfig(), task=TASKS[model]
        )
        try:
            outs[runtime] = runner(_inputs(model))[0]
        finally:
            runner.close()
    return _compare(model, np.asarray(outs["ais_bench"]), np.asarray(outs["reference"]))


def _acl_gears(acl: Any, desc: Any, mode: str) -> Any:
    """What ACL reports for ``mode`` (pyACL names; not verified on a device here)."""
    if mode == "dymbatch":
        info, ret = acl.mdl.get_dynamic_batch(desc)
        return ret, [[b] for b in info["batch"]]
    if mode == "dymhw":
        info, ret = acl.mdl.get_dynamic_hw(desc, -1)
        return ret, [list(hw) for hw in info["hw"]]
    if mode == "dymdims":
        count, ret = acl.mdl.get_input_dynamic_gear_count(desc, -1)
        dims, ret = acl.mdl.get_input_dynamic_dims(desc, -1, count)
        return ret, [list(d["dims"]) for d in dims]
    ranges = [acl.mdl.get_input_dims_range(desc, i) for i in range(acl.mdl.get_num_inputs(desc))]
    return 0, ranges


def _manifest_vs_acl(om_root: Path, model: str, device_id: int) -> Check:
    import acl  # type: ignore[import-not-found]

    from ..om import manifest as mf

    name = f"manifest {model} vs ACL"
    man = mf.load(om_root / model / mf.MANIFEST_NAME)
    acl.rt.set_device(device_id)
    model_id, ret = acl.mdl.load_from_file(str(om_root / model / "inference.om"))
    if ret != 0:
        return Check(name, FAIL, f"aclmdlLoadFromFile returned {ret}")
    desc = acl.mdl.create_desc()
    try:
        acl.mdl.get_desc(desc, model_id)
        try:
            ret, reported = _acl_gears(acl, desc, man.mode)
        except AttributeError as exc:
            return Check(name, SKIP, f"this pyACL cannot report {man.mode} ({exc})")
        if man.mode == "dymshape":
            return Check(name, PASS if ret == 0 else FAIL, "ranges reported by ACL", {"acl": repr(reported)})
        same = sorted(map(list, man.gears or [])) == sorted(reported)
        return Check(name, PASS if same else FAIL, f"{man.mode} gears: manifest {man.gears}, ACL {reported}")
    finally:
        acl.mdl.destroy_desc(desc)
        acl.mdl.unload(model_id)


def _guarded(name: str, run: Callable[[], Check]) -> Check:
    try:
        return run()
    except Exception as exc:  # a failing check is reported, the others still run
        return Check(name, FAIL, f"{type(exc).__name__}: {exc}")


def _model_checks(om_root: Optional[Path], model: str, device_id: int, ais: Check, pyacl: Check) -> List[Check]:
    route, versus = f"route {model}: ais_bench vs reference", f"manifest {model} vs ACL"
    package = _package(om_root, model)
    if package.status != PASS or ais.status != PASS:
        why = "no package" if package.status != PASS else "no ais_bench"
        return [package, Check(route, SKIP, f"not run: {why}"), Check(versus, SKIP, f"not run: {why}")]
    root = Path(om_root)  # type: ignore[arg-type]
    checks = [package, _guarded(route, lambda: _route(root, model, device_id))]
    if pyacl.status != PASS:
        return checks + [Check(versus, SKIP, "not run: no pyACL")]
    return checks + [_guarded(versus, lambda: _manifest_vs_acl(root, model, device_id))]


def check_om_root(om_root: Optional[Path]) -> None:
    """Refuse an OM root that is not a folder (every package check would only say its files are missing)."""
    if om_root is None or Path(om_root).is_dir():
        return
    what = "is a file, not a folder" if Path(om_root).exists() else "does not exist"
    raise ConfigError(f"the OM root {om_root} {what}: {LAYOUT}")


def run_selftest(om_root: Optional[Path] = None, device_id: int = 0) -> SelftestReport:
    """Every check, in order; a check that cannot run says why (skip) and the report is then not ok. An
    ``om_root`` that is no folder raises :class:`ConfigError`."""
    check_om_root(om_root)
    machine = {"paddlex_npu": __version__, "python": platform.python_version(), "machine": platform.machine()}
    report = SelftestReport(machine=machine)
    ais, pyacl = _ais_bench(), _pyacl()
    report.checks += [ais, pyacl]
    for model in MODELS:
        report.checks += _model_checks(om_root, model, device_id, ais, pyacl)
    return report
