"""A stored trace inflated for a client that takes no encoding: a chunk at a time, the JSON whole,
and a client that stops taking chunks given up rather than held."""

from __future__ import annotations

import asyncio

import orjson
from gradstep.encoding import INFLATE_CHUNK, InflatedJSON, compress, decompress


def serve(stored_json: bytes, send, send_timeout: float = 30.0) -> None:
    br = compress(stored_json)[len(b"gradstep-br\n") :]
    asyncio.run(InflatedJSON(br, {"X-Gradstep-Cache": "hit"}, send_timeout)({"type": "http"}, None, send))


def test_the_json_arrives_whole_in_bounded_chunks():
    body = orjson.dumps({"stdout": "x" * 3_000_000, "steps": list(range(1000))})
    messages = []

    async def send(message):
        messages.append(message)

    serve(body, send)
    start, *chunks = messages
    assert start["status"] == 200 and (b"x-gradstep-cache", b"hit") in start["headers"]
    assert b"".join(m["body"] for m in chunks) == body
    assert max(len(m["body"]) for m in chunks) <= 2 * INFLATE_CHUNK
    assert [m["more_body"] for m in chunks] == [True] * (len(chunks) - 1) + [False]


def test_a_client_that_stops_reading_is_given_up():
    body = orjson.dumps({"stdout": "x" * 3_000_000})
    sent = []

    async def send(message):
        if message["type"] == "http.response.body" and len(sent) == 2:
            await asyncio.sleep(3600)  # takes the first chunk, never the second
        sent.append(message)

    serve(body, send, send_timeout=0.2)  # returns instead of waiting an hour
    assert len(sent) == 2 and sum(len(m.get("body", b"")) for m in sent) < len(body)


def test_the_stored_form_round_trips():
    body = orjson.dumps({"a": 1})
    assert decompress(compress(body)) == body
