"""The export environment: a virtual environment with the paddlepaddle and paddle2onnx that read PIR models
(``inference.json``), kept apart from the main environment, whose paddle2onnx 1.3.1 reads legacy ``.pdmodel``
models only (2.x fails on PP-OCR ``.pdmodel`` files). It is made only on request (``--export-env auto``), at
:func:`default_env_dir`, and the export runs there in a subprocess (:mod:`.p2o_worker`).

Versions: paddlepaddle 3.0.0 + paddle2onnx 2.0.2rc3, the paddle2onnx that PaddleX 3.7.2 pins for its own
``paddle2onnx`` extra. paddle2onnx reads a PIR JSON only as the Paddle that wrote it laid it out: this pair
exports the PP-OCRv4 det, rec and classifier JSON written by paddlepaddle 3.0 (PIR version 1), matching the
legacy ONNX within 1.1e-6, and Paddle 3.0.0 runs that JSON for the check. ``packaging`` is a dependency
paddle2onnx 2.0.2rc3 imports without declaring it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence

from .. import envs
from ..errors import ConfigError, ConvertError
from ..log import logger

PADDLE, P2O = "3.0.0", "2.0.2rc3"
REQUIREMENTS = (f"paddlepaddle=={PADDLE}", f"paddle2onnx=={P2O}", "packaging")  # = setup.cfg's [export] extra
TAG = f"paddle{PADDLE}-p2o{P2O}-py{sys.version_info[0]}{sys.version_info[1]}"
SIZE = "about 1 GB on disk, a 200 MB download; 20-60 s with pip's cache warm"
STAMP = "paddlex-npu-export-env.json"
WORKER = Path(__file__).resolve().with_name("p2o_worker.py")


@dataclass(frozen=True)
class ExportEnv:
    """The Python that runs the export worker, and what to call it in messages."""

    python: Path
    label: str
    versions: str = ""


def cache_root() -> Path:
    """The tools' cache folder: ``$PADDLEX_NPU_CACHE``, else ``~/.cache/paddlex_npu``."""
    return envs.cache_dir()


def default_env_dir() -> Path:
    """Where ``--export-env auto`` keeps the environment, in :func:`cache_root`."""
    return cache_root() / f"export-env-{TAG}"


def _python_of(env_dir: Path) -> Path:
    return env_dir / "bin" / "python"


def _current_env() -> Optional[ExportEnv]:
    """This environment, when it has paddle2onnx 2.x and Paddle (tried before any export environment)."""
    try:
        version = importlib.metadata.version("paddle2onnx")
    except importlib.metadata.PackageNotFoundError:
        return None
    if int(version.split(".")[0]) < 2 or importlib.util.find_spec("paddle") is None:
        return None
    return ExportEnv(Path(sys.executable), "this environment", _versions_in(Path(sys.executable)))


def check_export_env(spec: Optional[str]) -> None:
    """Refuse, before any work, an ``--export-env`` path that is no environment."""
    if spec in (None, "auto"):
        return
    if not _python_of(Path(spec)).exists():
        raise ConfigError(
            f"--export-env {spec}: no {_python_of(Path(spec))} there. Give 'auto' (paddlex-npu makes one at "
            f"{default_env_dir()}, {SIZE}) or a virtual environment with {' '.join(REQUIREMENTS)}"
        )


def resolve(spec: Optional[str], notes: Optional[list] = None) -> Optional[ExportEnv]:
    """The environment to export PIR models in: ``None`` (this one, if it has paddle2onnx 2.x), ``"auto"``
    (:func:`default_env_dir`, made now if missing) or the path of a virtual environment."""
    if spec is None:
        return _current_env()
    check_export_env(spec)
    env_dir = default_env_dir() if spec == "auto" else Path(spec)
    if spec == "auto" and not _is_ready(env_dir):
        create(env_dir)
        if notes is not None:
            notes.append(f"created the export environment {env_dir} ({_du(env_dir)}): {' '.join(REQUIREMENTS)}")
    return ExportEnv(_python_of(env_dir), f"the export environment {env_dir}", _versions_in(_python_of(env_dir)))


_VERSIONS = (
    "import importlib.metadata as m\n"
    "for d in ('paddlepaddle', 'paddle2onnx'):\n"
    "    try: print(d, m.version(d))\n"
    "    except m.PackageNotFoundError: print(d, 'missing')"
)


def _versions_in(python: Path) -> str:
    """``paddlepaddle X + paddle2onnx Y`` of an environment; refuses one without them."""
    out = subprocess.run([str(python), "-c", _VERSIONS], capture_output=True, text=True, timeout=120)
    found = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    if out.returncode != 0 or "missing" in found.values() or len(found) != 2:
        raise ConfigError(
            f"{python} has no paddlepaddle and paddle2onnx ({out.stdout.strip() or out.stderr.strip()[-300:]}): "
            f"`{python} -m pip install {' '.join(REQUIREMENTS)}`, or use --export-env auto"
        )
    return " + ".join(f"{d} {v}" for d, v in found.items())


def _is_ready(env_dir: Path) -> bool:
    stamp = env_dir / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()).get("requirements") == list(REQUIREMENTS)


def _du(path: Path) -> str:
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return f"{size / 2**20:.0f} MB"


def _run(args: Sequence[str], what: str, timeout: float) -> None:
    try:
        out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ConvertError(f"{what} took over {timeout:.0f} s: check the network to the package index") from exc
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-12:])
        raise ConvertError(f"{what} failed (exit {out.returncode}); its last lines:\n{tail}")


def create(env_dir: Path, timeout: float = 1800) -> Path:
    """Make the export environment at ``env_dir`` (replacing a half-made one); returns its Python."""
    logger.info("creating the export environment %s (%s): %s", env_dir, SIZE, " ".join(REQUIREMENTS))
    shutil.rmtree(env_dir, ignore_errors=True)
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    _run([base, "-m", "venv", str(env_dir)], f"creating the virtual environment {env_dir}", 300)
    pip = [str(_python_of(env_dir)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    fix = f"installing {' '.join(REQUIREMENTS)} into {env_dir} (retry with --export-env auto)"
    _run([*pip, *REQUIREMENTS], fix, timeout)
    (env_dir / STAMP).write_text(json.dumps({"requirements": list(REQUIREMENTS)}))
    logger.info("export environment ready: %s (%s)", env_dir, _du(env_dir))
    return _python_of(env_dir)


def run_worker(env: ExportEnv, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run :mod:`.p2o_worker` with the environment's Python (its output captured, nothing printed)."""
    environ: Dict[str, str] = {**os.environ, "GLOG_minloglevel": "2", "PYTHONNOUSERSITE": "1"}
    environ.pop("PYTHONPATH", None)  # the worker needs nothing of this environment
    try:
        return subprocess.run(
            [str(env.python), str(WORKER), *args], capture_output=True, text=True, timeout=timeout, env=environ
        )
    except subprocess.TimeoutExpired as exc:
        raise ConvertError(f"the export worker ({args[0]}) took over {timeout:.0f} s in {env.label}") from exc
