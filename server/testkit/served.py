"""A trace job's bytes as the server serves them, for tests that run the job in their own process."""

from __future__ import annotations

import orjson
from gradstep import jobs
from gradstep.checker import check
from gradstep.runs import payload_for, served_fields
from gradstep.voice import Observed


def served_job(code: str, options: dict | None = None) -> dict:
    """``code`` run by a trace job here (gradstep.jobs, unconfined), its bytes read as the server
    reads a child's (gradstep.checker: the server's fields and sentences written in, the rules'
    proposals left in ``diagnoses``); nothing measured of the run (no sandbox)."""
    raw = jobs.run(payload_for(code, options))
    checked = check(raw, served_fields(code), Observed(), encode=False)
    assert checked.problem is None and checked.body is not None, checked.problem
    return orjson.loads(checked.body)
