"""The documentation site as a reader sees it: the built pages, opened in headless Chromium.

``make docs`` builds the site (``mkdocs build --strict``) and runs this file with
``AISIO_DOCS_SITE`` pointing at it; run alone, the file builds the site itself. Chromium is
Debian's package (``scripts/bootstrap.sh --browser`` installs it); where it is missing these
tests skip, except in CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

import aisio
from aisio import _layers
from aisio.core.faults import errors as faults

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Returns the built site: ``$AISIO_DOCS_SITE``, else a strict build made here."""
    given = os.environ.get("AISIO_DOCS_SITE")
    if given:
        path = Path(given)
        path = path if path.is_absolute() else ROOT / path
        assert (path / "index.html").is_file(), f"AISIO_DOCS_SITE={given}: no index.html there"
        return path
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Returns the command line of a headless Chromium with a profile of its own."""
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        message = ("Chromium is not installed: scripts/bootstrap.sh --browser installs it "
                   "(apt-get install chromium)")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    profile = tmp_path_factory.mktemp("chromium-profile")
    return [found, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1280,900"]


def run(browser: list[str], *args: str) -> str:
    done = subprocess.run([*browser, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Page(HTMLParser):
    """What a DOM holds that these tests look at: ids, links, classes, and the visible text
    of chosen elements."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.copy_buttons = 0
        self.classes: list[str] = []
        self.texts: dict[str, list[str]] = {}  # class -> text of each element with it
        self._open: list[tuple[str, list[str]]] = []
        self._hidden = 0
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "button" and values.get("data-md-type") == "copy":
            self.copy_buttons += 1
        if tag == "a" and values.get("href"):
            self.links.append(values["href"] or "")
        classes = (values.get("class") or "").split()
        self.classes.extend(classes)
        if tag in ("script", "style", "title"):
            self._hidden += 1
        if tag not in VOID:
            self._open.append((tag, classes))
            for name in classes:
                self.texts.setdefault(name, []).append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self._open.pop()

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "title"):
            self._hidden -= 1
        if any(opened == tag for opened, _ in self._open):
            while self._open.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        self.text.append(data)
        for _, classes in self._open:
            for name in classes:
                self.texts[name][-1] += data

    def shown(self, css_class: str) -> list[str]:
        """Returns the text of each element of that class, whitespace squeezed."""
        return [" ".join(t.split()) for t in self.texts.get(css_class, [])]


_DOMS: dict[Path, Page] = {}


def dom(browser: list[str], site: Path, page: str) -> Page:
    """Returns the page's DOM once Chromium has loaded it and run its scripts (once a page)."""
    path = site / page
    if path not in _DOMS:
        _DOMS[path] = Page(run(browser, "--virtual-time-budget=5000", "--dump-dom",
                               path.as_uri()))
    return _DOMS[path]


def nav_titles(items: list[object]) -> list[str]:
    titles = []
    for item in items:
        if isinstance(item, dict):
            for title, value in item.items():
                titles.append(title)
                if isinstance(value, list):
                    titles += nav_titles(value)
    return titles


def test_every_page_of_the_nav_is_in_the_sidebar_and_the_scripts_ran(
        site: Path, browser: list[str]) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    page = dom(browser, site, "index.html")
    sidebar = set(page.shown("md-nav__link"))
    missing = [t for t in nav_titles(config["nav"]) if t not in sidebar]
    assert not missing, f"not in the sidebar: {missing}"
    parts = [p for layer in _layers.LAYERS for p in layer if p not in ("aisio", "aisio._lazy")]
    assert set(parts) <= sidebar, set(parts) - sidebar
    # Material's script adds a copy button to every code block: proof that it ran from disk.
    blocks = page.classes.count("highlight")
    assert blocks >= 1 and page.copy_buttons == blocks


def test_the_api_reference_shows_every_public_name_with_its_signature(
        site: Path, browser: list[str]) -> None:
    page = dom(browser, site, "reference/api.html")
    errors = dom(browser, site, "reference/errors.html")
    missing = [n for n in aisio.__all__ if f"aisio.{n}" not in page.ids | errors.ids]
    assert not missing, f"no entry for {missing}"
    signatures = " ".join(page.shown("doc-signature"))
    assert "webdataset_dataloader(" in signatures and "num_workers" in signatures
    assert "Parameters:" in " ".join(page.text)
    # A docstring's Sphinx role became a link to what it names.
    assert any(link.endswith("#aisio.AISConfig") for link in page.links)


def test_the_error_tree_is_drawn_with_every_error(site: Path, browser: list[str]) -> None:
    page = dom(browser, site, "reference/errors.html")
    (tree,) = page.shown("aisio-tree")
    errors = [n for n in aisio.__all__ if isinstance(getattr(faults, n, None), type)
              and issubclass(getattr(faults, n), faults.AISIOError)]
    assert [n for n in errors if n not in tree] == []
    assert "NotFoundError (skippable)" in tree and "├── " in tree and "└── " in tree


def test_the_architecture_map_draws_every_part(site: Path, browser: list[str]) -> None:
    page = dom(browser, site, "design/architecture.html")
    (svg,) = page.shown("aisio-layers")
    parts = [p for layer in _layers.LAYERS for p in layer]
    assert [p for p in parts if p not in svg] == []


ID = re.compile(r'\sid="([^"]*)"')
HREF = re.compile(r'<a\s[^>]*?href="([^"]*)"')


def test_every_internal_link_and_anchor_resolves(site: Path) -> None:
    # MkDocs writes every attribute in double quotes: two patterns read the ids and links of
    # 3 MB of pages in a fraction of the parser's time. 404.html links from the server's
    # root, wherever it is served: not a page of the tree.
    pages = {p: p.read_text() for p in site.rglob("*.html") if p.name != "404.html"}
    ids = {p: {html.unescape(i) for i in ID.findall(text)} for p, text in pages.items()}
    broken = []
    for path, text in pages.items():
        for link in map(html.unescape, HREF.findall(text)):
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue  # external: not fetched
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link}")
            elif parts.fragment and target in ids and unquote(parts.fragment) not in ids[target]:
                broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:50])


def test_the_readme_links_to_files_of_the_repository() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not urlsplit(link).scheme]
    assert local, "the README links into the docs"
    assert [link for link in local if not (ROOT / urlsplit(link).path).exists()] == []


def test_a_page_renders_text_a_person_can_read(site: Path, browser: list[str],
                                               tmp_path: Path) -> None:
    from PIL import Image

    shot = tmp_path / "api.png"
    run(browser, "--virtual-time-budget=5000", f"--screenshot={shot}",
        (site / "reference" / "api.html").as_uri())
    image = Image.open(shot).convert("L")
    width, height = image.size
    assert (width, height) == (1280, 900)
    dark = [v < 128 for v in image.tobytes()]

    # The header: a dark bar across the top.
    assert sum(dark[:48 * width]) > 0.5 * 48 * width, "no header bar"
    # Below it, three columns of ink on a light page, apart by blank bands: the navigation,
    # the content (the widest) and its table of contents. A blank, unstyled or one-column
    # page has fewer.
    inked = [any(dark[y * width + x] for y in range(60, height)) for x in range(width)]
    columns: list[list[int]] = []
    gap = 30
    for x, ink in enumerate(inked):
        if ink:
            if columns and x - columns[-1][1] <= gap:
                columns[-1][1] = x
            else:
                columns.append([x, x])
    widths = [right - left for left, right in columns]
    assert len(columns) == 3, f"columns of ink at {columns}"
    assert widths[1] == max(widths) and widths[1] > width // 3, f"columns of ink at {columns}"
    assert sum(dark[60 * width:]) < 0.3 * (height - 60) * width, "mostly dark: unstyled?"
