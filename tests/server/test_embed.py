"""/embed, /oembed and the frame headers (server/gradstep/embed.py), through the real app.

The frame's behaviour in a browser (cross-origin framing, messages, bad parameters shown in the
frame) is checked in Chromium by tests/browser/test_browser_embed.py.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from fastapi.testclient import TestClient
from gradstep import snippets
from gradstep.app import create_app
from gradstep.embed import parse_frame_ancestors
from gradstep.permalink import decode_code, encode_code
from gradstep.settings import Settings

BASE = "http://testserver"
CODE = "import torch\nx = torch.ones(3, requires_grad=True)\n(x * 2).sum().backward()\n"
SNIPPET = "retain_graph_accumulates"


@pytest.fixture(scope="module")
def client():
    # No lifespan: these routes never run a snippet, so no sandbox is started.
    return TestClient(create_app(Settings(public_url=BASE)))


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[dict] = []
        self.iframes: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "link":
            self.links.append(dict(attrs))
        elif tag == "iframe":
            self.iframes.append(dict(attrs))


def parsed(html: str) -> Links:
    p = Links()
    p.feed(html)
    return p


def oembed_links(html: str) -> list[dict]:
    return [a for a in parsed(html).links if a.get("type") == "application/json+oembed"]


# ---------------------------------------------------------------- /embed and headers


def test_embed_page_is_served_with_its_module(client):
    r = client.get(f"/embed?snippet={SNIPPET}")
    assert r.status_code == 200
    assert re.search(r'<script type="module" src="/static/embed-page\.js\?v=\w+">', r.text)


@pytest.mark.parametrize("path", ["/", f"/embed?snippet={SNIPPET}", "/embed?snippet=nope"])
def test_pages_carry_their_icon_inline_so_no_favicon_request_404s(client, path):
    icons = [a for a in parsed(client.get(path).text).links if a.get("rel") == "icon"]
    assert len(icons) == 1 and icons[0]["href"].startswith("data:image/svg+xml,")
    assert client.get("/favicon.ico").status_code == 404  # what a page without one would have asked for


def test_embed_page_names_the_snippet_in_its_title(client):
    r = client.get(f"/embed?snippet={SNIPPET}")
    assert f"<title>gradstep: {snippets.load_all()[SNIPPET].title}</title>" in r.text


def csp(response) -> dict[str, str]:
    """The response's Content-Security-Policy as {directive: sources}."""
    directives = (d.strip().split(" ", 1) for d in response.headers["content-security-policy"].split(";"))
    return {d[0]: d[1] if len(d) > 1 else "" for d in directives}


def test_embed_may_be_framed_by_any_page_by_default(client):
    r = client.get("/embed")
    assert csp(r)["frame-ancestors"] == "*"
    assert "x-frame-options" not in r.headers


def test_app_page_may_only_be_framed_by_itself(client):
    r = client.get("/")
    assert csp(r)["frame-ancestors"] == "'self'"
    assert r.headers["x-frame-options"] == "SAMEORIGIN"


def test_api_docs_may_only_be_framed_by_itself():
    r = TestClient(create_app(Settings(api_docs=True))).get("/docs")
    assert r.headers["x-frame-options"] == "SAMEORIGIN" and csp(r)["frame-ancestors"] == "'self'"


def test_frame_ancestors_setting_is_sent_by_the_embed():
    app = create_app(Settings(frame_ancestors="https://*.example.edu 'self'"))
    r = TestClient(app).get("/embed")
    assert csp(r)["frame-ancestors"] == "https://*.example.edu 'self'"


@pytest.mark.parametrize(
    "path", ["/", f"/embed?snippet={SNIPPET}", "/embed", "/static/app.js", "/api/snippets", "/nope"]
)
def test_every_response_allows_scripts_only_from_this_origin(client, path):
    policy = csp(client.get(path))
    assert policy["default-src"] == "'self'" and policy["script-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["base-uri"] == "'none'"
    assert "unsafe" not in policy["script-src"] and "*" not in policy["default-src"]


class Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self.scripts.append(dict(attrs))


@pytest.mark.parametrize("path", ["/", f"/embed?snippet={SNIPPET}", "/embed"])
def test_pages_have_no_inline_script_the_policy_would_block(client, path):
    p = Scripts()
    p.feed(client.get(path).text)
    assert p.scripts
    for script in p.scripts:  # a module from /static, or data the page reads (never executed)
        assert script.get("src", "").startswith("/static/") or script.get("type") == "application/json"
        assert not any(name.startswith("on") for name in script)


def test_frame_ancestors_setting_names_who_may_message_the_frame():
    app = create_app(Settings(frame_ancestors="https://lms.example.edu"))
    config = re.search(
        r'id="gs-config" type="application/json">(.*?)</script>', TestClient(app).get("/embed").text
    )
    assert '"parents": ["https://lms.example.edu"]' in config.group(1)


def test_open_framing_lets_any_parent_window_message_the_frame(client):
    config = re.search(r'id="gs-config" type="application/json">(.*?)</script>', client.get("/embed").text)
    assert '"parents": null' in config.group(1)


@pytest.mark.parametrize(
    "bad", ["", "https://a.edu; script-src *", "https://a.edu,https://b.edu", "'none' https://a.edu"]
)
def test_a_frame_ancestors_setting_that_is_not_a_source_list_stops_the_server_with_a_message(bad):
    with pytest.raises(ValueError, match="GRADSTEP_FRAME_ANCESTORS"):
        create_app(Settings(frame_ancestors=bad))


def test_frame_ancestors_accepts_keywords_schemes_and_wildcard_hosts():
    value = "'self' https: https://*.example.edu:443 lms.example.org http://127.0.0.1:8000"
    assert parse_frame_ancestors(value) == value.split()


# ---------------------------------------------------------------- oEmbed discovery


def test_snippet_embed_page_links_its_oembed(client):
    (link,) = oembed_links(client.get(f"/embed?snippet={SNIPPET}").text)
    target = parse_qs(urlsplit(link["href"]).query)
    assert link["href"].startswith(f"{BASE}/oembed?")
    assert target == {"url": [f"{BASE}/embed?snippet={SNIPPET}"], "format": ["json"]}


def test_snippet_app_page_links_its_oembed(client):
    (link,) = oembed_links(client.get(f"/?snippet={SNIPPET}").text)
    assert parse_qs(urlsplit(link["href"]).query)["url"] == [f"{BASE}/?snippet={SNIPPET}"]


def test_page_without_a_snippet_in_its_query_has_no_oembed_link(client):
    # its code, if any, is in the fragment, which a CMS fetching the page never sends
    assert oembed_links(client.get("/embed").text) == []


# ---------------------------------------------------------------- /oembed


def oembed(client, url: str, **params):
    return client.get("/oembed", params={"url": url, **params})


def iframe_src(body: dict) -> str:
    (frame,) = parsed(body["html"]).iframes
    return frame["src"]


def test_oembed_of_a_snippet_url_is_a_rich_iframe_of_its_embed(client):
    r = oembed(client, f"{BASE}/?snippet={SNIPPET}")
    body = r.json()
    assert r.status_code == 200
    assert (body["version"], body["type"], body["provider_name"]) == ("1.0", "rich", "gradstep")
    assert iframe_src(body) == f"{BASE}/embed?snippet={SNIPPET}"
    assert body["title"] == f"gradstep: {snippets.load_all()[SNIPPET].title}"


def test_oembed_of_a_permalink_keeps_the_code_and_step_in_the_fragment(client):
    body = oembed(client, f"{BASE}/#code={encode_code(CODE)}&step=3").json()
    src = urlsplit(iframe_src(body))
    assert src.path == "/embed" and src.query == ""
    fragment = parse_qs(src.fragment)
    assert decode_code(fragment["code"][0]) == CODE
    assert fragment["step"] == ["3"]


def test_oembed_keeps_theme_and_editor_of_an_embed_url(client):
    src = iframe_src(oembed(client, f"{BASE}/embed?snippet={SNIPPET}&theme=dark&editor=hidden").json())
    assert parse_qs(urlsplit(src).query) == {"snippet": [SNIPPET], "theme": ["dark"], "editor": ["hidden"]}


def test_oembed_iframe_fits_maxwidth_and_maxheight(client):
    body = oembed(client, f"{BASE}/?snippet={SNIPPET}", maxwidth="420", maxheight="300").json()
    frame = parsed(body["html"]).iframes[0]
    assert (body["width"], body["height"]) == (420, 300)
    assert (frame["width"], frame["height"]) == ("420", "300")


def test_oembed_never_grows_past_its_default_size(client):
    body = oembed(client, f"{BASE}/?snippet={SNIPPET}", maxwidth="5000", maxheight="5000").json()
    assert body["width"] <= 5000 and body["height"] <= 5000
    small = oembed(client, f"{BASE}/?snippet={SNIPPET}").json()
    assert (body["width"], body["height"]) == (small["width"], small["height"])


@pytest.mark.parametrize("value", ["0", "-3", "wide", "1.5"])
def test_oembed_maxwidth_must_be_a_positive_integer(client, value):
    r = oembed(client, f"{BASE}/?snippet={SNIPPET}", maxwidth=value)
    assert r.status_code == 400
    assert "maxwidth" in r.json()["error"]


# Numbers that str.isdigit() takes and int() does not (a superscript, 5,000 digits: int's limit),
# other scripts' digits, and whitespace or signs around digits: each a 400, never a 500.
MALFORMED = ["\u00b2", "\u0661\u0662", "9" * 5000, "1" * 40, " 5", "+5", "5\n", "\uff15"]


@pytest.mark.parametrize("name", ["maxwidth", "maxheight"])
@pytest.mark.parametrize("value", MALFORMED)
def test_oembed_answers_400_never_500_for_malformed_numbers(client, name, value):
    r = oembed(client, f"{BASE}/?snippet={SNIPPET}", **{name: value})  # a 500 would raise here
    assert r.status_code == 400, r.text[:200]
    assert name in r.json()["error"]


@pytest.mark.parametrize("value", MALFORMED)
def test_oembed_of_a_url_with_a_malformed_step_is_refused_not_passed_on(client, value):
    r = oembed(client, f"{BASE}/embed?{urlencode({'snippet': SNIPPET, 'step': value})}")
    assert r.status_code == 404 and "step" in r.json()["error"]


def test_oembed_xml_is_not_implemented(client):
    r = oembed(client, f"{BASE}/?snippet={SNIPPET}", format="xml")
    assert r.status_code == 501
    assert "json" in r.json()["error"]


@pytest.mark.parametrize(
    "url",
    [
        f"https://evil.example/?snippet={SNIPPET}",
        f"{BASE}/api/trace?snippet={SNIPPET}",
        f"javascript://testserver/?snippet={SNIPPET}",
        "not a url",
    ],
)
def test_oembed_refuses_urls_that_are_not_this_servers_app_or_embed(client, url):
    r = oembed(client, url)
    assert r.status_code == 404
    assert "Not a gradstep URL" in r.json()["error"]


def test_oembed_of_an_unknown_snippet_says_so(client):
    r = oembed(client, f"{BASE}/?snippet=no_such_thing")
    assert r.status_code == 404
    assert "no_such_thing" in r.json()["error"]


def test_oembed_of_corrupt_code_says_so(client):
    r = oembed(client, f"{BASE}/#code=AAAA{encode_code(CODE)[8:]}")
    assert r.status_code == 404
    assert "code" in r.json()["error"]


def test_oembed_of_an_unknown_theme_says_so(client):
    r = oembed(client, f"{BASE}/embed?snippet={SNIPPET}&theme=purple")
    assert r.status_code == 404
    assert "theme" in r.json()["error"]


def test_oembed_html_escapes_what_it_embeds(client):
    body = oembed(client, f"{BASE}/embed?snippet={SNIPPET}&step=2").json()
    assert "&amp;" in body["html"] or "&" not in iframe_src(body)
    assert parsed(body["html"]).iframes[0]["title"] == body["title"]


def test_snippet_embed_page_carries_the_snippets_code(client):
    text = client.get(f"/embed?snippet={SNIPPET}").text
    config = re.search(r'id="gs-config" type="application/json">(.*?)</script>', text).group(1)
    assert json.loads(config)["code"] == {SNIPPET: snippets.load_all()[SNIPPET].code}


def test_oembed_format_that_oembed_does_not_define_is_a_clear_400(client):
    r = oembed(client, f"{BASE}/?snippet={SNIPPET}", format="yaml")
    assert r.status_code == 400
    assert "format=json" in r.json()["error"]


# ---------------------------------------------------------------- public URLs, never the Host header


def test_oembed_urls_come_from_the_public_url_not_the_host_header(client):
    r = client.get("/oembed", params={"url": f"{BASE}/?snippet={SNIPPET}"}, headers={"host": "evil.example"})
    body = r.json()
    assert iframe_src(body) == f"{BASE}/embed?snippet={SNIPPET}"
    assert body["provider_url"] == f"{BASE}/" and "evil" not in r.text


@pytest.mark.parametrize("path", [f"/?snippet={SNIPPET}", f"/embed?snippet={SNIPPET}"])
def test_discovery_links_come_from_the_public_url_not_the_host_header(client, path):
    (link,) = oembed_links(client.get(path, headers={"host": "evil.example"}).text)
    assert link["href"].startswith(f"{BASE}/oembed?") and "evil" not in link["href"]
    assert parse_qs(urlsplit(link["href"]).query)["url"] == [BASE + path]


def test_an_oembed_url_on_the_requests_host_is_not_taken_for_this_server(client):
    r = client.get(
        "/oembed",
        params={"url": f"https://evil.example/?snippet={SNIPPET}"},
        headers={"host": "evil.example"},
    )
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("settings", "public"),
    [
        (Settings(host="127.0.0.1", port=8123), "http://127.0.0.1:8123"),
        (Settings(host="0.0.0.0", port=8000), "http://localhost:8000"),
        (Settings(public_url="https://gradstep.example.edu/"), "https://gradstep.example.edu"),
    ],
)
def test_without_a_public_url_the_servers_own_address_is_used(settings, public):
    r = TestClient(create_app(settings)).get(
        "/oembed", params={"url": f"{public}/?snippet={SNIPPET}"}, headers={"host": "evil.example"}
    )
    assert iframe_src(r.json()) == f"{public}/embed?snippet={SNIPPET}"


@pytest.mark.parametrize("bad", ["gradstep.example.edu", "https://x.edu/app", "ftp://x.edu", "https://"])
def test_a_public_url_that_is_not_an_origin_stops_the_server_with_a_message(bad):
    with pytest.raises(ValueError, match="GRADSTEP_PUBLIC_URL"):
        create_app(Settings(public_url=bad))
