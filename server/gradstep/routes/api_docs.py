"""``GET /docs``: Swagger UI. It loads from a CDN, so ``gradstep.app`` includes this router only
with the api_docs setting (GRADSTEP_API_DOCS=1); ``/openapi.json`` is always served."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from gradstep.pages import swagger_page

router = APIRouter()


@router.get("/docs", include_in_schema=False)
def docs(request: Request) -> HTMLResponse:
    html, policy = swagger_page(request.app.openapi_url or "/openapi.json", f"{request.app.title} API")
    return HTMLResponse(html, headers={"Content-Security-Policy": policy})
