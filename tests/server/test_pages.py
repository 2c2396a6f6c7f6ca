"""The app's page and the front end's files (server/gradstep/pages.py, routes/pages.py), through the
real app: what a browser or a cache is told, and what the server answers without its front end.

CSP and framing headers, /embed and /oembed are pinned in test_embed.py; /docs in test_api.py.
"""

from __future__ import annotations

import json
import re

import pytest
from fastapi.testclient import TestClient
from gradstep import pages, snippets
from gradstep.app import create_app
from gradstep.settings import Settings

BASE = "http://testserver"
SNIPPET = "retain_graph_accumulates"


@pytest.fixture(scope="module")
def client():
    # No lifespan: these routes never run a snippet, so no sandbox is started.
    return TestClient(create_app(Settings(public_url=BASE)))


@pytest.fixture(scope="module")
def without_front_end():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pages, "frontend_dir", lambda: None)
        yield TestClient(create_app(Settings(public_url=BASE)))


def script_json(text: str, id_: str) -> str:
    return re.search(rf'id="{id_}" type="application/json">(.*?)</script>', text).group(1)


def test_app_page_lists_every_curated_snippet(client):
    text = client.get("/").text
    listed = [s["name"] for s in json.loads(script_json(text, "gs-snippets"))]
    assert listed == list(snippets.load_all())


def test_app_page_asks_for_its_files_by_the_version_it_names(client):
    text = client.get("/").text
    version = json.loads(script_json(text, "gs-config"))["version"]
    assert f'src="/static/app.js?v={version}"' in text
    assert f'href="/static/style.css?v={version}"' in text


def test_front_end_files_are_revalidated_so_a_new_build_is_never_mixed_with_an_old_one(client):
    r = client.get("/static/app.js")
    assert r.status_code == 200 and r.headers["cache-control"] == "no-cache"
    assert r.headers["content-type"].startswith("text/javascript")


@pytest.mark.parametrize(
    "path",
    ["/static/package.json", "/static/build.mjs", "/static/node_modules/d3/index.js", "/static/.env.js"],
)
def test_build_inputs_and_dotfiles_are_not_served(client, path):
    r = client.get(path)
    assert r.status_code == 404 and r.json() == {"error": "Not Found"}


@pytest.mark.parametrize("path", ["/", "/embed", f"/embed?snippet={SNIPPET}", "/static/app.js", "/nope"])
def test_every_response_forbids_content_type_sniffing(client, path):
    assert client.get(path).headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", ["/", f"/?snippet={SNIPPET}", "/embed", f"/embed?snippet={SNIPPET}"])
def test_without_its_front_end_a_page_is_a_503_that_says_where_to_put_it(without_front_end, path):
    r = without_front_end.get(path)
    assert r.status_code == 503
    assert "GRADSTEP_FRONTEND" in r.json()["error"]


def test_without_its_front_end_no_files_are_served(without_front_end):
    assert without_front_end.get("/static/app.js").status_code == 404


def test_without_its_front_end_the_api_and_oembed_still_answer(without_front_end):
    assert without_front_end.get("/api/snippets").status_code == 200
    r = without_front_end.get("/oembed", params={"url": f"{BASE}/?snippet={SNIPPET}"})
    assert r.status_code == 200 and r.json()["provider_url"] == f"{BASE}/"


def test_oembed_says_how_long_it_may_be_cached(client):
    r = client.get("/oembed", params={"url": f"{BASE}/?snippet={SNIPPET}"})
    assert r.json()["cache_age"] == 3600
