"""Server settings: defaults, overridden by GRADSTEP_* environment variables, then by CLI flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from gradstep.sandbox.config import EXTRA_SLOTS


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # sandboxed runs at once
    # sandbox slots beyond `workers`, each keeping a prewarmed spare child (never more runs at
    # once): a run then rarely waits for its slot's next spare (SandboxConfig.extra_slots)
    extra_slots: int = EXTRA_SLOTS
    queue: int = 32  # runs that may wait for a worker; beyond that: 503 + Retry-After
    max_body: int = 64 * 1024  # bytes of a request body; beyond that: 413
    rate: float = 2.0  # runs per second per client, sustained (0 disables the limit)
    burst: int = 20  # runs a client may make at once before the rate applies
    trust_proxy: bool = False  # behind nginx: the client is X-Forwarded-For's last entry (routes/deps.py)
    cache_bytes: int = 64 << 20  # in-process trace cache budget
    cache_ttl: float = 3600.0  # seconds a cached trace is served
    # redis://host:6379/0 (or rediss://, unix://): a trace cache shared by every replica, behind
    # the in-process one; an outage is a miss. Empty: in-process only.
    cache_url: str = ""
    cache_entry_bytes: int = 4 << 20  # largest entry (compressed) put in the shared cache
    cache_timeout: float = 0.5  # seconds per shared-cache call before it counts as down
    wall_seconds: float = 15.0  # per run
    cpu_seconds: int = 10  # per run
    memory_mb: int = 1024  # per run
    # Seconds of wall time, and of CPU, that the fix runs one request causes may take together
    # (each fix run also costs the client one run of its rate budget).
    fix_budget: float = 10.0
    # Where the public reaches this server ("https://gradstep.example.edu"): the base of the URLs
    # it writes into oEmbed answers and discovery links. Empty: http://<host>:<port> of these
    # settings, never the request's Host header (anyone can send any Host).
    public_url: str = ""
    api_docs: bool = False  # serve Swagger UI at /docs (it loads its script and CSS from a CDN)
    # Slow clients (uvicorn, `gradstep serve`): a request must arrive whole (headers and body)
    # within request_timeout seconds; an idle keep-alive connection is closed after keep_alive
    # seconds; past max_connections open connections, new requests get 503.
    request_timeout: float = 10.0
    keep_alive: float = 5.0
    max_connections: int = 1000
    # Pages that may frame /embed: a CSP frame-ancestors source list ("*", "'self'",
    # "https://*.example.edu https://lms.example.org"); the app's own pages only allow 'self'.
    frame_ancestors: str = "*"
    # sandbox slot i runs as uid uid_base + i, i < workers + extra_slots: replicas on one host
    # need disjoint ranges of that size
    uid_base: int = 61000
    # Confinement layers that must be active, or the server refuses to start: "all", "none"
    # (warnings only, for development on a machine without root) or a comma-separated list.
    require_layers: str = "all"

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        values = {}
        for f in fields(cls):
            raw = os.environ.get(f"GRADSTEP_{f.name.upper()}")
            if raw is not None:
                kind = type(getattr(cls(), f.name))
                values[f.name] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
