"""The curated snippets: ``GET /api/snippets`` and ``GET /api/snippets/{name}``."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from gradstep import snippets

router = APIRouter()


@router.get("/api/snippets", response_model=list[snippets.SnippetInfo], summary="The curated snippets")
def list_snippets() -> list[snippets.SnippetInfo]:
    return [snippets.SnippetInfo(**s.model_dump(exclude={"code"})) for s in snippets.load_all().values()]


@router.get(
    "/api/snippets/{name}", response_model=snippets.Snippet, summary="One curated snippet with its code"
)
def get_snippet(name: str) -> snippets.Snippet:
    found = snippets.load_all().get(name)
    if found is None:
        raise HTTPException(404, f"No snippet named {name!r}; GET /api/snippets lists them.")
    return found
