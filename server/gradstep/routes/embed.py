"""``GET /embed`` (the stepper for an ``<iframe>``) and ``GET /oembed``; what they serve is built by
``gradstep.embed``, which also has the frame headers every response carries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from gradstep import embed
from gradstep.pages import Frontend
from gradstep.routes import deps
from gradstep.settings import Settings

router = APIRouter()


@router.get("/embed", name="embed", include_in_schema=False, response_class=HTMLResponse)
def embed_page(
    request: Request,
    frontend: Annotated[Frontend, Depends(deps.frontend)],
    public: Annotated[str, Depends(deps.public)],
    settings: Annotated[Settings, Depends(deps.settings)],
) -> HTMLResponse:
    parents = embed.frame_parents(settings.frame_ancestors)
    return embed.embed_page(request, frontend, public, parents, settings.embed_run_origins.split())


@router.get(
    "/oembed",
    response_model=embed.OEmbed,
    summary="oEmbed for a gradstep URL (the app's or /embed, fragment included)",
    responses={
        400: {"description": "bad maxwidth/maxheight, or a format oEmbed does not define"},
        404: {"description": "Not a gradstep URL of this server, unknown snippet or corrupt code"},
        501: {"description": "format=xml (oEmbed's other format, not provided: the spec answers 501)"},
    },
)
def oembed(
    url: str,
    public: Annotated[str, Depends(deps.public)],
    maxwidth: str | None = None,
    maxheight: str | None = None,
    format: str = "json",
) -> embed.OEmbed:
    return embed.oembed(url, maxwidth, maxheight, format, public)
