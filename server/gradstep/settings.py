"""Server settings: defaults, overridden by GRADSTEP_* environment variables, then by CLI flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from gradstep.sandbox.config import EXTRA_SLOTS

if TYPE_CHECKING:
    from gradstep.runspec import RunSpec

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
MIN_CACHE_SECRET = 32  # bytes: a 256-bit key for HMAC-SHA256 (as 32 characters or more)


class SettingsError(ValueError):
    """A setting out of its range, or an environment value that is not of its kind: the server
    does not start (it would otherwise start and fail every run)."""


def _in(default, low, high):
    """A numeric setting's default and the range it must lie in (inclusive)."""
    if callable(default):
        return field(default_factory=default, metadata={"range": (low, high)})
    return field(default=default, metadata={"range": (low, high)})


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = _in(8000, 0, 65535)
    workers: int = _in(lambda: os.cpu_count() or 1, 1, 256)  # sandboxed runs at once
    # sandbox slots beyond `workers`, each keeping a prewarmed spare child (never more runs at
    # once): a run then rarely waits for its slot's next spare (SandboxConfig.extra_slots)
    extra_slots: int = _in(EXTRA_SLOTS, 0, 64)
    queue: int = _in(32, 0, 100_000)  # runs that may wait for a worker; beyond that: 503 + Retry-After
    # seconds a run (or a big snippet's reading) may wait for its turn; past that: 503 + Retry-After,
    # so a queue never takes minutes to drain (gradstep.limits.FairQueue)
    queue_seconds: float = _in(10.0, 0.1, 3600)
    # seconds of CPU the server's look at a snippet's text may take (in a reader process,
    # gradstep.reading), a fifth of it for the parse; code that takes longer is refused with 422
    # before it runs
    read_seconds: float = _in(1.0, 0.01, 60)
    max_body: int = _in(64 * 1024, 1024, 16 << 20)  # bytes of a request body; beyond that: 413
    rate: float = _in(2.0, 0, 1e6)  # runs per second per client, sustained (0 disables the limit)
    burst: int = _in(20, 1, 1_000_000)  # runs a client may make at once before the rate applies
    # runs one client may have under way at once (running or queued); 0: half the workers, at least 1
    client_runs: int = _in(0, 0, 10_000)
    trust_proxy: bool = False  # behind nginx: the client is X-Forwarded-For's last entry (routes/deps.py)
    cache_bytes: int = _in(64 << 20, 0, 1 << 40)  # in-process trace cache budget
    cache_ttl: float = _in(3600.0, 0, 1e7)  # seconds a cached trace is served
    # redis://host:6379/0 (or rediss://, unix://): a trace cache shared by every replica, behind
    # the in-process one; an outage is a miss. Empty: in-process only.
    cache_url: str = ""
    # The replicas' shared secret that signs every shared-cache entry (HMAC-SHA256 over key and
    # trace): an entry that does not verify is a miss. Required with cache_url, at least
    # MIN_CACHE_SECRET characters; never printed (repr=False), logged or shown in /healthz.
    cache_secret: str = field(default="", repr=False)
    cache_entry_bytes: int = _in(4 << 20, 1024, 1 << 30)  # largest entry (compressed) put in the shared cache
    cache_timeout: float = _in(0.5, 0.001, 60)  # seconds per shared-cache call before it counts as down
    wall_seconds: float = _in(15.0, 0.1, 3600)  # per run
    cpu_seconds: int = _in(10, 1, 3600)  # per run
    memory_mb: int = _in(1024, 128, 1 << 20)  # per run
    # Seconds of wall time, and of CPU, that the fix runs one request causes may take together
    # (each fix run also costs the client one run of its rate budget).
    fix_budget: float = _in(10.0, 0, 3600)
    # Where the public reaches this server ("https://gradstep.example.edu"): the base of the URLs
    # it writes into oEmbed answers and discovery links. Empty: http://<host>:<port> of these
    # settings, never the request's Host header (anyone can send any Host).
    public_url: str = ""
    health_detail: bool = False  # /healthz's detail for every client, not only local ones (routes/health.py)
    api_docs: bool = False  # serve Swagger UI at /docs (it loads its script and CSS from a CDN)
    # Slow clients (uvicorn, `gradstep serve`): a request must arrive whole (headers and body)
    # within request_timeout seconds; an idle keep-alive connection is closed after keep_alive
    # seconds; past max_connections open connections, new requests get 503.
    request_timeout: float = _in(10.0, 0.1, 3600)
    keep_alive: float = _in(5.0, 0, 3600)
    max_connections: int = _in(1000, 1, 1_000_000)
    # open connections one address may hold at once (0: no cap); not applied with trust_proxy, where
    # every connection is the proxy's (nginx's limit_conn caps clients there)
    client_connections: int = _in(64, 0, 1_000_000)
    # Pages that may frame /embed: a CSP frame-ancestors source list ("*", "'self'",
    # "https://*.example.edu https://lms.example.org"); the app's own pages only allow 'self'.
    frame_ancestors: str = "*"
    # Pages (origins, space-separated, "*" for any) whose /embed frames run a link's #code= at once;
    # framed by any other origin, the frame shows the code and a Run button unless its trace is
    # cached (curated snippets, and the server's own origin, always run at once: docs/embed.md)
    embed_run_origins: str = ""
    # sandbox slot i runs as uid uid_base + i, i < workers + extra_slots: replicas on one host
    # need disjoint ranges of that size
    uid_base: int = _in(61000, 1000, 2**31 - 1 - 2**16)  # never root, nor past uid_t
    # Confinement layers that must be active, or the server refuses to start: "all", "none"
    # (warnings only, for development on a machine without root) or a comma-separated list.
    require_layers: str = "all"

    def __post_init__(self) -> None:
        for f in fields(self):
            bounds = f.metadata.get("range")
            value = getattr(self, f.name)
            if bounds is None:
                continue
            low, high = bounds
            whole = f.type in (int, "int")
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (whole and not float(value).is_integer())
            ):
                raise SettingsError(f"{_var(f.name)}={value}: {_kind(whole, low, high)}")
            if not low <= value <= high or value != value:  # nan is in no range
                raise SettingsError(f"{_var(f.name)}={value}: out of range, {_kind(whole, low, high)}")
        if self.cache_url and len(self.cache_secret.encode()) < MIN_CACHE_SECRET:
            given = f"{len(self.cache_secret.encode())} bytes given" if self.cache_secret else "not set"
            raise SettingsError(
                f"{_var('cache_secret')}: {given}; with {_var('cache_url')} set, every replica needs the"
                f" same secret of at least {MIN_CACHE_SECRET} bytes to sign the shared cache's entries"
                " (e.g. the output of `openssl rand -hex 32`)"
            )

    def runs_per_client(self) -> int:
        return self.client_runs or max(1, self.workers // 2)

    def run_spec(self) -> RunSpec:
        """The caps that change what a run's trace says (where it stops, which fixes were verified),
        as the one value runs are made with and cached under (gradstep.runspec)."""
        from gradstep.runspec import RunSpec  # here: it imports the tracer (torch), settings do not

        return RunSpec.of(self)

    def result_caps(self) -> dict:
        """The cache key's caps: see ``run_spec``."""
        return self.run_spec().caps()

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        """The settings of ``GRADSTEP_<NAME>`` variables, then ``overrides``; raises SettingsError
        naming the variable and what it takes when one is malformed or out of range."""
        values = {}
        defaults = cls()
        for f in fields(cls):
            raw = os.environ.get(_var(f.name))
            if raw is None:
                continue
            kind = type(getattr(defaults, f.name))
            values[f.name] = _parse(f.name, raw, kind, f.metadata.get("range"))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _var(name: str) -> str:
    return f"GRADSTEP_{name.upper()}"


def _kind(whole: bool, low: float, high: float) -> str:
    def num(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else str(v)

    return f"{'a whole number' if whole else 'a number'} from {num(low)} to {num(high)}"


def _parse(name: str, raw: str, kind: type, bounds: tuple | None):
    text = raw.strip()
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SettingsError(f"{_var(name)}={raw}: takes 1/true/yes/on or 0/false/no/off")
    if kind is str:
        return raw
    low, high = bounds or (float("-inf"), float("inf"))
    try:
        value = kind(text)
    except ValueError:
        raise SettingsError(f"{_var(name)}={raw}: not {_kind(kind is int, low, high)}") from None
    if not low <= value <= high:  # said here, with the text as written (__post_init__ checks again)
        raise SettingsError(f"{_var(name)}={raw}: out of range, {_kind(kind is int, low, high)}")
    return value
