"""Batch inference on Ray Data: a corpus through PaddleX pipelines on the NPUs of a Ray cluster.

::

    files (any pyarrow FS) ─► read_binary_files ─► decode: CPU tasks ─► map_batches(PipelineBatch, NPU: 1) ─► rows
                              (Ray lists, reads)    (pixel limits first)  one pipeline per actor, on its chip

- :func:`read_inputs`: Ray's reader lists and reads the files on the nodes (local paths, URIs, or any pyarrow
  file system); the driver reads none;
- :func:`decode_batch` (CPU tasks) checks each file's header against ``serve``'s pixel limits, then turns it into
  BGR arrays as PaddleX reads them (OpenCV for images, PaddleX's own PDF reader for PDF pages);
- :class:`PipelineBatch` (the callable class for ``Dataset.map_batches``) holds one PaddleX pipeline on the NPU
  route, built once per actor on the NPU Ray assigned to it (:mod:`.devices`), and turns each batch into rows:
  ``id, page, texts, scores, boxes, error, npu, node, pid, seconds, result``. An input that fails is a row with
  ``error`` set, never a lost row;
- :func:`ocr` (and :func:`ocr_job`, with its ledger for progress) is the one call for the common case: the plan
  checked against the cluster (:mod:`.plan`), the settings in every task's ``runtime_env``, the (lazy) Dataset of
  rows; :func:`write_rows` has Ray's writers write it to a folder on any file system.

Fault tolerance is Ray Data's own (its defaults, :data:`ACTOR_FAULT_TOLERANCE`): NPU actors restart without
limit (``max_restarts=-1``) and the batches a dead actor held run again (``max_task_retries=-1``); CPU tasks are
retried (``max_retries=-1``) and the blocks a lost node held are rebuilt from lineage. Each input's row is
produced by exactly one successful task. What bounds the retries is the job's :mod:`.ledger`: an input whose
worker died more than ``input_retries`` times becomes an error row. A lost device (an error of category
``device_lost``) ends the actor at once: Ray starts it again, fresh, and runs the batch again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ConfigError
from ..serve.images import DEFAULT_MAX_IMAGE_PIXELS, DEFAULT_MAX_REQUEST_PIXELS, PixelLimits, check_pixels
from .devices import assigned_device_id, assigned_npus
from .ledger import DEFAULT_INPUT_RETRIES, InputGuard, start_ledger
from .plan import Plan, check_plan, chip_of, forwarded_env, thread_env

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
PDF_SUFFIXES = (".pdf",)
# The fault tolerance the NPU actors rely on: Ray Data's defaults for actor pools (Ray 2.60, ActorPoolMapOperator.
# _apply_default_remote_args; tests/ray checks them). Not passed again: Ray 2.60 deprecates extra remote args.
ACTOR_FAULT_TOLERANCE = {"max_restarts": -1, "max_task_retries": -1}
INPUT_COLUMNS = ("image", "bytes", "path")

Inputs = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], Any]


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("page", pa.int64()),
            ("texts", pa.list_(pa.string())),
            ("scores", pa.list_(pa.float64())),
            ("boxes", pa.list_(pa.list_(pa.int64()))),
            ("error", pa.string()),
            ("npu", pa.string()),
            ("node", pa.string()),
            ("pid", pa.int64()),
            ("seconds", pa.float64()),
            ("result", pa.string()),
        ]
    )


# ---- inputs ------------------------------------------------------------------------------------------------


def read_inputs(
    inputs: Inputs,
    filesystem: Any = None,
    task_cpus: float = 1.0,
    runtime_env: Optional[Dict[str, Any]] = None,
) -> Any:
    """A Ray Dataset of ``inputs``: a Dataset as given (columns ``id`` or ``path``, and one of
    ``image``/``bytes``/``path``), or files and folders (local paths, URIs such as ``s3://bucket/corpus``, or paths
    on ``filesystem``, any pyarrow file system) read by Ray's own reader (``read_binary_files``): Ray lists the
    folders (recursively; images and PDFs only) and its read tasks (``task_cpus`` each) read the files on the nodes,
    as rows ``{bytes, path}``. The driver reads no file. A path that is not there is a :class:`ConfigError`."""
    import ray.data

    if isinstance(inputs, ray.data.Dataset):
        return inputs
    paths = [os.fspath(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs))]
    if not paths:
        raise ConfigError("no inputs: give image or PDF files, or folders of them")
    try:
        return ray.data.read_binary_files(
            paths if len(paths) > 1 else paths[0],
            include_paths=True,
            filesystem=filesystem,
            file_extensions=[s.lstrip(".") for s in IMAGE_SUFFIXES + PDF_SUFFIXES],
            num_cpus=task_cpus,
            runtime_env=runtime_env,
        )
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the inputs {', '.join(paths)}: {type(exc).__name__}: {exc} (give files or folders of "
            "images and PDFs that exist, on the file system given, or URIs Ray can list, e.g. s3://bucket/corpus)"
        ) from None


def _ragged(values: List[np.ndarray]) -> np.ndarray:
    """A column of arrays of different shapes (an object array, which Ray Data stores as a ragged tensor)."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def _ids(batch: Dict[str, np.ndarray]) -> List[str]:
    for key in ("id", "path"):
        if key in batch:
            return [str(v) for v in batch[key]]
    raise ConfigError(
        f"the dataset has columns {sorted(batch)}: give an `id` (or `path`) column and one of "
        f"{', '.join(INPUT_COLUMNS)} (e.g. ray.data.read_binary_files(paths, include_paths=True))"
    )


def _decode_one(data: bytes, name: str, limits: Optional[PixelLimits]) -> List[np.ndarray]:
    """The BGR arrays PaddleX reads from one file's bytes: one for an image, one per page for a PDF; the sizes in
    the file's header are checked against ``limits`` first (``serve``'s check: no pixel is decoded for a file
    over them), an ``ImageTooLargeError`` naming the limit and its option."""
    limits = limits or PixelLimits()
    if data[:5] == b"%PDF-":  # PaddleX's own PDF rendering, with the settings its image batch sampler uses
        from ..paddlex.serving import pdf_reader

        check_pixels(data, "PDF", None, limits)
        backend = pdf_reader(limits.max_image_pixels)
        return [np.ascontiguousarray(page) for page in backend.read_file(backend.load_file(data))]
    import cv2

    check_pixels(data, "IMAGE", None, limits)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise ValueError(f"{name} is not an image OpenCV can decode, nor a PDF ({len(data)} bytes)")
    return [image]


def _error_text(value: Any) -> Optional[str]:
    """An error column's value as text; None for no error (``""``, None, NaN)."""
    if value is None or (isinstance(value, float) and value != value) or str(value) == "":
        return None
    return str(value)


def _decode_input(batch: Dict[str, np.ndarray], i: int, item_id: str, limits: Optional[PixelLimits]) -> List[Any]:
    """The images of input ``i`` of a batch (an ``image``, ``bytes`` or ``path`` column)."""
    prior = batch.get("error")
    if prior is not None and _error_text(prior[i]):
        raise ValueError(_error_text(prior[i]))
    if "image" in batch:
        return [np.asarray(batch["image"][i])]
    if "bytes" in batch:
        return _decode_one(bytes(batch["bytes"][i]), item_id, limits)
    if "path" in batch:
        return _decode_one(Path(str(batch["path"][i])).read_bytes(), item_id, limits)
    raise ConfigError(f"the dataset has none of the columns {', '.join(INPUT_COLUMNS)}: {sorted(batch)}")


def decode_batch(
    batch: Dict[str, np.ndarray],
    limits: Optional[PixelLimits] = None,
    ledger: Any = None,
    input_retries: int = DEFAULT_INPUT_RETRIES,
) -> Dict[str, np.ndarray]:
    """Ray Data batch function (CPU tasks): rows ``{id or path, bytes or path or image}`` -> ``{id, page, image,
    error}``, one row per image or PDF page; an input that cannot be read, is over ``limits``
    (:class:`~paddlex_npu.serve.images.PixelLimits`, ``serve``'s defaults) or killed its worker more than
    ``input_retries`` times (``ledger``: :mod:`.ledger`) is one row with ``error`` set (``""`` for the others)
    and an empty image."""
    guard = InputGuard(ledger, input_retries, "decode")
    ids, pages, images, errors = [], [], [], []
    for i, item_id in enumerate(_ids(batch)):
        error, decoded = guard.admit(item_id), []
        if error is None:
            try:
                decoded = _decode_input(batch, i, item_id, limits)
            except ConfigError:
                raise
            except Exception as exc:  # this input's error, in its row
                error = f"{type(exc).__name__}: {exc}"
        guard.done(item_id)
        for page, image in enumerate([np.zeros((0, 0, 3), np.uint8)] if error else decoded):
            ids.append(item_id)
            pages.append(page)
            images.append(image)
            errors.append(error or "")
    return {
        "id": np.array(ids, dtype=object),
        "page": np.array(pages, dtype=np.int64),
        "image": _ragged(images),
        "error": np.array(errors, dtype=object),
    }


# ---- the NPU actors ----------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class PipelineBatch:
    """The callable class for ``Dataset.map_batches``: one PaddleX pipeline (name, YAML path or config dict) on
    the NPU route per actor, on the one NPU Ray assigned to the actor (start it with ``resources={"NPU": 1}``).

    A batch holds decoded images (``image``, from :func:`decode_batch`) or files (``path``/``bytes``, decoded
    here); each input becomes one row per PaddleX result (``page``), or one row with ``error``.
    ``create_kwargs``: ``create_pipeline`` arguments (default: the hpi ``om`` backend); ``predict_kwargs``:
    ``predict`` arguments; ``env``: environment set in the actor before the pipeline is built (e.g.
    ``PADDLEX_NPU_RUNTIME``; :func:`ocr` gives it through ``runtime_env`` instead); ``keep_result``: also keep
    each result's whole JSON (column ``result``); ``limits``: the pixel limits when decoding here; ``ledger`` and
    ``input_retries``: the job's :mod:`.ledger` (an input the actor died on more often is an error row).
    """

    def __init__(
        self,
        pipeline: Union[str, Dict[str, Any]] = "OCR",
        create_kwargs: Optional[Dict[str, Any]] = None,
        predict_kwargs: Optional[Dict[str, Any]] = None,
        env: Optional[Dict[str, str]] = None,
        keep_result: bool = True,
        limits: Optional[PixelLimits] = None,
        ledger: Any = None,
        input_retries: int = DEFAULT_INPUT_RETRIES,
    ) -> None:
        os.environ.update(env or {})
        import ray

        from ..paddlex.pipelines import create_on_device

        self.device_id = assigned_device_id()
        self.npu = assigned_npus()[0]
        self.node = ray.get_runtime_context().get_node_id()
        self.predict_kwargs = dict(predict_kwargs or {})
        self.keep_result = keep_result
        self.limits, self.ledger, self.input_retries = limits, ledger, input_retries
        self.guard = InputGuard(ledger, input_retries, "pipeline")
        self.pipeline = create_on_device(pipeline, self.device_id, create_kwargs)

    def predict(self, item_id: str, image: np.ndarray) -> List[Any]:
        """The pipeline's results for one input (a subclass may add to it)."""
        return list(self.pipeline.predict(image, **self.predict_kwargs))

    def __call__(self, batch: Dict[str, np.ndarray]) -> Any:
        import pyarrow as pa

        if "image" not in batch:  # no decode stage before the actors: decode here
            batch = decode_batch(batch, self.limits, self.ledger, self.input_retries)
        rows: List[Dict[str, Any]] = []
        for i, item_id in enumerate(_ids(batch)):
            page = int(batch["page"][i]) if "page" in batch else 0
            error = _error_text(batch["error"][i]) if "error" in batch else None
            key = f"{item_id}#{page}"
            error = error or self.guard.admit(key)
            if error:
                rows.append(self._row(item_id, page, error=error))
                self.guard.done(key)
                continue
            rows += self._rows(item_id, page, np.array(batch["image"][i]))
            self.guard.done(key)
        self.guard.add_rows(len(rows), sum(r["error"] is not None for r in rows))
        return pa.Table.from_pylist(rows, schema=_schema())

    def _rows(self, item_id: str, page: int, image: np.ndarray) -> List[Dict[str, Any]]:
        """One input's rows: one per PaddleX result, or one with its error (the actor goes on)."""
        t0 = time.perf_counter()
        try:
            results = self.predict(item_id, image)
            if not results:
                raise ValueError("the pipeline gave no result for this input")
        except Exception as exc:
            if getattr(exc, "category", None) == "device_lost":  # the context is gone: a fresh actor runs the batch
                os._exit(1)
            return [self._row(item_id, page, error=f"{type(exc).__name__}: {exc}")]
        seconds = (time.perf_counter() - t0) / len(results)
        return [self._row(item_id, page + k, result=r, seconds=seconds) for k, r in enumerate(results)]

    def _row(
        self, item_id: str, page: int, *, result: Any = None, error: Optional[str] = None, seconds: float = 0.0
    ) -> Dict[str, Any]:
        from ..paddlex.pipelines import plain_result

        data = plain_result(result) if result is not None else {}
        data = data if isinstance(data, dict) else {"value": data}
        return {
            "id": item_id,
            "page": page,
            "texts": [str(t) for t in data.get("rec_texts", [])],
            "scores": [float(s) for s in data.get("rec_scores", [])],
            "boxes": [[int(v) for v in box] for box in data.get("rec_boxes", [])],
            "error": error,
            "npu": self.npu,
            "node": self.node,
            "pid": os.getpid(),
            "seconds": seconds,
            "result": json.dumps(data, ensure_ascii=False, default=_json_default) if self.keep_result else None,
        }


OCR_PIPELINE = "OCR"  # the pipeline whose results become rows of texts, scores and boxes


def _check_pipeline(pipeline: Union[str, Dict[str, Any]]) -> None:
    """A pipeline YAML that is not there, or a pipeline that is not OCR, fails here, not in every actor."""
    name: Any = pipeline  # a pipeline name
    yaml_file = isinstance(pipeline, (str, os.PathLike)) and Path(pipeline).suffix.lower() in (".yaml", ".yml")
    if yaml_file and not Path(pipeline).is_file():
        raise ConfigError(
            f"pipeline config {pipeline} does not exist: give a PaddleX pipeline YAML (its model_dir entries: "
            "OM packages, at the same path on every node) or a pipeline name such as OCR"
        )
    if yaml_file or isinstance(pipeline, dict):  # read and checked by the one loader
        from ..paddlex.pipelines import load_config

        name = load_config(pipeline).get("pipeline_name")
    if name != OCR_PIPELINE:
        raise ConfigError(
            f"pipeline {name!r}: Ray Data's OCR job reads PaddleX's OCR pipeline (pipeline_name: OCR) into rows of "
            "texts, scores and boxes; serve a document pipeline (table_recognition, layout_parsing) with "
            "`paddlex-npu serve`, which answers PaddleX's own endpoint for it"
        )


def _pool(npus: Union[int, Tuple[int, int]]) -> Any:
    from ray.data import ActorPoolStrategy

    if isinstance(npus, int) and npus >= 1:
        return ActorPoolStrategy(size=npus)
    if isinstance(npus, tuple) and len(npus) == 2 and 1 <= npus[0] <= npus[1]:
        return ActorPoolStrategy(min_size=npus[0], max_size=npus[1])
    raise ConfigError(f"npus={npus!r}: give the number of NPU actors (>= 1), or (min, max) for an autoscaling pool")


@dataclass(frozen=True)
class OcrOptions:
    """The options of :func:`ocr` (see there)."""

    npus: Union[int, Tuple[int, int]] = 1
    batch_size: int = 4
    decode: str = "tasks"
    decode_cpus: float = 1.0
    actor_cpus: float = 1.0
    decode_threads: Optional[int] = None
    actor_threads: Optional[int] = None
    create_kwargs: Optional[Dict[str, Any]] = None
    predict_kwargs: Optional[Dict[str, Any]] = None
    runtime: Optional[str] = None
    env: Optional[Dict[str, str]] = None
    keep_result: bool = True
    ray_remote_args: Optional[Dict[str, Any]] = None
    check_plan: bool = True
    filesystem: Any = None
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    input_retries: int = DEFAULT_INPUT_RETRIES
    accelerator_type: Optional[str] = "auto"
    actor_class: type = PipelineBatch

    def check(self) -> None:
        if self.decode not in ("tasks", "actor"):
            raise ConfigError(f"decode={self.decode!r}: give 'tasks' (CPU tasks before the NPU actors) or 'actor'")
        for name in ("batch_size", "decode_cpus", "actor_cpus", "max_image_pixels", "max_request_pixels"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}={getattr(self, name)}: give a number > 0")
        if self.input_retries < 0:
            raise ConfigError(f"input_retries={self.input_retries}: give a number of retries >= 0")

    def limits(self) -> PixelLimits:
        return PixelLimits(
            self.max_image_pixels,
            self.max_request_pixels,
            image_option="ray-ocr --max-image-pixels, ocr(max_image_pixels=...)",
            request_option="ray-ocr --max-request-pixels, ocr(max_request_pixels=...)",
        )

    def env_vars(self, threads: Optional[int]) -> Dict[str, str]:
        """Every task's environment: this process's paddlex-npu and PaddleX variables, ``env``, the runtime and
        the thread counts."""
        env = {**forwarded_env(), **(self.env or {}), **thread_env(threads)}
        if self.runtime:
            env["PADDLEX_NPU_RUNTIME"] = self.runtime
        return env

    def chip(self, pipeline: Union[str, Dict[str, Any]]) -> Optional[str]:
        """The chip the actors are pinned to: ``accelerator_type`` as given, or (``"auto"``) the packages' chip,
        except on the reference runtime (the CPU)."""
        if self.accelerator_type != "auto":
            return self.accelerator_type
        if self.env_vars(None).get("PADDLEX_NPU_RUNTIME") == "reference":
            return None
        if isinstance(pipeline, dict) or Path(str(pipeline)).suffix.lower() in (".yaml", ".yml"):
            from ..paddlex.pipelines import load_config

            return chip_of(load_config(pipeline))
        return None


@dataclass
class OcrJob:
    """A job of :func:`ocr_job`: its (lazy) Dataset of rows, and the ledger that counts its rows."""

    dataset: Any
    ledger: Any

    def progress(self, timeout: float = 10.0) -> Tuple[int, int, float]:
        """(rows done, rows with an error, seconds since the job was built)."""
        import ray

        return tuple(ray.get(self.ledger.progress.remote(), timeout=timeout))  # type: ignore[return-value]


def _env(env: Dict[str, str]) -> Optional[Dict[str, Any]]:
    return {"env_vars": env} if env else None


def ocr_job(
    inputs: Inputs, pipeline: Union[str, Dict[str, Any]] = "OCR", options: Optional[OcrOptions] = None
) -> OcrJob:
    """:func:`ocr`'s job, with its ledger (rows done, for progress)."""
    import ray

    opts = options or OcrOptions()
    opts.check()
    compute = _pool(opts.npus)
    _check_pipeline(pipeline)
    if not ray.is_initialized():
        ray.init()
    chip = opts.chip(pipeline)
    if opts.check_plan:
        actors = opts.npus if isinstance(opts.npus, int) else opts.npus[0]
        check_plan(Plan(actors, opts.actor_cpus, opts.decode_cpus, chip, f"ocr(npus={opts.npus!r})"))
    ledger = start_ledger()
    task_env = _env(opts.env_vars(opts.decode_threads))
    ds = read_inputs(inputs, opts.filesystem, opts.decode_cpus, task_env)
    retries = {"ledger": ledger, "input_retries": opts.input_retries}
    if opts.decode == "tasks":
        kwargs = {"limits": opts.limits(), **retries}
        ds = ds.map_batches(
            decode_batch,
            batch_size=opts.batch_size,
            num_cpus=opts.decode_cpus,
            batch_format="numpy",
            fn_kwargs=kwargs,
            runtime_env=task_env,
        )
    remote_args = dict(opts.ray_remote_args or {})  # Ray Data's defaults: ACTOR_FAULT_TOLERANCE
    resources = {**remote_args.pop("resources", {}), "NPU": 1}
    ds = ds.map_batches(
        opts.actor_class,
        fn_constructor_kwargs={
            "pipeline": pipeline,
            "create_kwargs": opts.create_kwargs,
            "predict_kwargs": opts.predict_kwargs,
            "keep_result": opts.keep_result,
            "limits": opts.limits(),
            **retries,
        },
        batch_size=opts.batch_size,
        batch_format="numpy",
        compute=compute,
        num_cpus=opts.actor_cpus,
        resources=resources,
        accelerator_type=chip,
        runtime_env=_env(opts.env_vars(opts.actor_threads)),
        **remote_args,
    )
    return OcrJob(ds, ledger)


def ocr(inputs: Inputs, pipeline: Union[str, Dict[str, Any]] = "OCR", **options: Any) -> Any:
    """A Ray Dataset of PaddleX results (rows ``id, page, texts, scores, boxes, error, npu, node, pid, seconds,
    result``) of ``pipeline`` over ``inputs`` (files, folders or URIs read by Ray, on ``filesystem``; or a Ray
    Dataset: :func:`read_inputs`), on ``npus`` NPU actors (an int, or (min, max) to autoscale), one NPU each.
    Lazy: write it (:func:`write_rows`, ``write_parquet``) or iterate it to run it. Options (:class:`OcrOptions`):

    - ``decode``: ``"tasks"`` decodes in CPU tasks of ``decode_cpus`` each (the read tasks too) before the NPU
      actors, ``"actor"`` in the NPU actors; ``actor_cpus``: CPUs each NPU actor reserves; ``decode_threads``,
      ``actor_threads``: their thread counts (``OMP_NUM_THREADS`` and the like; Ray's default is ``num_cpus``);
    - ``max_image_pixels``, ``max_request_pixels``: ``serve``'s pixel limits, checked from each file's header
      before it is decoded (an error row over them); ``input_retries``: how often an input that kills its worker
      is tried again before it is an error row (:mod:`.ledger`);
    - ``runtime`` (``PADDLEX_NPU_RUNTIME``: ``ais_bench``, ``reference``, ``simulated``) and ``env``: the tasks'
      environment, over this process's ``PADDLEX_NPU_*`` and ``PADDLE_PDX_*`` variables (all via ``runtime_env``);
    - ``accelerator_type``: the chip the actors run on (``"auto"``: the OM packages' ``soc_version``, not on the
      reference runtime; None: any);
    - ``check_plan``: refuse at once a plan the cluster cannot hold (:func:`~.plan.check_plan`; turn it off for a
      cluster whose autoscaler adds nodes on demand); ``ray_remote_args``: more options for the NPU actors;
      ``create_kwargs``/``predict_kwargs``: PaddleX's; ``keep_result``: the ``result`` column;
      ``actor_class``: :class:`PipelineBatch` or a subclass.
    """
    return ocr_job(inputs, pipeline, OcrOptions(**options)).dataset


def write_rows(job: Union[OcrJob, Any], output: str, fmt: str = "parquet", filesystem: Any = None) -> None:
    """Run the job, its rows written by Ray's writers (in the tasks, files named by Ray) to the folder ``output``
    (a path or URI; on ``filesystem`` when given), as Parquet or JSON lines; the driver holds no row."""
    ds = job.dataset if isinstance(job, OcrJob) else job
    if fmt == "parquet":
        ds.write_parquet(output, filesystem=filesystem)
    elif fmt == "jsonl":
        ds.write_json(output, filesystem=filesystem)
    else:
        raise ConfigError(f"format {fmt!r}: give parquet or jsonl")
