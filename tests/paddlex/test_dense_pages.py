"""``benchmark --pages-kind dense``'s pages (issue 57 item 3): text-dense document pages of 30-80 lines, each page
different, and the CLI's choice reaching them."""

from __future__ import annotations

import numpy as np
from PIL import Image

from paddlex_npu.samples import assets


def _text_rows(path) -> int:
    """The runs of rows with ink on a rendered page: its lines."""
    ink = np.flatnonzero((np.asarray(Image.open(path).convert("L")) < 128).any(axis=1))
    return 0 if ink.size == 0 else 1 + int((np.diff(ink) > 1).sum())


def test_dense_pages_have_30_to_80_lines_each_different(tmp_path):
    pages = assets.render_pages_of("dense", tmp_path, 8)
    lines = [_text_rows(p) for p in pages]
    assert all(30 <= n <= 80 for n in lines) and len(set(lines)) > 4, lines
    assert len({p.read_bytes() for p in pages}) == 8
    assert all(Image.open(p).size[1] <= 2400 for p in pages)


def test_the_benchmark_takes_the_kind(tmp_path):
    import argparse

    from paddlex_npu.cli.perf import benchmark_args

    parser = argparse.ArgumentParser()
    benchmark_args(parser)
    assert parser.parse_args(["--pages-kind", "dense"]).pages_kind == "dense"
    assert parser.parse_args([]).pages_kind == "sparse"
    sparse = assets.render_pages_of("sparse", tmp_path / "s", 1)
    assert _text_rows(sparse[0]) == 12
