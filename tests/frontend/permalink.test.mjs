// Unit tests for frontend/permalink.js: the URL code codec and the embed parameters.
// (Its compatibility with server/gradstep/permalink.py is checked from tests/server/test_permalink.py.)
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { deflateRawSync } from "node:zlib";
import {
  encodeCode, decodeCode, urlParams, embedOptions, iframeSnippet, MAX_CODE_BYTES, MAX_ENCODED,
} from "../../frontend/permalink.js";

const SAMPLE = "import torch\nx = torch.tensor(2.0, requires_grad=True)  # ∇ π 𝛉\ny = x ** 7\ny.backward()\n";
const b64url = (buf) => Buffer.from(buf).toString("base64url");

test("code survives a round trip", async () => {
  assert.equal(await decodeCode(await encodeCode(SAMPLE)), SAMPLE);
});

test("encoded code is raw deflate readable by zlib", async () => {
  const c = await encodeCode(SAMPLE);
  assert.match(c, /^[A-Za-z0-9_-]+$/);
  assert.equal((await import("node:zlib")).inflateRawSync(Buffer.from(c, "base64url")).toString("utf8"), SAMPLE);
});

test("code deflated by zlib decodes", async () => {
  assert.equal(await decodeCode(b64url(deflateRawSync(Buffer.from(SAMPLE)))), SAMPLE);
});

test("characters outside base64url are a readable error", async () => {
  await assert.rejects(decodeCode("not base64!"), /base64url/);
});

test("garbage that is not deflate is a readable error", async () => {
  await assert.rejects(decodeCode(b64url(Buffer.alloc(30, 0xff))), /corrupt/);
});

test("truncated link is a readable error", async () => {
  const c = await encodeCode(SAMPLE.repeat(10));
  await assert.rejects(decodeCode(c.slice(0, c.length >> 1)), /corrupt|cut short/);
});

test("code over the API limit is refused", async () => {
  await assert.rejects(decodeCode(await encodeCode("#".repeat(MAX_CODE_BYTES + 1))), /larger than 64 KB/);
});

test("code of exactly the API limit decodes", async () => {
  const code = "#".repeat(MAX_CODE_BYTES);
  assert.equal(await decodeCode(await encodeCode(code)), code);
});

test("decompression bomb is refused", async () => {
  const bomb = b64url(deflateRawSync(Buffer.alloc(48 << 20)));
  assert.ok(bomb.length < MAX_ENCODED);
  await assert.rejects(decodeCode(bomb), /larger than 64 KB/);
});

test("oversized link is refused before decoding", async () => {
  await assert.rejects(decodeCode("A".repeat(MAX_ENCODED + 1)), /too long/);
});

test("bytes that are not UTF-8 are a readable error", async () => {
  await assert.rejects(decodeCode(b64url(deflateRawSync(Buffer.from([0x78, 0xff, 0xfe])))), /UTF-8/);
});

test("fragment parameters override query parameters", () => {
  assert.deepEqual(urlParams("http://h/embed?snippet=a&step=1&theme=dark#code=xyz&step=3"), {
    snippet: "a", step: "3", theme: "dark", code: "xyz",
  });
});

test("embed options default to a read-only editor, auto theme, step 0, no autoplay", () => {
  const o = embedOptions({ snippet: "a" }, ["a"]);
  assert.deepEqual({ ...o, errors: o.errors.length }, {
    snippet: "a", code: null, step: 0, theme: "auto", editor: "readonly", autoplay: false, predict: null, errors: 0,
  });
});

test("predict passes its spec to the exercise; given empty it means the code's comments", () => {
  assert.equal(embedOptions({ snippet: "a", predict: " x.grad, freed " }, ["a"]).predict, "x.grad, freed");
  assert.equal(embedOptions({ snippet: "a", predict: "" }, ["a"]).predict, "code");
});

test("a predict spec longer than 500 characters is a readable error", () => {
  assert.match(embedOptions({ snippet: "a", predict: "freed,".repeat(90) }, ["a"]).errors.join(), /exercise in this link \(predict=\) is too long/);
});

test("code in the link wins over a snippet name", () => {
  const o = embedOptions({ snippet: "a", code: "xyz" }, ["a"]);
  assert.equal(o.code, "xyz");
  assert.equal(o.snippet, null);
});

test("unknown snippet is a readable error", () => {
  assert.match(embedOptions({ snippet: "nope" }, ["a"]).errors.join(), /no example snippet named “nope”/);
});

test("unknown theme is a readable error", () => {
  assert.match(embedOptions({ snippet: "a", theme: "purple" }, ["a"]).errors.join(), /Unknown theme “purple”/);
});

test("unknown editor mode is a readable error", () => {
  assert.match(embedOptions({ snippet: "a", editor: "vim" }, ["a"]).errors.join(), /Unknown editor mode/);
});

test("a step that is not a whole number is a readable error", () => {
  assert.match(embedOptions({ snippet: "a", step: "two" }, ["a"]).errors.join(), /not a whole number/);
});

test("a negative step is clamped to the first", () => {
  assert.equal(embedOptions({ snippet: "a", step: "-4" }, ["a"]).step, 0);
});

test("an embed without code or snippet says what to add", () => {
  assert.match(embedOptions({}, ["a"]).errors.join(), /names no snippet/);
});

test("oversized code parameter is a readable error", () => {
  assert.match(embedOptions({ code: "A".repeat(MAX_ENCODED + 1) }).errors.join(), /too long/);
});

test("iframe snippet escapes its URL", () => {
  const html = iframeSnippet('http://h/embed#code=a"b<c&step=1');
  assert.match(html, /src="http:\/\/h\/embed#code=a&quot;b&lt;c&amp;step=1"/);
});
