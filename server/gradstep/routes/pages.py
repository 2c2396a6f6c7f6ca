"""``GET /``: the app's page (its files under ``/static`` are a mount of ``gradstep.app``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from gradstep.pages import Frontend, app_page
from gradstep.routes import deps
from gradstep.settings import Settings

router = APIRouter()


@router.get("/", include_in_schema=False, response_class=HTMLResponse)
def index(
    request: Request,
    frontend: Annotated[Frontend, Depends(deps.frontend)],
    public: Annotated[str, Depends(deps.public)],
    settings: Annotated[Settings, Depends(deps.settings)],
) -> HTMLResponse:
    return app_page(request, frontend, public, api_docs=settings.api_docs)
