"""Shared test setup. Tests are grouped by layer in folders; what they share with the benchmarks
lives in ``server/testkit`` (importable from the checkout, never installed)."""

# the `browser` and `server` fixtures of the browser tests, for any test module that requests them
from testkit.browser_support import browser, server  # noqa: F401
