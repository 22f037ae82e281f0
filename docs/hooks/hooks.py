"""MkDocs hooks: the pages drawn from aisio's own data, so they cannot drift from the code.

- The architecture page's map of the parts, from :data:`aisio._layers.LAYERS` and each part's
  docstring (``<!-- aisio:layers -->``), and one API page per part (the nav's "Parts").
- The error tree, from the exception classes themselves (``<!-- aisio:error-tree -->``); the
  tree drawn in ``aisio/core/faults/errors.py``'s docstring is held to the same classes.
- The loaders' options, from their one table
  (:data:`aisio.core.pipeline.loader_options.LOADER_OPTIONS`, ``<!-- aisio:loader-options -->``).
- The benchmark log (``benchmarks/README.md`` and its results) and ``CHANGELOG.md``, served
  from where they live in the repository.
- Checks, as build warnings (``mkdocs build --strict`` fails on them): every environment
  variable the package reads is on the environment page; every name of ``aisio.__all__`` is on
  the API page.
"""

from __future__ import annotations

import ast
import html
import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from aisio import _layers

log = logging.getLogger("mkdocs.hooks.aisio")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aisio"
PARTS_SECTION = "Parts of the package"
#: Parts that get no page of their own: the package's front (the API page) and a private helper.
NO_PAGE = ("aisio", "aisio._lazy")


def parts() -> list[str]:
    """Returns every part of :data:`~aisio._layers.LAYERS`, top down."""
    return [part for layer in _layers.LAYERS for part in layer]


def part_page(part: str) -> str:
    return f"reference/parts/{part}.md"


def part_source(part: str) -> Path:
    """Returns the file whose docstring describes ``part`` (a package's ``__init__.py``)."""
    path = ROOT.joinpath(*part.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def summary(part: str) -> str:
    """Returns the first sentence of ``part``'s docstring, read without importing it."""
    doc = ast.get_docstring(ast.parse(part_source(part).read_text())) or ""
    text = " ".join(doc.split("\n\n", 1)[0].split())
    text = re.sub(r":\w+:`~?\.?([^`]+)`", r"\1", text).replace("``", "")
    return re.split(r"(?<=[.:;])\s", text, maxsplit=1)[0].rstrip(".:;")


# -- configuration: the nav's pages of the parts -------------------------------------------------

def on_config(config: MkDocsConfig) -> MkDocsConfig:
    entries = [{part: part_page(part)} for part in parts() if part not in NO_PAGE]

    def fill(items: list[Any]) -> bool:
        for item in items:
            if isinstance(item, dict):
                for title, value in item.items():
                    if title == PARTS_SECTION:
                        item[title] = entries
                        return True
                    if isinstance(value, list) and fill(value):
                        return True
        return False

    if not fill(config.nav or []):
        log.warning(f"mkdocs.yml's nav has no section {PARTS_SECTION!r} for the parts' pages")
    return config


# -- files: pages made here, and files served from elsewhere in the repository -----------------

def on_files(files: Files, config: MkDocsConfig) -> Files:
    for part in parts():
        if part in NO_PAGE:
            continue
        below = [p for layer in _layers.LAYERS[_layers.layer_of(part) + 1:] for p in layer]
        own = [p for p in _layers.LAYERS[_layers.layer_of(part)] if p != part]
        text = (
            f"# `{part}`\n\n{summary(part)}.\n\n"
            f"It may import the parts below it: {', '.join(f'`{p}`' for p in below) or 'none'}"
            + (f" (not its neighbour {', '.join(f'`{p}`' for p in own)})" if own else "")
            + ". See [the architecture](../../design/architecture.md).\n\n"
            f"::: {part}\n    options:\n      show_submodules: true\n")
        files.append(File.generated(config, part_page(part), content=text))
    files.append(File.generated(config, "changelog.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    bench = ROOT / "benchmarks"
    files.append(File.generated(config, "benchmarks/README.md",
                                abs_src_path=str(bench / "README.md")))
    for path in sorted((bench / "results").rglob("*")):
        if path.is_file():
            files.append(File.generated(config, str(path.relative_to(ROOT)),
                                        abs_src_path=str(path)))
    return files


# -- pages: what is drawn from the code -----------------------------------------------------------

def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if "<!-- aisio:layers -->" in markdown:
        markdown = markdown.replace("<!-- aisio:layers -->", layers_map(page))
    if "<!-- aisio:error-tree -->" in markdown:
        markdown = markdown.replace("<!-- aisio:error-tree -->", error_tree())
        check_docstring_tree()
    if "<!-- aisio:loader-options -->" in markdown:
        from aisio.core.pipeline.loader_options import options_table

        markdown = markdown.replace("<!-- aisio:loader-options -->", options_table())
    if page.file.src_uri == "reference/environment.md":
        for name in sorted(environment_variables() - set(re.findall(r"`(\w+)`", markdown))):
            log.warning(f"aisio reads {name} but {page.file.src_uri} does not name it")
    SHOWN.update(re.findall(r"^::: aisio\.(\w+)\s*$", markdown, flags=re.M))
    return markdown


#: The public names shown by a ``::: aisio.NAME`` directive on some page of this build.
SHOWN: set[str] = set()


def on_pre_build(config: MkDocsConfig) -> None:
    SHOWN.clear()


def on_env(env: Any, config: MkDocsConfig, files: Files) -> Any:
    import aisio

    for name in sorted(set(aisio.__all__) - SHOWN):
        log.warning(f"aisio.{name} is in aisio.__all__ but no page shows it (::: aisio.{name})")
    return env


def layers_map(page: Page) -> str:
    """Returns the drawn map of :data:`~aisio._layers.LAYERS` (an SVG) and its table."""
    box_w, box_h, gap, row_gap, left = 250, 34, 16, 18, 40
    widest = max(len(layer) for layer in _layers.LAYERS)
    width = left + widest * box_w + (widest - 1) * gap + 20
    height = len(_layers.LAYERS) * (box_h + row_gap) + 10
    out = [f'<svg class="aisio-layers" role="img" viewBox="0 0 {width} {height}" '
           f'width="100%" xmlns="http://www.w3.org/2000/svg">',
           "<title>aisio's parts, top down: each may import only the parts below it</title>",
           f'<line x1="18" y1="12" x2="18" y2="{height - 18}" stroke="currentColor" '
           'stroke-width="2"/>',
           f'<polygon points="11,{height - 22} 25,{height - 22} 18,{height - 6}" '
           'fill="currentColor"/>']
    for row, layer in enumerate(_layers.LAYERS):
        y = 6 + row * (box_h + row_gap)
        core = layer[0].startswith("aisio.core.")
        for col, part in enumerate(layer):
            x = left + col * (box_w + gap)
            href = ("../reference/api.md" if part in NO_PAGE
                    else f"../reference/parts/{part}.md")
            href = href.replace(".md", ".html") if not page.file.use_directory_urls else href
            out.append(
                f'<a href="{html.escape(href)}"><title>{html.escape(summary(part))}</title>'
                f'<rect x="{x}" y="{y}" width="{box_w}" '
                f'height="{box_h}" rx="6" class="{"core" if core else "front"}"/>'
                f'<text x="{x + box_w / 2}" y="{y + box_h / 2 + 5}" text-anchor="middle">'
                f"{html.escape(part)}</text></a>")
    out.append("</svg>")
    rows = ["| layer | part | what it is |", "| ---: | --- | --- |"]
    for row, layer in enumerate(_layers.LAYERS):
        for part in layer:
            link = ("[`aisio`](../reference/api.md)" if part in NO_PAGE
                    else f"[`{part}`](../reference/parts/{part}.md)")
            rows.append(f"| {row} | {link} | {summary(part)} |")
    return "\n".join(out) + "\n\n" + "\n".join(rows) + "\n"


def error_classes() -> dict[type, list[type]]:
    """Returns each aisio error class's direct subclasses, in the order they are defined."""
    from aisio.core.faults import errors

    order = list(vars(errors))
    tree: dict[type, list[type]] = {}
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.AISIOError):
            tree[cls] = sorted((c for c in cls.__subclasses__()
                                if vars(errors).get(c.__name__) is c),
                               key=lambda c: order.index(c.__name__))
    return tree


def error_tree() -> str:
    """Returns the exception tree, drawn from the classes, each name linking to its entry."""
    from aisio.core.faults.errors import AISIOError, is_skippable

    tree = error_classes()
    lines: list[str] = []
    names: list[str] = []

    def gist(cls: type) -> str:
        doc = " ".join((cls.__doc__ or "").split()).replace("``", "")
        doc = re.split(r"(?<=\.)\s|:\s", doc, maxsplit=1)[0]
        return re.sub(r"\s*\(.*", "", doc).rstrip(".")

    def draw(cls: type, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("└── " if last else "├── ")
        name = cls.__name__
        mark = " (skippable)" if depth == 1 and is_skippable(cls.__new__(cls)) else ""
        pad = " " * max(1, 36 - len(prefix + branch + name + mark))
        link = f'<a href="#aisio.{name}">{name}</a>'
        names.append(name)
        lines.append(f"{prefix}{branch}{link}{mark}{pad}{html.escape(gist(cls))}")
        children = tree.get(cls, [])
        for i, child in enumerate(children):
            more = "" if depth == 0 else ("    " if last else "│   ")
            draw(child, prefix + more, i == len(children) - 1, depth + 1)

    draw(AISIOError, "", True, 0)
    entries = [f"::: aisio.{name}\n" for name in names]
    return ('<div class="language-text highlight aisio-tree"><pre><code>'
            + "\n".join(lines) + "</code></pre></div>\n\n"
            + "## Each error\n\n" + "\n".join(entries))


def check_docstring_tree() -> None:
    """Warns where the tree drawn in errors.py's docstring differs from the classes."""
    from aisio.core.faults import errors

    drawn = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^\s*((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w*Error)\b", line)
        if match:
            drawn.append((len(match.group(1)) // 4 + (1 if "──" in line else 0), match.group(2)))
    actual: list[tuple[int, str]] = []

    def walk(cls: type, depth: int) -> None:
        actual.append((depth, cls.__name__))
        for child in error_classes().get(cls, []):
            walk(child, depth + 1)

    walk(errors.AISIOError, 0)
    if sorted(drawn, key=lambda d: d[1]) != sorted(actual, key=lambda d: d[1]):
        log.warning("the tree in aisio/core/faults/errors.py's docstring differs from the classes:"
                    f" drawn {sorted(set(drawn) ^ set(actual))}")


ENV_READ = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']""")


def environment_variables() -> set[str]:
    """Returns the names of the environment variables the package reads."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        names.update(ENV_READ.findall(path.read_text()))
    from aisio.core.store.config import ENV_VARS
    from aisio.core.system.memory import _USER_SETTINGS

    return names | set(ENV_VARS.values()) | set(_USER_SETTINGS)
