"""The URL code codec (server/gradstep/permalink.py), and that it speaks the same format as
frontend/permalink.js: links made by the browser decode on the server and the other way round."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from gradstep import snippets
from gradstep.permalink import MAX_CODE_BYTES, MAX_ENCODED, decode_code, encode_code

ROOT = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")
SAMPLE = "import torch\nx = torch.tensor(2.0, requires_grad=True)  # ∇ π ✓ 𝛉\ny = x ** 7\ny.backward()\n"


def raw_deflate(data: bytes) -> str:
    z = zlib.compressobj(9, zlib.DEFLATED, -15)
    return base64.urlsafe_b64encode(z.compress(data) + z.flush()).rstrip(b"=").decode()


def node(script: str, *args: str) -> str:
    out = subprocess.run(
        [NODE, "--input-type=module", "-e", script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_code_survives_a_round_trip():
    assert decode_code(encode_code(SAMPLE)) == SAMPLE


def test_encoded_code_uses_only_url_safe_characters_without_padding():
    c = encode_code(SAMPLE * 20)
    assert c and all(ch.isalnum() or ch in "-_" for ch in c)


def test_encoding_is_raw_deflate_readable_by_zlib():
    c = encode_code(SAMPLE)
    raw = base64.urlsafe_b64decode(c + "=" * (-len(c) % 4))
    assert zlib.decompress(raw, -15).decode() == SAMPLE


def test_empty_code_is_a_readable_error():
    with pytest.raises(ValueError, match="empty"):
        decode_code("")


@pytest.mark.parametrize("c", ["not base64!", "abc=", "a", "€uro"])
def test_characters_outside_base64url_are_a_readable_error(c):
    with pytest.raises(ValueError, match="base64url"):
        decode_code(c)


def test_garbage_that_is_not_deflate_is_a_readable_error():
    with pytest.raises(ValueError, match="corrupt"):
        decode_code(base64.urlsafe_b64encode(b"\xff" * 30).rstrip(b"=").decode())


def test_truncated_link_is_a_readable_error():
    c = encode_code(SAMPLE * 10)
    with pytest.raises(ValueError, match="cut short"):
        decode_code(c[: len(c) // 2])


def test_code_of_exactly_the_api_limit_decodes():
    code = "#" * MAX_CODE_BYTES
    assert decode_code(encode_code(code)) == code


def test_code_over_the_api_limit_is_refused():
    with pytest.raises(ValueError, match="larger than 64 KB"):
        decode_code(encode_code("#" * (MAX_CODE_BYTES + 1)))


def test_decompression_bomb_is_refused_without_inflating_it():
    bomb = raw_deflate(b"\0" * (100 << 20))  # 100 MB of zeros in a 136 KB link
    assert len(bomb) < MAX_ENCODED
    with pytest.raises(ValueError, match="larger than 64 KB"):
        decode_code(bomb)


def test_oversized_link_is_refused_before_decoding():
    with pytest.raises(ValueError, match="too long"):
        decode_code("A" * (MAX_ENCODED + 1))


def test_bytes_that_are_not_utf8_are_a_readable_error():
    with pytest.raises(ValueError, match="UTF-8"):
        decode_code(raw_deflate(b"x = '\xff\xfe'"))


@needs_node
def test_code_encoded_by_the_server_decodes_in_the_browser_module():
    codes = [SAMPLE] + [s.code for s in snippets.load_all().values()]
    encoded = json.dumps([encode_code(c) for c in codes])
    out = node(
        "import { decodeCode } from './frontend/permalink.js';"
        "const cs = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(await Promise.all(cs.map(decodeCode))));",
        encoded,
    )
    assert json.loads(out) == codes


@needs_node
def test_code_encoded_by_the_browser_module_decodes_on_the_server():
    codes = [SAMPLE] + [s.code for s in snippets.load_all().values()]
    out = node(
        "import { encodeCode } from './frontend/permalink.js';"
        "const cs = JSON.parse(process.argv[1]);"
        "console.log(JSON.stringify(await Promise.all(cs.map(encodeCode))));",
        json.dumps(codes),
    )
    assert [decode_code(c) for c in json.loads(out)] == codes
