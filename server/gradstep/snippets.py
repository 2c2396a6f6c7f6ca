"""The curated snippets: one concept each, with a docstring header (title, explanation, what to watch)."""

from __future__ import annotations

import ast
import os
import sys
from functools import cache
from pathlib import Path

from pydantic import BaseModel


class SnippetInfo(BaseModel):
    name: str
    title: str
    summary: str
    watch: str
    fails: bool  # the snippet ends in an error on purpose


class Snippet(SnippetInfo):
    code: str


def snippets_dir() -> Path | None:
    """$GRADSTEP_SNIPPETS, the repository's snippets/, or the copy `pip install` puts under share/."""
    candidates = [os.environ.get("GRADSTEP_SNIPPETS")]
    candidates.append(str(Path(__file__).resolve().parents[2] / "snippets"))
    candidates.append(str(Path(sys.prefix) / "share" / "gradstep" / "snippets"))
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def parse(name: str, code: str) -> Snippet:
    doc = ast.get_docstring(ast.parse(code)) or name
    paragraphs = [p.strip() for p in doc.split("\n\n")]
    title = paragraphs[0].splitlines()[0]
    watch = next((p.removeprefix("Watch:").strip() for p in paragraphs if p.startswith("Watch:")), "")
    summary = (
        " ".join(paragraphs[1].split())
        if len(paragraphs) > 1 and not paragraphs[1].startswith("Watch:")
        else ""
    )
    return Snippet(
        name=name,
        title=title,
        summary=summary,
        watch=" ".join(watch.split()),
        fails="This snippet fails" in doc,
        code=code,
    )


@cache
def load_all() -> dict[str, Snippet]:
    folder = snippets_dir()
    if folder is None:
        return {}
    return {p.stem: parse(p.stem, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.py"))}
