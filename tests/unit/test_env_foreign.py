"""The environment table covers the foreign variables paddlex-npu reads or sets (CANN's, Ray's,
prometheus-client's), not only its own ``PADDLEX_NPU_*`` ones."""

from __future__ import annotations

import re
from pathlib import Path

from paddlex_npu import envs

ROOT = Path(__file__).resolve().parents[2]
# os.environ.get("X"), os.environ["X"], and constants holding a variable's name (VISIBLE_ENV = "X")
READ = re.compile(r"""(?:environ(?:\.get)?\s*[\(\[]\s*|_ENV\s*=\s*)["']([A-Z][A-Z0-9_]+)["']""")


def foreign_names(source: str) -> set:
    return {name for name in READ.findall(source) if not name.startswith("PADDLEX_NPU_")}


def test_every_foreign_variable_the_package_reads_is_in_the_table():
    named = set()
    for path in (ROOT / "paddlex_npu").rglob("*.py"):
        named |= foreign_names(path.read_text(encoding="utf-8"))
    assert named, "the pattern found nothing: it is broken"
    assert named <= {v.name for v in envs.VARIABLES}, sorted(named - {v.name for v in envs.VARIABLES})


def test_the_pattern_sees_reads_and_constants():
    source = 'a = os.environ.get("ASCEND_X")\nb = os.environ["LD_Y"]\nVISIBLE_ENV = "CANN_Z"\nc = "NOT_READ"'
    assert foreign_names(source) == {"ASCEND_X", "LD_Y", "CANN_Z"}
