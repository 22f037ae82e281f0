"""A griffe extension: aisio's docstrings, written for ``help()`` and Sphinx, read as Markdown.

aisio's docstrings are Google style with Sphinx's roles (``:func:`iter_tar```) and literal
blocks (a paragraph ending in ``::``), and head their doctests ``Example:``. mkdocstrings reads
Markdown, so before a docstring is parsed this rewrites, in the copy the docs build reads (the
sources are not touched):

- ``:role:`target``` into a cross-reference to the rendered object when the target resolves
  (``~`` shows the last name only, ``.name`` is relative to the module), else into code;
- ``Example:`` into ``Examples:``, the section griffe parses into text and doctest blocks;
- a trailing ``::`` into ``:`` (the indented block after it is code in both languages);
- on an entry point decorated with ``documents_pipe_options`` (which appends the pipeline
  options to its ``__doc__`` when the module is imported, and a static reader never sees it),
  a pointer to where those options are documented: :func:`aisio.webdataset_pipe`.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
EXAMPLE = re.compile(r"(?m)^(\s*)Example:\s*$")
LITERAL = re.compile(r"(?m)(\S)::$")


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of the package once it is loaded (see the module doc)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is None:
                continue
            text = obj.docstring.value
            decorators = getattr(obj, "decorators", ())
            if any("documents_pipe_options" in str(d.value) for d in decorators):
                text += ("\n\nPipeline options (the ``**options`` above, the same for every "
                         "loader): every option of :func:`aisio.webdataset_pipe` after ``shards``.")
            obj.docstring.value = rewrite(text, obj, pkg)


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)  # type: ignore[arg-type]


def _find(pkg: griffe.Module, path: str) -> str | None:
    if path == pkg.path:
        return path
    if not path.startswith(pkg.path + "."):
        return None
    try:
        pkg[path[len(pkg.path) + 1:]]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return path


def resolve(target: str, obj: griffe.Object, pkg: griffe.Module) -> str | None:
    """Returns the full path of the object ``target`` names in ``obj``'s docstring, or None."""
    module = obj if obj.is_module else obj.module
    if target.startswith("."):
        return _find(pkg, module.path + target)
    scopes = [obj.path, obj.parent.path if obj.parent else "", module.path, "", pkg.path]
    for scope in scopes:
        found = _find(pkg, f"{scope}.{target}" if scope else target)
        if found:
            return found
    return None


def rewrite(text: str, obj: griffe.Object, pkg: griffe.Module) -> str:
    """Returns ``text`` with Sphinx roles, ``Example:`` and ``::`` made Markdown."""

    def role(match: re.Match[str]) -> str:
        short, target = match.group(1), match.group(2).strip()
        shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
        path = resolve(target.rstrip("()"), obj, pkg)
        if path is None:
            return f"`{shown}`"
        return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'

    text = ROLE.sub(role, text)
    text = EXAMPLE.sub(r"\1Examples:", text)
    return LITERAL.sub(r"\1:", text)
