"""The README stays short and points into the docs site; every page is in the site's nav; links resolve.

The site itself is built by ``mkdocs build --strict`` in scripts/test.sh (broken links and anchors fail there)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _nav_pages(nav) -> list:
    pages = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _mkdocs() -> dict:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml names a Python function (the Mermaid fence); only the nav matters here
    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = _nav_pages(_mkdocs()["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages, set(nav) ^ set(pages)


def test_the_readme_is_short_and_says_what_was_verified_where():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    top = readme[: readme.index("## Install")]
    assert "On an Ascend NPU: nothing yet" in top and "paddlex-npu selftest --om-root DIR" in top
    for command in ("    bash scripts/demo.sh\n", "    bash scripts/test.sh\n"):
        assert command in readme
    assert "PADDLEX_NPU_RUNTIME=reference" in readme
    # the install line is PyPI's, runnable as written (scripts/ci-docs.sh runs it against a loopback index)
    assert '```bash\npip install "paddlex-npu[reference,ocr]"\n```' in readme and "<git host>" not in readme


def test_the_readmes_links_point_at_files_of_the_repository():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert targets
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert not missing, missing


def test_the_docs_chart_is_the_benchmarks_chart():
    chart = DOCS / "images" / "benchmark-ocr.png"
    assert chart.read_bytes() == (REPO / "benchmarks" / "benchmark-ocr.png").read_bytes()
