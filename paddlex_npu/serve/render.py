"""PDF pages rendered in processes of their own, bounded in time and in number.

PDFium can spend a minute on one page that draws a compressed image many times, and PaddleX renders every PDF of a
process under one lock: in the server process, one such request holds a thread of the default executor and every
other PDF behind it, and goes on after its client has gone. Here each PDF is rendered by PaddleX's own reader in a
child process (forked from a ``forkserver`` that has PaddleX's serving module loaded, so a child starts in
milliseconds), at most ``slots`` at once; the child is killed when the time bound is over (waiting for a slot
included: :class:`~..errors.RequestTimeoutError`, 504), when its caller is cancelled (the client went), or when
its result is in. The server's event loop only waits on the child's pipe: no thread is held while a page renders,
so ``/health``, ``/metrics`` and other requests never wait on it.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import threading
import time
from typing import Any, Optional, Set, Tuple

from ..errors import RequestTimeoutError
from ..paddlex import serving as paddlex_serving

DEFAULT_SLOTS = 2
# the children's logging first (render_init), then PaddleX's decoders and this module, loaded once
_PRELOAD = [f"{__package__}.render_init", paddlex_serving.SERVING_UTILS, __name__]
_CONTEXT_LOCK = threading.Lock()


def _render_child(conn: Any, raw: bytes, max_pages: Optional[int], max_pixels: int) -> None:
    """In the child: PaddleX's ``file_to_images`` of the PDF (unpatched here), its result or error sent back."""
    try:
        utils = paddlex_serving.serving_utils()
        utils.MAX_IMAGE_PIXELS = max_pixels
        out: Tuple[str, Any] = ("ok", utils.file_to_images(raw, "PDF", max_num_imgs=max_pages))
    except Exception as exc:
        out = ("error", exc)
    try:
        conn.send(out)
    except Exception as exc:  # an error that does not pickle: its text
        conn.send(("error", ValueError(f"{type(out[1]).__name__}: {out[1]} ({exc})")))
    conn.close()


def _outcome(message: Tuple[str, Any]) -> Any:
    kind, value = message
    if kind == "error":
        raise value
    return value


def _receive(conn: Any) -> Any:
    """The child's message (its result or error); the pipe is closed after. EOF: the child died (PDFium crashed on
    the document, or it was killed), a ValueError (PaddleX's apps answer it 422 as an invalid file)."""
    try:
        return _outcome(conn.recv())
    except EOFError:
        raise ValueError("the PDF could not be rendered: its renderer process ended without a result") from None
    finally:
        conn.close()


class PdfRenderer:
    """Renders PDFs with PaddleX's reader, each in a child process, at most ``slots`` at once, each stopped after
    ``timeout`` seconds in all (None: no bound) or when its caller is cancelled."""

    def __init__(self, slots: int = DEFAULT_SLOTS, timeout: Optional[float] = None, option: str = "") -> None:
        self.slots, self.timeout = max(1, slots), timeout
        self.option = option or "the server's --request-timeout"
        self._thread_slots = threading.BoundedSemaphore(self.slots)
        self._loop_slots: Optional[asyncio.Semaphore] = None
        self.children: Set[int] = set()  # the pids of the renderers running now

    @staticmethod
    def _context() -> Any:
        with _CONTEXT_LOCK:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
        return ctx

    def warm_up(self) -> None:
        """Start the forkserver now (it loads PaddleX's serving module once, seconds), not at the first PDF."""
        from multiprocessing import forkserver

        self._context()
        forkserver.ensure_running()

    def _start(self, raw: bytes, max_pages: Optional[int], max_pixels: int) -> Tuple[Any, Any]:
        ctx = self._context()
        ours, theirs = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_render_child, args=(theirs, raw, max_pages, max_pixels), name="paddlex-npu-pdf", daemon=True
        )
        proc.start()
        theirs.close()
        self.children.add(proc.pid)
        return proc, ours

    def _timed_out(self) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"rendering the PDF took over {self.timeout:g} s ({self.option}); it was stopped: send a simpler "
            "document, or give the server a longer timeout"
        )

    def render(self, raw: bytes, max_pages: Optional[int], max_pixels: int) -> Any:
        """PaddleX's ``file_to_images(raw, "PDF")`` in a child, waited for by this thread (Triton's model)."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        if not self._thread_slots.acquire(timeout=self.timeout):
            raise self._timed_out()
        try:
            proc, conn = self._start(raw, max_pages, max_pixels)
            try:
                if not conn.poll(None if deadline is None else max(0.0, deadline - time.monotonic())):
                    raise self._timed_out()
                return _receive(conn)
            finally:
                _stop(proc, self.children)
                conn.close()
        finally:
            self._thread_slots.release()

    async def render_async(self, raw: bytes, max_pages: Optional[int], max_pixels: int) -> Any:
        """The same, awaited by the event loop (``serve``): no thread is held while the page renders; cancelling
        the awaiting task kills the child."""
        try:
            return await asyncio.wait_for(self._render_async(raw, max_pages, max_pixels), self.timeout)
        except asyncio.TimeoutError:
            raise self._timed_out() from None

    async def _render_async(self, raw: bytes, max_pages: Optional[int], max_pixels: int) -> Any:
        if self._loop_slots is None:
            self._loop_slots = asyncio.Semaphore(self.slots)
        loop = asyncio.get_running_loop()
        async with self._loop_slots:
            starting = loop.run_in_executor(None, self._start, raw, max_pages, max_pixels)
            try:
                proc, conn = await asyncio.shield(starting)
            except asyncio.CancelledError:  # the child is stopped as soon as it has started
                starting.add_done_callback(
                    lambda f: f.cancelled() or f.exception() or _discard(*f.result(), self.children)
                )
                raise
            receiving = False
            try:
                readable = loop.create_future()
                loop.add_reader(conn.fileno(), lambda: readable.done() or readable.set_result(None))
                try:
                    await readable
                finally:
                    loop.remove_reader(conn.fileno())
                    os.set_blocking(conn.fileno(), True)  # uvloop's add_reader made it non-blocking
                receiving = True  # the pipe is the receiving thread's now: it closes it (killing the child ends it)
                return await loop.run_in_executor(None, _receive, conn)
            finally:
                _stop(proc, self.children)
                if not receiving:
                    conn.close()


def _discard(proc: Any, conn: Any, children: Set[int]) -> None:
    _stop(proc, children)
    conn.close()


def _stop(proc: Any, children: Set[int]) -> None:
    """The child killed (a no-op once it has exited) and reaped."""
    if proc.is_alive():
        proc.kill()
    proc.join(5)
    children.discard(proc.pid)
