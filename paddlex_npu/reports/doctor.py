"""``paddlex-npu doctor``: check what the NPU route needs on this machine and say how to fix what is missing.

Each check is ``✓``, ``x`` (required and failing) or ``!`` (optional / advice) with a fix; the command exits 1
when a required part is missing, so a machine without an NPU reports what it lacks and fails.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Callable, List, Optional

from .checks import FAIL, OK, WARN, Check


def _cann_env() -> Check:
    home = os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME")
    libs = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if "Ascend" in p or "ascend" in p]
    if home and libs:
        return Check("CANN environment", OK, f"ASCEND_HOME_PATH={home}; {len(libs)} Ascend library paths")
    installed = [
        p
        for p in ("/usr/local/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/cann/set_env.sh")
        if os.path.isfile(p)
    ]
    return Check(
        "CANN environment",
        FAIL,
        "ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME and Ascend LD_LIBRARY_PATH are not set",
        f"source {installed[0]}"
        if installed
        else "install CANN (toolkit matching your driver), then `source /usr/local/Ascend/ascend-toolkit/set_env.sh`",
    )


def _npu_smi() -> Check:
    """The chips CANN can use, from ``npu-smi info -m`` (Chip Logic IDs: what device ids count; ``info -l`` lists
    cards, and a 300I Duo card holds two chips), and what ``ASCEND_RT_VISIBLE_DEVICES`` leaves visible."""
    from ..run.device_ids import VISIBLE_ENV, parse_npu_smi_chips, visible_devices
    from .container import container_kind, npu_smi_ids_in_container

    exe = shutil.which("npu-smi")
    if not exe:
        return Check(
            "npu-smi",
            FAIL,
            "npu-smi is not on PATH (no Ascend driver, or not on this PATH)",
            "install the Ascend driver and firmware; npu-smi is in /usr/local/sbin or /usr/local/bin",
        )
    try:
        out = subprocess.run([exe, "info", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("npu-smi", FAIL, f"npu-smi failed: {exc}", "check the driver with `npu-smi info`")
    chips = parse_npu_smi_chips(out)
    if not chips:
        return Check("npu-smi", FAIL, "npu-smi lists no NPU chip", "check the driver and the container's device mounts")
    names = sorted({c.name for c in chips})
    detail = (
        f"{len(chips)} chip(s) on {len({c.npu_id for c in chips})} card(s), Chip Logic IDs "
        f"{', '.join(str(c.logic_id) for c in chips)} ({', '.join(names)}; --soc-version {chips[0].soc_version})"
    )
    visible = visible_devices()
    if visible is None:
        return Check("npu-smi", OK, detail + f"; device ids 0..{len(chips) - 1} ({VISIBLE_ENV} not set)")
    unknown = [v for v in visible if not v.isdigit() or int(v) not in {c.logic_id for c in chips}]
    detail += f"; {VISIBLE_ENV}={','.join(visible)}: device ids 0..{len(visible) - 1} are those chips in that order"
    if unknown and container_kind() is not None:
        return npu_smi_ids_in_container(detail, unknown)
    if unknown:
        return Check(
            "npu-smi",
            FAIL,
            detail + f", but {', '.join(unknown)} is no Chip Logic ID here",
            f"set {VISIBLE_ENV} to Chip Logic IDs of `npu-smi info -m`, or unset it",
        )
    return Check("npu-smi", OK, detail)


def _pyacl() -> Check:
    """pyACL (``import acl``): the selftest's manifest checks and the chip check at load use it."""
    try:
        import acl  # type: ignore[import-not-found]  # noqa: F401
    except ImportError as exc:
        return Check(
            "pyACL",
            FAIL,
            f"`import acl` fails ({exc})",
            "source CANN's set_env.sh (it puts pyACL on PYTHONPATH: .../python/site-packages)",
        )
    return Check("pyACL", OK, "acl importable")


def _shadowing() -> Optional[Check]:
    try:
        version = importlib.metadata.version("ais_bench_benchmark")
    except importlib.metadata.PackageNotFoundError:
        return None
    return Check(
        "ais_bench name clash",
        FAIL,
        f"ais_bench_benchmark {version} is installed: it ships another top-level `ais_bench` package",
        "`pip uninstall ais_bench_benchmark`, then reinstall Ascend's ais_bench wheel",
    )


def _ais_bench() -> Check:
    from ..run import ais

    try:
        cls = ais.load_session_class()
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its fix
        return Check("ais_bench", FAIL, str(exc).split(":")[0], ais.INSTALL_HINT)
    feats = ais.features(cls)
    have = ", ".join(k for k, v in feats.items() if v) or "none"
    missing = [k for k, v in feats.items() if not v]
    detail = f"InferSession importable; features: {have}" + (f"; missing: {', '.join(missing)}" if missing else "")
    return Check(
        "ais_bench",
        OK if "set_context" in have else WARN,
        detail,
        "" if not missing else "a newer ais_bench (2024+) adds set_context/free_resource",
    )


def _aclruntime() -> Check:
    if importlib.util.find_spec("aclruntime") is None:
        return Check(
            "aclruntime",
            FAIL,
            "aclruntime is not importable",
            "install Ascend's aclruntime wheel "
            "(aclruntime-0.0.2-cp3XX-...-linux_<arch>.whl) built for this Python and CANN",
        )
    return Check("aclruntime", OK, "importable")


def _paddlex() -> Check:
    from ..errors import UnsupportedPaddlexError
    from ..paddlex.patcher import paddlex_version, select_adapter, unsupported_fix
    from ..paddlex.versions import SUPPORTED_TEXT

    version = paddlex_version()
    if version is None:
        return Check("PaddleX", FAIL, "not installed", "pip install paddlex==3.7.2")
    try:
        adapter = select_adapter(version)
    except UnsupportedPaddlexError:
        return Check("PaddleX", FAIL, f"{version} is outside {SUPPORTED_TEXT}", unsupported_fix(version))
    from .support_table import row_for

    row = row_for(version)
    tested = f"; tested: {row.paddlex_tested}" if row else ""
    return Check("PaddleX", OK, f"{version} ({adapter} adapter{tested})")


def _paddleocr() -> Optional[Check]:
    """PaddleOCR, when installed, is the one for this PaddleX (docs/compatibility.md's table)."""
    from ..paddlex.patcher import paddlex_version
    from .support_table import paddleocr_check

    try:
        version = importlib.metadata.version("paddleocr")
    except importlib.metadata.PackageNotFoundError:
        return None
    paddlex = paddlex_version()
    if paddlex is None:
        return Check(
            "PaddleOCR", WARN, f"{version}, without PaddleX", "pip install paddleocr (it brings PaddleX)", False
        )
    ok, detail = paddleocr_check(paddlex, version)
    return Check("PaddleOCR", OK if ok else WARN, detail, "" if ok else detail.split(": ", 1)[1], required=False)


def _paddle_npu() -> Check:
    if importlib.util.find_spec("paddle_custom_device") is None:
        return Check(
            "Paddle NPU custom device",
            WARN,
            "paddle-custom-npu is not installed: Paddle Inference cannot use the NPU (not needed for the OM route)",
            "only for Paddle-on-NPU: install paddle-custom-npu",
            required=False,
        )
    return Check("Paddle NPU custom device", OK, "paddle_custom_device importable", required=False)


def _python() -> Check:
    v = sys.version_info
    if (3, 7) <= (v.major, v.minor) <= (3, 12):
        note = "; msit's installer refuses Python > 3.11" if v.minor == 12 else ""
        return Check("Python", OK, f"{v.major}.{v.minor}: aclruntime wheels exist for cp37-cp312{note}")
    return Check(
        "Python",
        FAIL,
        f"{v.major}.{v.minor}: no aclruntime wheels for it (cp37-cp312)",
        "use Python 3.8-3.11 (3.10 matches PaddleX's own NPU notes)",
    )


def _optional(name: str, module: str, why: str, fix: str) -> Check:
    ok = importlib.util.find_spec(module) is not None
    return Check(name, OK if ok else WARN, why if ok else f"missing: {why}", "" if ok else fix, required=False)


def run_checks() -> List[Check]:
    from .container import container_check

    checks: List[Callable[[], Optional[Check]]] = [
        container_check,
        _cann_env,
        _npu_smi,
        _pyacl,
        _shadowing,
        _ais_bench,
        _aclruntime,
        _paddlex,
        _paddleocr,
        _paddle_npu,
        _python,
    ]
    out = [c for c in (f() for f in checks) if c is not None]
    out.append(
        _optional(
            "onnxruntime",
            "onnxruntime",
            "the CPU reference runtime (PADDLEX_NPU_RUNTIME=reference)",
            "pip install onnxruntime",
        )
    )
    atc = shutil.which("atc")
    out.append(
        Check(
            "atc",
            OK if atc else WARN,
            atc or "not on PATH: paddlex-npu convert writes atc.sh instead",
            "" if atc else "source CANN's set_env.sh to convert ONNX to OM here",
            required=False,
        )
    )
    return out


def missing_required(checks: List[Check]) -> List[str]:
    """Names of the required checks that failed (empty: the NPU route can run here)."""
    return [c.name for c in checks if c.required and c.status == FAIL]
