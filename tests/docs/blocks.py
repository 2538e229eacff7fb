"""The runnable blocks of a Markdown page: what the docs-as-tests runner (tests/docs/test_pages.py) executes.

A block runs when it is a fenced ``bash``/``sh``/``shell`` or ``python`` block, or an indented block whose first
line is a command (``paddlex-npu ...``, ``pip ...``, ``curl ...``: a command shown in prose runs as written too).
Other fences (``text``, ``yaml``, ``json``, ``promql``, ``mermaid``, none) are output or data, never run.

A block that cannot run in CI says why in an HTML comment on the line before it (invisible on the site):

    <!-- docs-test: skip npu: builds inference.om with ATC, which needs CANN -->

The word after ``skip`` is the kind (``npu``, ``cluster``, ``slow``, ``checkout``, ``placeholder``, ``network``,
``install``, ``server``); the rest is the reason the runner prints in its list of skipped blocks. What a block must
print is checked with ``<!-- docs-test: expect: TEXT -->`` (the page's output must hold TEXT).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

RUN_LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
COMMANDS = re.compile(
    r"(paddlex-npu|pip|python3?|bash|curl|export|kubectl|docker|ray|source|atc|cd|mkdir|PADDLEX_NPU_\w+=)\b"
)
MARK = re.compile(r"<!--\s*docs-test:\s*skip\s+(\w+):\s*(.*?)\s*-->")
EXPECT = re.compile(r"<!--\s*docs-test:\s*expect:\s*(.*?)\s*-->")
KINDS = {"npu", "cluster", "slow", "checkout", "placeholder", "network", "install", "server"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One code block of a page: where it starts, how it runs (``bash``/``python``; None: not run), its text."""

    page: str
    line: int  # 1-based line of the fence or the block's first line
    kind: Optional[str]
    code: str
    skip: Optional[str] = None  # "kind: reason" from the mark before it
    expect: Tuple[str, ...] = ()  # texts the page's output must hold once the block ran (expect marks)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _marks(lines: List[str], start: int) -> Tuple[Optional[str], Tuple[str, ...]]:
    """The marks in the comment lines right before ``start``: (skip as "kind: reason", expected texts)."""
    k, skip, expect = start - 1, None, []
    while k >= 0 and (not lines[k].strip() or lines[k].lstrip().startswith("<!--")):
        found = MARK.search(lines[k])
        if found:
            if found.group(1) not in KINDS:
                raise ValueError(
                    f"line {k + 1}: unknown docs-test skip kind {found.group(1)!r}: one of {sorted(KINDS)}"
                )
            if not found.group(2):
                raise ValueError(f"line {k + 1}: a docs-test skip mark needs its reason")
            skip = f"{found.group(1)}: {found.group(2)}"
        expect += EXPECT.findall(lines[k])
        k -= 1
    return skip, tuple(reversed(expect))


def _fenced(lines: List[str], i: int, page: str) -> tuple:
    """The fenced block opening at line ``i``: (Block, index after its closing fence)."""
    indent, fence, lang = FENCE.match(lines[i]).groups()
    j = i + 1
    while j < len(lines) and not lines[j].strip().startswith(fence):
        j += 1
    body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : j]]
    kind = RUN_LANGS.get(lang.lower())
    skip, expect = _marks(lines, i) if kind else (None, ())
    return Block(page, i + 1, kind, "\n".join(body) + "\n", skip, expect), j + 1


def _indented(lines: List[str], i: int, page: str) -> tuple:
    """The indented block starting at line ``i``: (Block or None when it is no command, index after it)."""
    j = i
    while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
        j += 1
    while j > i and not lines[j - 1].strip():
        j -= 1
    code = "\n".join(line[4:] for line in lines[i:j]) + "\n"
    if not COMMANDS.match(code.lstrip()):
        return None, j
    return Block(page, i + 1, "bash", code, *_marks(lines, i)), j


def page_blocks(path: Path, page: Optional[str] = None) -> List[Block]:
    """Every code block of the Markdown file ``path`` (runnable or not), in page order."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    page = page or Path(path).name
    blocks: List[Block] = []
    i, after_blank, in_list = 0, True, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            block, i = _fenced(lines, i, page)
            blocks.append(block)
            after_blank = False
            continue
        if after_blank and line.startswith("    ") and line.strip() and not in_list:
            block, i = _indented(lines, i, page)
            if block is not None:
                blocks.append(block)
            continue
        if line.strip():
            # an indented line right after a list item continues the item (not a code block)
            in_list = bool(re.match(r"\s*([-*+]|\d+\.)\s", line)) or (in_list and line.startswith(" "))
        after_blank = not line.strip() or bool(re.fullmatch(r"\s*<!--.*-->\s*", line))  # a comment ends its block
        i += 1
    return blocks
