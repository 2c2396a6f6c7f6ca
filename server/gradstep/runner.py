"""Traces through the sandbox: what the server and the CLI share.

The sandbox returns bytes or a failure; this turns either into trace JSON, and
treats the child's bytes as untrusted (served only if they fit the schema).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import orjson
from pydantic import ValidationError

from gradstep.diagnose.service import with_diagnoses
from gradstep.sandbox import RunResult, Sandbox, SandboxConfig
from gradstep.sandbox.config import DEFAULT_WARMUP
from gradstep.schema import VERSION, Trace
from gradstep.settings import Settings

TARGET = "gradstep.tracer.remote:run"


def failed_trace(code: str, status: str, message: str, limit: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "version": VERSION,
            "status": status,
            "limit": limit,
            "error": {"type": status, "message": message, "line": None},
            "code": code,
        }
    )


class TraceRunner:
    def __init__(self, settings: Settings, sandbox: Sandbox | None = None):
        self.workers = settings.workers
        self.sandbox = sandbox or Sandbox(
            SandboxConfig(
                workers=settings.workers,
                wall_seconds=settings.wall_seconds,
                cpu_seconds=settings.cpu_seconds,
                memory_mb=settings.memory_mb,
                uid_base=settings.uid_base,
                target=TARGET,
                warmup=payload_for(DEFAULT_WARMUP),
            )
        )

    def start(self) -> None:
        self.sandbox.start()

    def close(self) -> None:
        self.sandbox.close()

    def health(self) -> dict:
        return self.sandbox.health()

    def trace_bytes(
        self,
        code: str,
        payload: str,
        verified: bytes | None = None,
        fix_runs: dict[str, bytes] | None = None,
    ) -> tuple[bytes, bool]:
        """(trace JSON, whether it may be cached) for one run of ``code``, with verified diagnoses.

        ``verified``: the trace of this very payload, run earlier to verify a fix, served instead
        of running it again (Apply fix asks for exactly that run). ``fix_runs`` gets the code ->
        trace of each fix run here to verify this run's diagnoses, for the caller to keep.
        """
        body, cacheable = (
            (verified, True) if verified is not None else to_trace(code, self.sandbox.run(payload))
        )
        if cacheable:
            body = with_diagnoses(body, lambda codes: self._run_fixes(codes, payload, fix_runs))
        return body, cacheable

    def _run_fixes(self, codes: list[str], payload: str, fix_runs: dict[str, bytes] | None) -> list[dict]:
        """Candidate fixes run in the sandbox like any snippet (same options), as many at once as slots allow."""
        options = orjson.loads(payload).get("options") or {}

        def run(code: str) -> dict:
            body, cacheable = to_trace(code, self.sandbox.run(payload_for(code, options)))
            if cacheable and fix_runs is not None:
                fix_runs[code] = body
            return orjson.loads(body)

        with ThreadPoolExecutor(max_workers=max(1, min(len(codes), self.workers))) as pool:
            return list(pool.map(run, codes))


def to_trace(code: str, result: RunResult) -> tuple[bytes, bool]:
    if result.status == "ok":
        try:
            Trace.model_validate_json(result.output)
        except ValidationError as e:
            message = f"The run returned something that is not a trace ({e.error_count()} problems)."
            return failed_trace(code, "crashed", message), False
        return result.output, True
    return failed_trace(code, result.status, result.detail, result.limit), False


def payload_for(code: str, options: dict | None = None) -> str:
    return orjson.dumps({"code": code, "options": options or {}}).decode()
