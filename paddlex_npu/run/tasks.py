"""The task of a PaddleX model, from its predictor class name: the one table the gear policies
(:mod:`.gears`), the simulated device's cost model, the converter's input shapes and the coverage report ask.

Names are matched by prefix, first row first, for both generations' class names (``TextDetPredictor``,
``TextDetRunnerPredictor``). An unknown name is ``batch``: only the batch dim varies.
"""

from __future__ import annotations

from typing import Optional, Tuple

TEXT_DET = "text_det"  # DB text detection: H, W vary (multiples of 32), probability maps out
TEXT_REC = "text_rec"  # CTC text recognition: batch and line width vary
DETECTION = "detection"  # boxes [M, ...] + box_num [N] (+ masks): object, layout, instance segmentation
DENSE_MAP = "dense_map"  # a map per pixel: segmentation, unwarping, anomaly detection
EXACT = "exact"  # outputs not batch-major, or prompt-dependent inputs: exact shapes only
BATCH = "batch"  # everything else (classifiers, ...): the batch dim only

TABLE: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    (EXACT, ("OVDet", "OVSeg", "BEVDet3D", "Formula", "Table", "TS", "Fastspeech2", "Pwgan", "Video", "SplitLoop")),
    (TEXT_DET, ("TextDet",)),
    (TEXT_REC, ("TextRec",)),
    (DETECTION, ("InstanceSeg",)),
    (DENSE_MAP, ("Seg", "Warp", "Uad")),
    (DETECTION, ("Det", "Layout")),
)
# Tasks whose models take whole images and compute per pixel: the simulated device's dense-image rate.
DENSE_IMAGE = frozenset({TEXT_DET, DETECTION, DENSE_MAP})


def task_of_predictor(predictor_class: Optional[str]) -> str:
    """The task of a PaddleX predictor class name (:data:`BATCH` when unknown or None)."""
    name = predictor_class or ""
    for task, prefixes in TABLE:
        if name.startswith(prefixes):
            return task
    return BATCH
