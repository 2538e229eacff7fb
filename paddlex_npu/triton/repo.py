"""``paddlex-npu triton-repo``: a Triton model repository whose Python-backend models run a PaddleX OCR pipeline
(``ocr``) and its text recognition model alone (``text_recognition``) on the NPU route; and the command that
starts the real ``tritonserver`` of the ``nvidia-pytriton`` wheel on it.

Layout (Triton's): ``OUT/<model>/config.pbtxt`` (dynamic batching, one instance group ``npu<ID>`` of ``instances``
per device, ``version_policy``, ``model_warmup``), ``OUT/<model>/warmup/`` (the warm-up request),
``OUT/<model>/<version>/`` (``model.py`` + the pipeline or model spec of that version). Writing again into the
same ``OUT`` adds the next version beside the ones serving; with ``--model-control-mode=poll`` Triton loads it
and retires the old one as ``version_policy`` says.

How Triton's Python backend finds Python: the stub (``triton_python_backend_stub``, built per Python minor
version and shipped by nvidia-pytriton under ``pytriton/tritonserver/python_backend_stubs/<X.Y>/``) embeds
``libpython<X.Y>.so`` and, like any embedded CPython, derives ``sys.prefix`` from the first ``python3`` on
``PATH``: with the virtual environment's ``bin`` first on ``PATH`` it reads that venv's ``pyvenv.cfg`` and its
``site-packages``, so ``model.py`` imports PaddleX and paddlex-npu from the venv (no ``EXECUTION_ENV_PATH``
archive needed). ``libpython`` is found through ``LD_LIBRARY_PATH`` (the interpreter's ``LIBDIR`` first), the
server's own libraries in ``nvidia_pytriton.libs``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import struct
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import yaml

from ..build.export_env import cache_root
from ..errors import ConfigError
from ..om.manifest import MANIFEST_NAME, load
from ..serve.fetch import UrlPolicy, url_parameters
from ..serve.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS
from ..serve.settings import DEFAULT_REQUEST_TIMEOUT

OCR_MODEL, REC_MODEL = "ocr", "text_recognition"
_MODEL_PY = '''"""Written by paddlex-npu triton-repo: {what} on the NPU route (paddlex_npu.triton.model)."""

from paddlex_npu.triton.model import {cls} as TritonPythonModel  # noqa: F401
'''


@dataclass
class TritonOptions:
    devices: Sequence[int] = (0,)
    instances: int = 1  # model instances (processes) per device
    max_queue_delay_us: int = 2000
    dynamic_batching: bool = True
    # the dynamic batcher's queue bound: beyond max_queue_size requests waiting, or after queue_timeout_us in the
    # queue, Triton refuses at once (REJECT) instead of letting latency grow without limit
    max_queue_size: int = 64
    queue_timeout_us: int = 10_000_000
    ocr_max_batch: int = 4
    rec_max_batch: Optional[int] = None  # default: rec_batch_limit() of the OM
    keep_versions: int = 1
    runtime: Optional[str] = None  # backend_config runtime for every instance (e.g. "reference")
    warmup: bool = True
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # as paddlex-npu serve
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    urls: UrlPolicy = UrlPolicy(option="triton-repo --allow-url-host")  # URL inputs: none unless hosts are allowed
    pdf_timeout: float = DEFAULT_REQUEST_TIMEOUT  # seconds a PDF's rendering (in a child process) may take; 0: none


@dataclass
class WrittenModel:
    name: str
    version: int
    folder: Path
    max_batch_size: int
    preferred_batch_sizes: List[int] = field(default_factory=list)


@dataclass
class TritonRepo:
    root: Path
    models: List[WrittenModel]
    files: List[Path]


def _model_dirs(config: Dict[str, Any], base: Path) -> None:
    """Make every relative ``model_dir`` absolute (against the working directory, as PaddleX reads them) and
    check it exists."""
    for key, sub in (config.get("SubModules") or {}).items():
        if isinstance(sub, dict) and sub.get("model_dir"):
            path = Path(sub["model_dir"])
            path = path if path.is_absolute() else (base / path)
            if not path.is_dir():
                raise ConfigError(f"SubModules.{key}.model_dir {path} is not a folder: give the OM package folder")
            sub["model_dir"] = str(path.resolve())
    for pipe in (config.get("SubPipelines") or {}).values():
        if isinstance(pipe, dict):
            _model_dirs(pipe, base)


def _rec_module(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    for sub in (config.get("SubModules") or {}).values():
        if isinstance(sub, dict) and sub.get("module_name") == "text_recognition":
            return sub
    return None


# The recognition model's batch on a dymshape OM (any batch): where the device's time per line stops falling
# (simulated cost model: 0.65 ms at 1, 0.26 ms at 6, 0.21 ms at 16, 0.19 ms at 32 per line) and a batch is
# still a few milliseconds of device time.
DYMSHAPE_REC_MAX_BATCH = 16


def rec_batch_limit(model_dir: Union[str, Path], yaml_batch_size: Optional[int]) -> int:
    """``max_batch_size`` of the recognition model: its OM's largest batch gear; on a dymshape OM the top of its
    batch range, capped at :data:`DYMSHAPE_REC_MAX_BATCH` (or that when unbounded); else the YAML's batch_size."""
    gears = batch_gears(model_dir)
    if gears:
        return max(gears)
    path = Path(model_dir) / MANIFEST_NAME
    if path.is_file():
        manifest = load(path)
        if manifest.mode == "dymshape" and manifest.inputs:
            lo, hi = manifest.input_ranges()[manifest.inputs[0].name][0]
            return max(lo, DYMSHAPE_REC_MAX_BATCH if hi == -1 else min(hi, DYMSHAPE_REC_MAX_BATCH))
    return int(yaml_batch_size or 8)


def batch_gears(model_dir: Union[str, Path]) -> List[int]:
    """The batch sizes an OM was built for (dim 0 of its first input across its gears), from its manifest."""
    path = Path(model_dir) / MANIFEST_NAME
    if not path.is_file():
        return []
    manifest = load(path)
    if not manifest.gears or not manifest.inputs or manifest.inputs[0].shape[:1] != [-1]:
        return []
    return sorted({shape[0][0] for shape in manifest.gear_shapes()})


def _pbtxt(
    name: str, max_batch: int, preferred: Sequence[int], options: TritonOptions, warmup_file: Optional[str]
) -> str:
    lines = [
        f'name: "{name}"',
        'backend: "python"',
        f"max_batch_size: {max_batch}",
        'input [{ name: "input" data_type: TYPE_STRING dims: [ 1 ] }]',
        'output [{ name: "output" data_type: TYPE_STRING dims: [ 1 ] }]',
    ]
    if options.dynamic_batching and max_batch > 1:
        pref = [b for b in preferred if 1 < b <= max_batch]
        body = [f"  max_queue_delay_microseconds: {options.max_queue_delay_us}"]
        if pref:
            body.append(f"  preferred_batch_size: [ {', '.join(map(str, pref))} ]")
        body.append(
            f"  default_queue_policy {{ max_queue_size: {options.max_queue_size} timeout_action: REJECT "
            f"default_timeout_microseconds: {options.queue_timeout_us} allow_timeout_override: false }}"
        )
        lines += ["dynamic_batching {", *body, "}"]
    groups = [f'  {{ name: "npu{d}" count: {options.instances} kind: KIND_CPU }}' for d in options.devices]
    lines += ["instance_group [", ",\n".join(groups), "]"]
    lines.append(f"version_policy: {{ latest: {{ num_versions: {options.keep_versions} }} }}")
    if options.runtime:
        lines.append(f'parameters {{ key: "runtime" value: {{ string_value: "{options.runtime}" }} }}')
    for key in ("max_image_pixels", "max_request_pixels"):  # checked before decoding, as in paddlex-npu serve
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{getattr(options, key)}" }} }}')
    lines.append(f'parameters {{ key: "pdf_timeout_s" value: {{ string_value: "{options.pdf_timeout:g}" }} }}')
    for key, value in url_parameters(options.urls).items():  # serve.fetch's policy, read by the model
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    if warmup_file:
        lines += [
            "model_warmup [{",
            '  name: "warmup" batch_size: 1',
            '  inputs { key: "input" value: { data_type: TYPE_STRING dims: [ 1 ] '
            f'input_data_file: "{warmup_file}" }} }}',
            "}]",
        ]
    return "\n".join(lines) + "\n"


def _warmup_png(width: int, height: int) -> bytes:
    """A white image with dark bars (text-like strokes), PNG."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    for x in range(8, width - 16, 24):
        draw.rectangle([x, height // 4, x + 12, 3 * height // 4], fill="black")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _string_tensor_file(payload: Dict[str, Any]) -> bytes:
    """Triton's TYPE_STRING warm-up data: each element as a 4-byte little-endian length and the bytes."""
    data = json.dumps(payload).encode("utf-8")
    return struct.pack("<I", len(data)) + data


def _next_version(folder: Path) -> int:
    versions = [int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()] if folder.is_dir() else []
    return max(versions, default=0) + 1


def _write_model(
    root: Path,
    name: str,
    cls: str,
    what: str,
    spec_name: str,
    spec: Dict[str, Any],
    max_batch: int,
    preferred: Sequence[int],
    warmup_payload: Optional[Dict[str, Any]],
    options: TritonOptions,
    files: List[Path],
) -> WrittenModel:
    model = root / name
    version = _next_version(model)
    tmp = model / f".{version}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "model.py").write_text(_MODEL_PY.format(what=what, cls=cls), encoding="utf-8")
    (tmp / spec_name).write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    warmup_file = None
    if options.warmup and warmup_payload is not None:
        (model / "warmup").mkdir(exist_ok=True)
        warmup_file = "request"
        (model / "warmup" / warmup_file).write_bytes(_string_tensor_file(warmup_payload))
        files.append(model / "warmup" / warmup_file)
    config = model / "config.pbtxt"
    config.write_text(_pbtxt(name, max_batch, preferred, options, warmup_file), encoding="utf-8")
    tmp.rename(model / str(version))  # the version appears complete, for a polling server
    files += [config, model / str(version) / "model.py", model / str(version) / spec_name]
    return WrittenModel(name, version, model / str(version), max_batch, [b for b in preferred if 1 < b <= max_batch])


def _check_options(options: TritonOptions) -> None:
    if options.instances < 1:
        raise ConfigError(f"instances per device must be >= 1, got {options.instances}")
    if options.max_queue_delay_us < 0:
        raise ConfigError(f"max queue delay must be >= 0 microseconds, got {options.max_queue_delay_us}")
    if options.keep_versions < 1:
        raise ConfigError(f"versions to keep must be >= 1, got {options.keep_versions}")
    if options.max_queue_size < 1 or options.queue_timeout_us < 1:
        raise ConfigError(
            f"--max-queue-size {options.max_queue_size} / --queue-timeout-ms {options.queue_timeout_us // 1000}: "
            "give 1 or more (the queue of the dynamic batcher is bounded)"
        )
    if not options.pdf_timeout >= 0:
        raise ConfigError(f"--pdf-timeout must be >= 0 seconds (0: none), got {options.pdf_timeout}")
    for key in ("max_image_pixels", "max_request_pixels"):
        if getattr(options, key) < 1:
            raise ConfigError(f"--{key.replace('_', '-')} must be >= 1, got {getattr(options, key)}")


def _load_ocr_config(path: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(the OCR pipeline config with model_dirs resolved, its text_recognition SubModule)."""
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"pipeline config {path}: {exc}") from exc
    if not isinstance(config, dict) or config.get("pipeline_name") != "OCR":
        raise ConfigError(
            f"pipeline config {path}: triton-repo serves PaddleX's OCR pipeline (pipeline_name: OCR); serve a "
            "document pipeline (table_recognition, layout_parsing) with `paddlex-npu serve`, which answers PaddleX's "
            "own endpoint for it"
        )
    _model_dirs(config, Path.cwd())
    rec = _rec_module(config)
    if rec is None or not rec.get("model_dir"):
        raise ConfigError(f"pipeline config {path}: no text_recognition SubModule with a model_dir")
    return config, rec


def build_triton_repo(
    pipeline_yaml: Union[str, Path], out_dir: Union[str, Path], options: Optional[TritonOptions] = None
) -> TritonRepo:
    """Write (or add a version to) the model repository in ``out_dir``; returns what was written."""
    import base64

    options = options or TritonOptions()
    _check_options(options)
    config, rec = _load_ocr_config(Path(pipeline_yaml))

    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    files: List[Path] = []
    page = base64.b64encode(_warmup_png(320, 96)).decode()
    line = base64.b64encode(_warmup_png(200, 48)).decode()
    ocr = _write_model(
        root,
        OCR_MODEL,
        "OCRModel",
        "PaddleX's OCR pipeline",
        "pipeline.yaml",
        config,
        max(1, options.ocr_max_batch),
        [],
        {"file": page, "fileType": 1, "visualize": False},
        options,
        files,
    )
    gears = batch_gears(rec["model_dir"])
    rec_batch = options.rec_max_batch or rec_batch_limit(rec["model_dir"], rec.get("batch_size"))
    spec = {
        "model_name": rec.get("model_name"),
        "model_dir": rec["model_dir"],
        "batch_size": rec_batch,
        "hpi_config": config.get("hpi_config"),
    }
    rec_model = _write_model(
        root,
        REC_MODEL,
        "TextRecognitionModel",
        "the text recognition model",
        "model.yaml",
        spec,
        rec_batch,
        gears,
        {"file": line},
        options,
        files,
    )
    return TritonRepo(root, [ocr, rec_model], files)


# -- the server ---------------------------------------------------------------------------------------------


def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.origin:
        raise ConfigError(
            "tritonserver not found: it comes with the nvidia-pytriton wheel, `pip install 'paddlex-npu[triton]'` "
            "(or `pip install nvidia-pytriton==0.7.0`; Linux x86_64/aarch64, glibc >= 2.35)"
        )
    return Path(spec.origin).parent


def check_repository(repo: Union[str, Path]) -> Path:
    """``repo`` resolved, once it is a folder holding at least one model (``<model>/config.pbtxt``, as
    ``paddlex-npu triton-repo`` writes it): tritonserver would otherwise fail late or serve nothing forever."""
    root = Path(repo)
    fix = f"write one with `paddlex-npu triton-repo PIPELINE.yaml {repo}`"
    if not root.exists():
        raise ConfigError(f"model repository {repo} does not exist: {fix}")
    if not root.is_dir():
        raise ConfigError(f"model repository {repo} is not a folder: give the folder `paddlex-npu triton-repo` wrote")
    if not any(root.glob("*/config.pbtxt")):
        raise ConfigError(f"model repository {repo} holds no model (no <model>/config.pbtxt): {fix}")
    return root.resolve()


def default_workdir() -> Path:
    """Where ``triton-serve`` puts the Python backend unless told: a cache folder per nvidia-pytriton install and
    Python version (``$PADDLEX_NPU_CACHE``, else ``~/.cache/paddlex_npu``, then ``tritonserver/py<X.Y>-<hash>``),
    never inside or beside the repository; servers of the same install share it."""
    pkg = str(_pytriton_dir().resolve())
    tag = f"py{sys.version_info[0]}.{sys.version_info[1]}-{hashlib.sha256(pkg.encode()).hexdigest()[:12]}"
    return cache_root() / "tritonserver" / tag


def _copy_if_changed(src: Path, folder: Path) -> None:
    """``src`` into ``folder``, unless the same file (size and mtime) is there; replaced atomically, so a server
    running the old copy (an executable cannot be written while it runs) keeps it."""
    dest = folder / src.name
    have, want = (dest.stat() if dest.is_file() else None), src.stat()
    if have and (have.st_size, have.st_mtime_ns) == (want.st_size, want.st_mtime_ns):
        return
    tmp = folder / f".{src.name}.{os.getpid()}.tmp"
    shutil.copy2(src, tmp)
    os.replace(tmp, dest)


def tritonserver_command(
    repo: Union[str, Path],
    workdir: Union[str, Path, None] = None,
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    poll_seconds: Optional[int] = None,
    host: str = "0.0.0.0",
    extra: Sequence[str] = (),
) -> Tuple[List[str], Dict[str, str]]:
    """The argv and environment that run nvidia-pytriton's ``tritonserver`` on ``repo`` with this interpreter's
    venv for the Python backend; ``workdir`` (default :func:`default_workdir`) gets the backend folder (the stub
    of this Python version). ``repo`` is checked (:func:`check_repository`) before anything is written."""
    repo = check_repository(repo)
    pkg = _pytriton_dir()
    server = pkg / "tritonserver"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        shipped = sorted(p.name for p in (server / "python_backend_stubs").iterdir())
        raise ConfigError(f"nvidia-pytriton has no Python backend stub for Python {version} (it has {shipped})")
    workdir = Path(workdir or default_workdir()).resolve()
    backend = workdir / "backends" / "python"
    backend.mkdir(parents=True, exist_ok=True)
    for src in (*(server / "backends" / "python").glob("*.*"), stub):
        if src.is_file():
            _copy_if_changed(src, backend)
    libs = [str(pkg.parent / "nvidia_pytriton.libs")]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir and any(Path(libdir).glob("libpython3*.so*")):
        libs.insert(0, libdir)  # this interpreter's own libpython before the system's
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [
        str(server / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={workdir / 'backends'}",
        f"--http-address={host}",
        f"--grpc-address={host}",
        f"--metrics-address={host}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
        "--allow-gpu-metrics=false",
        "--exit-timeout-secs=30",
    ]
    if poll_seconds:
        argv += ["--model-control-mode=poll", f"--repository-poll-secs={poll_seconds}"]
    else:  # every model loaded at start; the model control API lets triton-serve reload one whose stub died
        argv += ["--model-control-mode=explicit", "--load-model=*"]
    return argv + list(extra), env
