"""PDFs rendered in processes of their own (``serve/render.py``), in process against PaddleX's real reader and
PDFium: the same arrays as PaddleX's in-process render, a repeated-draw bomb stopped at the time bound (its child
killed), a valid PDF beside it answered in its own time, a cancelled render's child killed, a cut PDF refused."""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest

from paddlex_npu.errors import RequestTimeoutError
from paddlex_npu.paddlex import serving
from paddlex_npu.serve.render import PdfRenderer
from tests.serve import pdfs

BOMB_DRAWS = 2000  # PDFium takes minutes over it: every test stops it long before


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


@pytest.fixture(scope="module")
def renderer():
    r = PdfRenderer(slots=2, timeout=60)
    r.warm_up()
    return r


def test_a_pdf_renders_as_paddlex_renders_it_in_process(renderer):
    raw = pdfs.text_pages([(60, 40), (30, 50)])
    images, info = renderer.render(raw, 10, 40_000_000)
    want_images, want_info = serving.serving_utils().file_to_images(raw, "PDF", max_num_imgs=10)
    assert info == want_info and info.numPages == 2
    assert all(np.array_equal(a, b) for a, b in zip(images, want_images, strict=True))
    assert renderer.children == set()


def test_the_async_render_gives_the_same(renderer):
    raw = pdfs.text_pages([(60, 40)])
    images, info = asyncio.run(renderer.render_async(raw, 10, 40_000_000))
    assert info.numPages == 1 and images[0].shape == (80, 120, 3)


def test_a_repeated_draw_bomb_is_stopped_at_the_time_bound_and_its_child_killed():
    r = PdfRenderer(slots=1, timeout=2)
    started = time.monotonic()
    with pytest.raises(
        RequestTimeoutError, match=r"rendering the PDF took over 2 s \(the server's --request-timeout\)"
    ):
        r.render(pdfs.repeated_draw(BOMB_DRAWS), 10, 40_000_000)
    assert time.monotonic() - started < 30  # the forkserver's start included; the render alone takes minutes
    assert r.children == set()


def test_a_valid_pdf_beside_a_bomb_is_answered_in_its_own_time_and_the_bomb_is_stopped():
    asyncio.run(_beside_a_bomb(PdfRenderer(slots=2, timeout=60)))


async def _beside_a_bomb(renderer: PdfRenderer) -> None:
    bomb = asyncio.ensure_future(renderer.render_async(pdfs.repeated_draw(BOMB_DRAWS), 10, 40_000_000))
    for _ in range(600):  # the bomb's child has started (within 30 s)
        if renderer.children:
            break
        await asyncio.sleep(0.05)
    (pid,) = renderer.children
    images, info = await renderer.render_async(pdfs.text_pages([(60, 40)]), 10, 40_000_000)
    assert info.numPages == 1 and not bomb.done() and _alive(pid)  # answered while the bomb renders
    bomb.cancel()  # as when its client goes
    with pytest.raises(asyncio.CancelledError):
        await bomb
    assert not _alive(pid) and renderer.children == set()


def test_the_async_render_times_out_too():
    r = PdfRenderer(slots=1, timeout=2)
    with pytest.raises(RequestTimeoutError):
        asyncio.run(r.render_async(pdfs.repeated_draw(BOMB_DRAWS), 10, 40_000_000))
    assert r.children == set()


def test_a_cut_pdf_gets_paddlex_own_error(renderer):
    with pytest.raises(Exception) as info:
        renderer.render(pdfs.truncated(pdfs.text_pages([(60, 40)] * 3)), 10, 40_000_000)
    assert not isinstance(info.value, RequestTimeoutError)
    assert renderer.children == set()
