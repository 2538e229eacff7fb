"""Batch inference on Ray Data: a corpus through PaddleX pipelines on the NPUs of a Ray cluster.

::

    paths ─► read (ids) ─► decode: CPU tasks ─► map_batches(PipelineBatch, resources={"NPU": 1}) ─► rows
                           (images, PDF pages)   one pipeline per actor, on the chip Ray assigned

- :func:`decode_batch` (CPU tasks) turns files or bytes into BGR arrays as PaddleX reads them (OpenCV for
  images, PaddleX's own PDF reader for PDF pages), so the NPU actors spend their time on the pipeline;
- :class:`PipelineBatch` (the callable class for ``Dataset.map_batches``) holds one PaddleX pipeline on the NPU
  route, built once per actor on the NPU Ray assigned to it (:mod:`.devices`), and turns each batch into rows:
  ``id, page, texts, scores, boxes, error, npu, node, pid, seconds, result``. An input that fails is a row with
  ``error`` set, never a lost row;
- :func:`ocr` is the one call for the common case, returning the (lazy) Ray Dataset of those rows.

Fault tolerance is Ray Data's own (its defaults, :data:`ACTOR_FAULT_TOLERANCE`): NPU actors restart without
limit (``max_restarts=-1``) and the batches a dead actor held run again (``max_task_retries=-1``); CPU tasks are
retried (``max_retries=-1``) and the blocks a lost node held are rebuilt from lineage. Each input's row is
produced by exactly one successful task.
"""

from __future__ import annotations

import glob
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import ConfigError
from .devices import assigned_device_id, assigned_npus, require_npus

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


def input_paths(inputs: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]) -> List[str]:
    """Files named by ``inputs`` (paths, folders, glob patterns), in order; a folder gives its images and PDFs
    (sorted, not recursive). A path that does not exist is kept: it becomes a row with its error."""
    items = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    out: List[str] = []
    for item in items:
        text = os.fspath(item)
        if Path(text).is_dir():
            found = sorted(p for p in Path(text).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES + PDF_SUFFIXES)
            out += [str(p) for p in found]
        elif glob.has_magic(text):
            out += sorted(glob.glob(text))
        else:
            out.append(text)
    return out


def read_inputs(inputs: Inputs, blocks: Optional[int] = None) -> Any:
    """A Ray Dataset of ``inputs``: a Dataset as given (columns ``id`` and one of ``image``/``bytes``/``path``,
    e.g. ``ray.data.read_binary_files(..., include_paths=True)``), or paths (:func:`input_paths`) as rows
    ``{"id", "path"}`` read by the decode tasks on the nodes (a shared file system, as for any Ray job)."""
    import ray.data

    if isinstance(inputs, ray.data.Dataset):
        return inputs
    paths = input_paths(inputs)
    if not paths:
        raise ConfigError(f"no input files in {inputs!r}: give image or PDF files, folders of them, or glob patterns")
    return ray.data.from_items([{"id": p, "path": p} for p in paths], override_num_blocks=blocks)


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


def _decode_one(data: bytes, name: str) -> List[np.ndarray]:
    """The BGR arrays PaddleX reads from one file's bytes: one for an image, one per page for a PDF."""
    if data[:5] == b"%PDF-":  # PaddleX's own PDF rendering, with the settings its image batch sampler uses
        from ..paddlex.serving import pdf_reader

        backend = pdf_reader()
        return [np.ascontiguousarray(page) for page in backend.read_file(backend.load_file(data))]
    import cv2

    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
    if image is None:
        raise ValueError(f"{name} is not an image OpenCV can decode, nor a PDF ({len(data)} bytes)")
    return [image]


def _error_text(value: Any) -> Optional[str]:
    """An error column's value as text; None for no error (``""``, None, NaN)."""
    if value is None or (isinstance(value, float) and value != value) or str(value) == "":
        return None
    return str(value)


def decode_batch(batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Ray Data batch function (CPU tasks): rows ``{id, path or bytes}`` -> ``{id, page, image, error}``, one row
    per image or PDF page; an input that cannot be read is one row with ``error`` set (``""`` for the others) and an
    empty image."""
    ids, pages, images, errors = [], [], [], []
    prior = batch.get("error")
    for i, item_id in enumerate(_ids(batch)):
        try:
            if prior is not None and _error_text(prior[i]):
                raise ValueError(_error_text(prior[i]))
            if "image" in batch:
                decoded = [np.asarray(batch["image"][i])]
            elif "bytes" in batch:
                decoded = _decode_one(bytes(batch["bytes"][i]), item_id)
            elif "path" in batch:
                decoded = _decode_one(Path(str(batch["path"][i])).read_bytes(), item_id)
            else:
                raise ConfigError(f"the dataset has none of the columns {', '.join(INPUT_COLUMNS)}: {sorted(batch)}")
        except ConfigError:
            raise
        except Exception as exc:  # this input's error, in its row
            ids.append(item_id)
            pages.append(0)
            images.append(np.zeros((0, 0, 3), np.uint8))
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        for page, image in enumerate(decoded):
            ids.append(item_id)
            pages.append(page)
            images.append(image)
            errors.append("")
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
    ``PADDLEX_NPU_RUNTIME``); ``keep_result``: also keep each result's whole JSON (column ``result``).
    """

    def __init__(
        self,
        pipeline: Union[str, Dict[str, Any]] = "OCR",
        create_kwargs: Optional[Dict[str, Any]] = None,
        predict_kwargs: Optional[Dict[str, Any]] = None,
        env: Optional[Dict[str, str]] = None,
        keep_result: bool = True,
    ) -> None:
        os.environ.update(env or {})
        import ray

        from ..paddlex.pipelines import create_on_device

        self.device_id = assigned_device_id()
        self.npu = assigned_npus()[0]
        self.node = ray.get_runtime_context().get_node_id()
        self.predict_kwargs = dict(predict_kwargs or {})
        self.keep_result = keep_result
        self.pipeline = create_on_device(pipeline, self.device_id, create_kwargs)

    def __call__(self, batch: Dict[str, np.ndarray]) -> Any:
        import pyarrow as pa

        if "image" not in batch:  # no decode stage before the actors: decode here
            batch = decode_batch(batch)
        rows: List[Dict[str, Any]] = []
        for i, item_id in enumerate(_ids(batch)):
            page = int(batch["page"][i]) if "page" in batch else 0
            error = _error_text(batch["error"][i]) if "error" in batch else None
            if error:
                rows.append(self._row(item_id, page, error=error))
                continue
            t0 = time.perf_counter()
            try:
                results = list(self.pipeline.predict(np.array(batch["image"][i]), **self.predict_kwargs))
                if not results:
                    raise ValueError("the pipeline gave no result for this input")
            except Exception as exc:  # this input's error, in its row; the actor goes on
                rows.append(self._row(item_id, page, error=f"{type(exc).__name__}: {exc}"))
                continue
            seconds = (time.perf_counter() - t0) / len(results)
            for k, result in enumerate(results):
                rows.append(self._row(item_id, page + k, result=result, seconds=seconds))
        return pa.Table.from_pylist(rows, schema=_schema())

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


def _check_pipeline(pipeline: Union[str, Dict[str, Any]]) -> None:
    """A pipeline YAML that is not there fails here, not in every actor."""
    if isinstance(pipeline, (str, os.PathLike)) and Path(pipeline).suffix.lower() in (".yaml", ".yml"):
        if not Path(pipeline).is_file():
            raise ConfigError(
                f"pipeline config {pipeline} does not exist: give a PaddleX pipeline YAML (its model_dir entries: "
                "OM packages, at the same path on every node) or a pipeline name such as OCR"
            )


def _pool(npus: Union[int, Tuple[int, int]]) -> Any:
    from ray.data import ActorPoolStrategy

    if isinstance(npus, int) and npus >= 1:
        return ActorPoolStrategy(size=npus)
    if isinstance(npus, tuple) and len(npus) == 2 and 1 <= npus[0] <= npus[1]:
        return ActorPoolStrategy(min_size=npus[0], max_size=npus[1])
    raise ConfigError(f"npus={npus!r}: give the number of NPU actors (>= 1), or (min, max) for an autoscaling pool")


def ocr(
    inputs: Inputs,
    pipeline: Union[str, Dict[str, Any]] = "OCR",
    *,
    npus: Union[int, Tuple[int, int]] = 1,
    batch_size: int = 4,
    decode: str = "tasks",
    decode_cpus: float = 1.0,
    actor_cpus: float = 1.0,
    create_kwargs: Optional[Dict[str, Any]] = None,
    predict_kwargs: Optional[Dict[str, Any]] = None,
    runtime: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    keep_result: bool = True,
    ray_remote_args: Optional[Dict[str, Any]] = None,
    check_npus: bool = True,
) -> Any:
    """A Ray Dataset of PaddleX results (rows ``id, page, texts, scores, boxes, error, npu, node, pid, seconds,
    result``) of ``pipeline`` over ``inputs`` (paths, folders, globs, or a Ray Dataset: :func:`read_inputs`), on
    ``npus`` NPU actors (an int, or (min, max) to autoscale), one NPU each. Lazy: write it (``write_parquet``,
    ``write_json``) or iterate it to run it.

    ``decode``: ``"tasks"`` decodes in CPU tasks of ``decode_cpus`` each before the NPU actors, ``"actor"`` in the
    NPU actors themselves. ``actor_cpus``: CPUs each NPU actor reserves (its host pre/post-processing).
    ``runtime``: ``PADDLEX_NPU_RUNTIME`` in the actors (``ais_bench``, ``reference``, ``simulated``); ``env``:
    more environment for them. ``ray_remote_args``: more options for the NPU actors (e.g.
    ``{"max_restarts": 3}``); Ray Data's default restarts them and retries their batches without limit.
    ``check_npus``: refuse at once when the cluster declares fewer NPUs than the pool's (minimum) size (turn it
    off for a cluster whose autoscaler adds NPU nodes on demand).
    """
    if decode not in ("tasks", "actor"):
        raise ConfigError(f"decode={decode!r}: give 'tasks' (CPU tasks before the NPU actors) or 'actor'")
    if batch_size < 1:
        raise ConfigError(f"batch_size={batch_size}: give a number of inputs per batch >= 1")
    compute = _pool(npus)
    _check_pipeline(pipeline)
    if check_npus:
        require_npus(npus if isinstance(npus, int) else npus[0], f"ocr(npus={npus!r})")
    actor_env = dict(env or {})
    if runtime:
        actor_env["PADDLEX_NPU_RUNTIME"] = runtime
    ds = read_inputs(inputs)
    if decode == "tasks":
        ds = ds.map_batches(decode_batch, batch_size=batch_size, num_cpus=decode_cpus, batch_format="numpy")
    remote_args = dict(ray_remote_args or {})  # Ray Data's defaults: ACTOR_FAULT_TOLERANCE
    resources = {**remote_args.pop("resources", {}), "NPU": 1}
    return ds.map_batches(
        PipelineBatch,
        fn_constructor_kwargs={
            "pipeline": pipeline,
            "create_kwargs": create_kwargs,
            "predict_kwargs": predict_kwargs,
            "env": actor_env,
            "keep_result": keep_result,
        },
        batch_size=batch_size,
        batch_format="numpy",
        compute=compute,
        num_cpus=actor_cpus,
        resources=resources,
        **remote_args,
    )
