"""The first module the PDF renderer's ``forkserver`` imports (:mod:`.render`): the renderer's children log as the
server does (:func:`paddlex_npu.log.configure_from_environment`, what ``serve`` exported), set before PaddleX is
imported there, so PaddleX's own handler (its coloured import-time lines on stderr) is never installed and every
line of a ``--log-format json`` server stays one JSON object. Imported by the forkserver only."""

from __future__ import annotations

from ..log import configure_from_environment

configure_from_environment()
