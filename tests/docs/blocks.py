"""The runnable blocks of a Markdown page: what the docs-as-tests runner (tests/docs/test_pages.py) executes.

A block runs when it is a fenced ``bash``/``sh``/``shell`` or ``python`` block, or an indented block whose first
line is a command (``paddlex-npu ...``, ``pip ...``, ``curl ...``: a command shown in prose runs as written too).
Other fences (``text``, ``yaml``, ``json``, ``promql``, ``mermaid``, none) are output or data, never run.

A block that cannot run in CI says why in an HTML comment on the line before it (invisible on the site):

    <!-- docs-test: skip npu: builds inference.om with ATC, which needs CANN -->

The word after ``skip`` is the kind (``npu``, ``cluster``, ``slow``, ``checkout``, ``placeholder``, ``network``,
``install``, ``server``); the rest is the reason the runner prints in its list of skipped blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

RUN_LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
COMMANDS = re.compile(
    r"(paddlex-npu|pip|python3?|bash|curl|export|kubectl|docker|ray|source|atc|cd|mkdir|PADDLEX_NPU_\w+=)\b"
)
MARK = re.compile(r"<!--\s*docs-test:\s*skip\s+(\w+):\s*(.*?)\s*-->")
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

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _mark(lines: List[str], start: int) -> Optional[str]:
    """The skip mark on the last non-blank line before ``start``, as "kind: reason"."""
    k = start - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    found = MARK.search(lines[k]) if k >= 0 else None
    if not found:
        return None
    if found.group(1) not in KINDS:
        raise ValueError(f"line {k + 1}: unknown docs-test mark kind {found.group(1)!r}: one of {sorted(KINDS)}")
    if not found.group(2):
        raise ValueError(f"line {k + 1}: a docs-test skip mark needs its reason")
    return f"{found.group(1)}: {found.group(2)}"


def _fenced(lines: List[str], i: int, page: str) -> tuple:
    """The fenced block opening at line ``i``: (Block, index after its closing fence)."""
    indent, fence, lang = FENCE.match(lines[i]).groups()
    j = i + 1
    while j < len(lines) and not lines[j].strip().startswith(fence):
        j += 1
    body = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : j]]
    kind = RUN_LANGS.get(lang.lower())
    return Block(page, i + 1, kind, "\n".join(body) + "\n", _mark(lines, i) if kind else None), j + 1


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
    return Block(page, i + 1, "bash", code, _mark(lines, i)), j


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
