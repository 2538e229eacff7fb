"""The site as a reader sees it (issue 43): every page of the built site (``mkdocs build``), served on 127.0.0.1,
rendered by a headless Chromium; Markdown shown as source where it should have been rendered fails the page: a link
to a page (``[text](x.md)``) or a table row (``|---|``) in a code block or a paragraph, ``**`` or a code fence in a
paragraph (the home page once showed ``([Hardware acceptance](hardware-acceptance.md); ...`` inside its first code
block: the indented block had swallowed the paragraph after it). A screenshot of the home page is kept with the
build's output (``SITE_DIR``/screenshots/home.png). ``scripts/ci-site.sh`` runs this (Debian's chromium)."""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.docs.test_pages import pages

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]
# Markdown that rendering should have consumed, by where it shows: (name, pattern, contexts)
SOURCE = [
    ("a Markdown link to a page", re.compile(r"\[[^\]\n]+\]\([\w./#-]+\.md(#[\w-]*)?\)"), ("pre", "p", "li", "td")),
    ("a Markdown table rule", re.compile(r"\|\s*:?-{3,}:?\s*\|"), ("pre", "p", "li")),
    ("Markdown bold", re.compile(r"\*\*\S[^*\n]*\S?\*\*"), ("p", "li", "td")),
    ("a Markdown code fence", re.compile(r"(^|\s)```"), ("p", "li", "td")),
]
BLOCKS = {"pre", "p", "li", "td", "th", "h1", "h2", "h3", "h4"}


class _Text(html.parser.HTMLParser):
    """The rendered text of the page's article by block element: [(context, text)]; inline code in a paragraph is
    left out (it may show Markdown on purpose), a code block (``pre``) is kept whole."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: List[str] = []
        self.out: List[Tuple[str, str]] = []
        self.buf: Dict[int, List[str]] = {}
        self.in_article = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "img", "input", "hr", "meta", "link"):
            return
        self.stack.append(tag)
        if tag == "article":
            self.in_article += 1
        if tag in BLOCKS:
            self.buf[len(self.stack)] = []

    def handle_endtag(self, tag):
        if tag not in self.stack:
            return
        while self.stack:
            open_tag = self.stack.pop()
            parts = self.buf.pop(len(self.stack) + 1, None)
            if parts is not None and self.in_article:
                self.out.append((open_tag, "".join(parts)))
            if open_tag == "article":
                self.in_article -= 1
            if open_tag == tag:
                break

    def handle_data(self, data):
        inline_code = "code" in self.stack and "pre" not in self.stack
        for depth in self.buf:
            if not inline_code or self.stack[depth - 1] == "pre":
                self.buf[depth].append(data)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """(the built site's folder, its URL on 127.0.0.1)."""
    if not CHROMIUM:
        pytest.skip("no chromium: bash scripts/system-packages.sh chromium (scripts/ci-site.sh installs it)")
    out = Path(os.environ.get("SITE_DIR") or tmp_path_factory.mktemp("site"))
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)]
    subprocess.run(build, cwd=REPO, env=env, check=True, timeout=300)
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield out, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def _chromium(profile: Path, *args: str) -> str:
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, (cmd, out.stderr[-2000:])
    return out.stdout


PAGES = [p for p in pages() if p.startswith("docs/")]


@pytest.fixture(scope="session")
def rendered(site, tmp_path_factory) -> Dict[str, str]:
    """Every page's DOM once Chromium has rendered it; four browsers at a time (each mostly waits)."""
    _, url = site
    profiles = tmp_path_factory.mktemp("profiles")

    def render(index_page):
        index, page = index_page
        return page, _chromium(profiles / str(index), "--dump-dom", url + _url(page))

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(render, enumerate(PAGES)))


def _url(page: str) -> str:
    rel = page[len("docs/") : -len(".md")]
    return "/" if rel == "index" else f"/{rel}/"


@pytest.mark.parametrize("page", PAGES)
def test_the_page_shows_no_markdown_source(page, site, rendered, tmp_path):
    root, url = site
    text = _Text()
    text.feed(rendered[page])
    assert text.out, f"{page}: the rendered page has no article text"
    found = [
        f"{name} in <{ctx}>: {text[max(0, m.start() - 60) : m.end() + 20]!r}"
        for ctx, text in text.out
        for name, pattern, where in SOURCE
        if ctx in where
        for m in [pattern.search(text)]
        if m
    ]
    assert not found, f"{page} ({url + _url(page)}) shows Markdown as source:\n" + "\n".join(found)
    if page == "docs/index.md":
        shot = root / "screenshots" / "home.png"
        shot.parent.mkdir(exist_ok=True)
        _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,1600", url + "/")
        assert shot.stat().st_size > 10_000
