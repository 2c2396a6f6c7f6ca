"""A snippet's code in a URL: ``code=<c>``, c = base64url (no padding) of raw DEFLATE of the UTF-8 code.

The same codec as frontend/permalink.js (``new CompressionStream("deflate-raw")``), so a link
made by the browser's Share button decodes here (oEmbed) and the other way round.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from urllib.parse import parse_qsl, urlencode

MAX_CODE_BYTES = 64 * 1024  # the API's request limit: a longer snippet could never run anyway
# Characters of `c`: 64 KB of code never deflates to more than itself plus a few bytes of block
# headers (incompressible data is stored), ~87,400 base64url characters; frontend/permalink.js
# refuses longer links before inflating anything.
MAX_ENCODED = 90_000


def encode_code(code: str) -> str:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    raw = deflate.compress(code.encode("utf-8")) + deflate.flush()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_code(c: str) -> str:
    """The code in `c`; ValueError with a readable message when it is corrupt or too large."""
    if len(c) > MAX_ENCODED:
        raise ValueError(f"The code in this link is too long ({len(c)} characters; at most {MAX_ENCODED}).")
    if not c:
        raise ValueError("The link's code is empty.")
    if not c.isascii() or not all(ch.isalnum() or ch in "-_" for ch in c) or len(c) % 4 == 1:
        raise ValueError("The link's code is not valid base64url: the link was probably cut or altered.")
    try:
        raw = base64.urlsafe_b64decode(c + "=" * (-len(c) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(
            "The link's code is not valid base64url: the link was probably cut or altered."
        ) from e
    inflate = zlib.decompressobj(-15)
    try:
        # max_length bounds the output: a small link cannot expand into gigabytes (decompression bomb)
        data = inflate.decompress(raw, MAX_CODE_BYTES + 1)
    except zlib.error as e:
        raise ValueError("The link's code is corrupt (it does not decompress): was it cut short?") from e
    if len(data) > MAX_CODE_BYTES or inflate.unconsumed_tail:
        raise ValueError(
            f"The code in this link is larger than {MAX_CODE_BYTES // 1024} KB, the most a run accepts."
        )
    if not inflate.eof:
        raise ValueError("The link's code is incomplete (the compressed data ends early): was it cut short?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("The link's code is not UTF-8 text.") from e


def discovery_href(public: str, path: str, query: str) -> str | None:
    """oEmbed discovery for a page of this server (``public`` + path?query): only snippet URLs (code
    URLs keep it in the fragment). Built from the public URL setting, not the request's Host."""
    if not dict(parse_qsl(query)).get("snippet"):
        return None
    page = public + path + (f"?{query}" if query else "")
    return f"{public}/oembed?" + urlencode({"url": page, "format": "json"})
