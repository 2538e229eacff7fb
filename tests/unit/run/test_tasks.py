"""One task table (paddlex_npu/run/tasks.py): the gear policies, the simulated device's cost and the converter's
shapes all follow it, and no other module tells a task from a predictor class name itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paddlex_npu.run import tasks
from paddlex_npu.run.gears import policy_for
from paddlex_npu.run.simulated import DENSE_MS_PER_MELEM, SEQUENCE_MS_PER_MELEM, default_cost

PACKAGE = Path(__file__).resolve().parents[3] / "paddlex_npu"


@pytest.mark.parametrize(
    "predictor, task, policy",
    [
        ("TextDetPredictor", tasks.TEXT_DET, "text detection"),  # PaddleX 3.0-3.4 names
        ("TextDetRunnerPredictor", tasks.TEXT_DET, "text detection"),  # 3.5+
        ("TextRecRunnerPredictor", tasks.TEXT_REC, "text recognition"),
        ("DetPredictor", tasks.DETECTION, "detection"),  # PicoDet layout: a detector
        ("InstanceSegPredictor", tasks.DETECTION, "detection"),
        ("SegPredictor", tasks.DENSE_MAP, "dense map"),
        ("OVDetPredictor", tasks.EXACT, "exact shapes"),
        ("VideoDetPredictor", tasks.EXACT, "exact shapes"),
        ("ClasPredictor", tasks.BATCH, "batch"),
        (None, tasks.BATCH, "batch"),
    ],
)
def test_the_table_gives_the_task_and_the_gear_policy_follows(predictor, task, policy):
    assert tasks.task_of_predictor(predictor) == task
    assert policy_for(predictor).name == policy


def test_the_simulated_cost_follows_the_table():
    for dense in ("TextDetRunnerPredictor", "DetPredictor", "SegPredictor"):
        assert default_cost(dense).ms_per_melem == DENSE_MS_PER_MELEM
    for sequence in ("TextRecRunnerPredictor", "ClasPredictor", None):
        assert default_cost(sequence).ms_per_melem == SEQUENCE_MS_PER_MELEM


def test_no_other_module_tells_a_task_from_a_class_name():
    pattern = re.compile(r"""["'](TextDet|TextRec|Layout)["']|_DENSE_TASKS|_EXACT\b""")
    strays = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p != PACKAGE / "run" / "tasks.py" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not strays, f"ask paddlex_npu.run.tasks instead: {strays}"
