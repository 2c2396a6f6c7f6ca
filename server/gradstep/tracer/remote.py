"""Entry point the sandbox runs in its confined child: a JSON request in, trace bytes out."""

from __future__ import annotations

import orjson

from gradstep.tracer.recorder import Limits, record


def run(payload: str) -> bytes:
    """``payload``: {"code": str, "options": {"max_steps": int, "line_repeats": int}}."""
    request = orjson.loads(payload)
    options = request.get("options") or {}
    limits = Limits(**{k: v for k, v in options.items() if k in ("max_steps", "line_repeats")})
    return orjson.dumps(record(request["code"], limits), default=repr)
