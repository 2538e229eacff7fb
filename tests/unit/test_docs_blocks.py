"""The docs runner's reading of a page (tests/docs/blocks.py): which blocks run, how, and the marks that skip a
block with its reason or name what it prints; every page of the docs reads without a bad mark."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import page_blocks

ROOT = Path(__file__).resolve().parents[2]

PAGE = """# A page

Some prose.

```bash
export A=1
```

<!-- docs-test: skip npu: needs an Ascend NPU -->
```python
print("npu")
```

    paddlex-npu info

It prints:

    output that is not a command

- a list item

    continued paragraph, not code

<!-- docs-test: expect: hello -->
```python
print("hello")
```

```yaml
key: value
```
"""


def test_a_page_reads_as_blocks_with_their_kinds_and_marks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    got = [(b.line, b.kind, b.skip, b.expect) for b in page_blocks(page)]
    assert got == [
        (5, "bash", None, ()),
        (10, "python", "npu: needs an Ascend NPU", ()),
        (14, "bash", None, ()),
        (25, "python", None, ("hello",)),
        (29, None, None, ()),
    ]
    assert page_blocks(page)[2].code == "paddlex-npu info\n"


@pytest.mark.parametrize("bad", ["<!-- docs-test: skip later: some day -->", "<!-- docs-test: skip npu: -->"])
def test_a_mark_without_a_known_kind_or_a_reason_is_refused(tmp_path, bad):
    page = tmp_path / "page.md"
    page.write_text(f"{bad}\n```bash\ntrue\n```\n")
    with pytest.raises(ValueError, match="docs-test"):
        page_blocks(page)


def test_every_page_of_the_docs_reads_and_every_skip_says_why():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in page_blocks(page):
            assert block.skip is None or len(block.skip.split(": ", 1)[1]) > 10, block.where
