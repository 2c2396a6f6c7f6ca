"""The Server-Timing header of a gradstep response, read as a browser's developer tools read it."""

from __future__ import annotations

from collections.abc import Mapping


def server_timing(headers: Mapping[str, str]) -> dict[str, float]:
    """Each part the server timed, in the header's order: its name -> ``dur`` (milliseconds).
    Empty when the response has no Server-Timing (a cache hit ran nothing)."""
    parts = {}
    for item in filter(None, headers.get("server-timing", "").split(",")):
        name, *params = (p.strip() for p in item.split(";"))
        parts[name] = next(float(p[4:]) for p in params if p.startswith("dur="))
    return parts
