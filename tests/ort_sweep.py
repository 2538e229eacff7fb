"""The real output shapes of an ONNX model at every input of a sweep, from ONNX Runtime: the oracle of the output
size sweep (tests/paddlex/test_output_sizes.py).

ONNX Runtime runs the model on a zero input of each shape, in one process per core (one intra-op thread each,
the shapes dealt out in turn so that every process gets large and small ones). A run is kept as data, keyed by the
model file's SHA-256 and ONNX Runtime's version, since the output shapes of one model file under one ONNX Runtime
are facts that do not change: the first sweep of a model costs minutes (every recognition width 8..3200 px is
about 7 CPU minutes for PP-OCRv4), later ones read the file.

Where the data is read: ``tests/data/ort-output-shapes/`` (committed, so a fresh clone does not pay the sweep),
then the asset cache (a key the committed data lacks: a new model file or ONNX Runtime). A missing key is swept
and written to the asset cache, with a warning to refresh the committed data: ``bash scripts/ort-sweep-data.sh``
(which sets ``ORT_SWEEP_DATA_OUT`` to the committed folder and runs the sweep). The test still runs a spread of
shapes live on every run, so the data is checked against ONNX Runtime each time.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

COMMITTED = Path(__file__).parent / "data" / "ort-output-shapes"
Shape = Tuple[int, ...]
_SESSION = None


def session(path: Union[str, Path]) -> Any:
    """An ONNX Runtime CPU session on one intra-op thread (one per core: the sweep's processes run side by side)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _start(path: str) -> None:
    global _SESSION
    _SESSION = session(path)


def _run(shapes: Sequence[Shape]) -> List[Tuple[Shape, List[int], int]]:
    import numpy as np

    name = _SESSION.get_inputs()[0].name
    out = []
    for shape in shapes:
        (result,) = _SESSION.run(None, {name: np.zeros(shape, np.float32)})[:1]
        out.append((tuple(shape), list(result.shape), int(result.nbytes)))
    return out


def output_shapes(onnx_path: Path, shapes: Sequence[Shape], cache: Path) -> Dict[Shape, Tuple[List[int], int]]:
    """``{input shape: (shape of output 0, its bytes)}`` from ONNX Runtime for each of ``shapes`` (the committed
    data, else the asset cache ``cache``, else a sweep)."""
    import onnxruntime as ort

    digest = hashlib.sha256(Path(onnx_path).read_bytes()).hexdigest()[:16]
    name = f"{Path(onnx_path).parent.name}-{digest}-ort{ort.__version__}.json"
    out_dir = Path(os.environ.get("ORT_SWEEP_DATA_OUT") or cache)
    file = out_dir / name
    known: Dict[Shape, Tuple[List[int], int]] = {}
    for source in (COMMITTED / name, cache / name, file):
        if source.is_file():
            known.update({tuple(k): (v, n) for k, v, n in json.loads(source.read_text())})
    todo = [tuple(s) for s in shapes if tuple(s) not in known]
    if todo:
        if out_dir != COMMITTED:
            warnings.warn(
                f"{name}: not in {COMMITTED}; sweeping {len(todo)} shapes (minutes): refresh the committed "
                "data with `bash scripts/ort-sweep-data.sh`",
                stacklevel=2,
            )
        procs = max(1, min(os.cpu_count() or 1, len(todo)))
        chunks = [todo[i::procs] for i in range(procs)]
        spawn = multiprocessing.get_context("spawn")  # not fork: the test process holds PaddleX's threads
        with ProcessPoolExecutor(procs, spawn, initializer=_start, initargs=(str(onnx_path),)) as pool:
            for part in pool.map(_run, chunks):
                known.update({k: (v, n) for k, v, n in part})
    if todo or not file.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps([[list(k), v, n] for k, (v, n) in sorted(known.items())]))
        tmp.replace(file)
    return {tuple(s): known[tuple(s)] for s in shapes}
