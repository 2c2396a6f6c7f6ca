// Unit tests for frontend/messages.js: which parent origins a restricted frame talks to.
// (The frame's messages themselves are checked in Chromium by tests/browser/test_browser_embed.py.)
// Run: node --test tests/frontend/
import { test } from "node:test";
import assert from "node:assert/strict";
import { originMatches } from "../../frontend/messages.js";

test("a full origin matches only itself, default ports included", () => {
  assert.ok(originMatches("https://lms.example.edu", "https://lms.example.edu"));
  assert.ok(originMatches("https://lms.example.edu", "https://lms.example.edu:443"));
  assert.ok(!originMatches("https://lms.example.edu:8443", "https://lms.example.edu"));
  assert.ok(!originMatches("http://lms.example.edu", "https://lms.example.edu"));
  assert.ok(!originMatches("https://evil.example", "https://lms.example.edu"));
});

test("a wildcard host matches subdomains, not the look-alike suffix", () => {
  assert.ok(originMatches("https://canvas.example.edu", "https://*.example.edu"));
  assert.ok(!originMatches("https://badexample.edu", "https://*.example.edu"));
});

test("a host without scheme matches http and https only", () => {
  assert.ok(originMatches("http://example.edu", "example.edu"));
  assert.ok(originMatches("https://example.edu", "example.edu"));
  assert.ok(!originMatches("ftp://example.edu", "example.edu"));
});

test("a scheme source matches any host of that scheme", () => {
  assert.ok(originMatches("https://anything.org", "https:"));
  assert.ok(!originMatches("http://anything.org", "https:"));
});

test("a port wildcard matches any port", () => {
  assert.ok(originMatches("http://127.0.0.1:5173", "http://127.0.0.1:*"));
});

test("'self' matches the frame's own origin, 'none' nothing, * everything", () => {
  assert.ok(originMatches("https://g.example", "'self'", "https://g.example"));
  assert.ok(!originMatches("https://other.example", "'self'", "https://g.example"));
  assert.ok(!originMatches("https://g.example", "'none'"));
  assert.ok(originMatches("https://g.example", "*"));
});

test("an opaque origin matches no named source", () => {
  assert.ok(!originMatches("null", "https://lms.example.edu"));
});
