"""One line map between a snippet and its fix: the server's rule (``line_sources``) gives the
shared case table's maps, which the page only reads (tests/frontend/line-map.test.mjs); every
verified fix ships it, and a diagnosis's line is found in the fixed code through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradstep.diagnose.source import line_sources, moved_line
from gradstep.pipeline import in_process

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "tests" / "frontend" / "line_map_cases.json").read_text())


@pytest.mark.parametrize("case", TABLE["cases"], ids=lambda c: c["name"])
def test_case_table(case):
    sources = line_sources(case["old"], case["new"])
    assert sources == case["sources"]
    old, new = case["old"].splitlines(), case["new"].splitlines()
    changed = [
        i for i, s in enumerate(sources, 1) if s is not None and old[s - 1].strip() != new[i - 1].strip()
    ]
    assert changed == case["changed"]
    # moved_line is the same map read the other way
    for line in range(1, len(old) + 1):
        assert moved_line(case["old"], case["new"], line) == (
            sources.index(line) + 1 if line in sources else None
        )


FIXABLE = """import torch
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = (x ** 2).sum()
y.backward()
y.backward()
print(x.grad)
"""


def test_every_verified_fix_ships_its_line_map():
    trace = in_process(FIXABLE)
    fixes = [f for d in trace["diagnoses"] for f in d["fixes"]]
    assert fixes, "the second backward through a freed graph has verified fixes"
    for fix in fixes:
        assert fix["source_lines"] == line_sources(FIXABLE, fix["code"])
        assert len(fix["source_lines"]) == len(fix["code"].splitlines())
        # the lines a fix did not touch come from themselves
        assert fix["source_lines"][:3] == [1, 2, 3]
