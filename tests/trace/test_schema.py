"""The trace format: the shipped JSON Schema, real traces against it, the documented names.

``server/gradstep/trace.schema.json`` is generated from ``gradstep/schema.py``
(``make schema``); a model change without regenerating it fails here. Every
snippet and test case is traced and checked against that file, as a consumer
of the JSON would check it: with ``jsonschema`` when it is installed, and
always with the pydantic models and with a small checker of the keywords
pydantic emits (unknown keys, types, required fields), which fails loudly on
any keyword it does not know rather than skipping it.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
import torch
from gradstep import schema
from gradstep.columns import pack
from gradstep.runs import failed_trace
from gradstep.tracer import Limits, record
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "server" / "gradstep" / "trace.schema.json"
DOC = ROOT / "docs" / "trace-format.md"
FILES = sorted((ROOT / "snippets").glob("*.py")) + sorted((ROOT / "tests" / "cases").glob("*.py"))
IDS = [f"{p.parent.name}/{p.stem}" for p in FILES]

try:
    import jsonschema
except ImportError:  # not a dependency: the checker below stands in
    jsonschema = None

# Traces that exercise what the curated files do not: syntax errors, folded loops,
# every cap, stale saved tensors, dropped nodes, and the runner's own failures.
EXTRA_CODE = {
    "syntax_error": ("x = (1,\n", None),
    "loop_caps_stale": (
        textwrap.dedent(
            """\
            import torch
            w = torch.ones(3, requires_grad=True)
            h = torch.zeros(3)
            for i in range(8):
                h = h * w
                print("x" * 50)
            y = w.exp()
            y.mul_(2)
            del h
            big = torch.ones(100, requires_grad=True)
            (big * 2).sum().backward()
            try:
                y.sum().backward()
            except RuntimeError:
                pass
            z = w * 3
            """
        ),
        Limits(max_steps=10, max_stdout=120),
    ),
    "node_cap": (
        "import torch\nx = torch.ones(2, requires_grad=True)\ny = x * 2 * 3 * 4\n",
        Limits(max_nodes=3),
    ),
}
RUNNER_FAILURES = {
    "timeout": orjson.loads(
        failed_trace("pass\n", "timeout", "The snippet ran longer than 30 s and was stopped.")
    ),
    "crashed": orjson.loads(failed_trace("pass\n", "crashed", "The child was killed by SIGKILL.")),
    "limit": orjson.loads(
        failed_trace("pass\n", "limit", "The snippet used too much memory.", limit="memory")
    ),
}

# Field names front ends key on; docs/trace-format.md promises they stay within a version.
STABLE = {
    "Trace": {"version", "status", "error", "stdout", "steps"},
    "Step": {"index", "kind", "line", "retain_graph", "create_graph", "error", "nodes", "tensors"},
    "NodeInfoColumns": {"op", "saved"},
    "NodeStateColumns": {"id", "freed", "stale", "executed", "order"},
    "TensorStateColumns": {"name", "is_leaf", "grad"},
    "Grad": {"values", "shape", "has_grad_fn"},
    "TraceError": {"type", "message", "line"},
}


def _shipped() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def _as_json(trace: dict) -> Any:
    """The trace (rows, as recorded) as a consumer reads it: through the JSON the CLI writes."""
    return orjson.loads(orjson.dumps(pack(trace)))


# ---------------------------------------------------------------- a small JSON Schema checker

_KEYWORDS = {
    "$defs",
    "$ref",
    "additionalProperties",
    "anyOf",
    "default",
    "description",
    "enum",
    "items",
    "maxItems",
    "minItems",
    "prefixItems",
    "properties",
    "required",
    "title",
    "type",
}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _check(value: Any, node: dict, root: dict, path: str) -> None:
    """Check ``value`` against schema ``node``; AssertionError names the path on failure."""
    unknown = node.keys() - _KEYWORDS
    assert not unknown, f"schema keyword(s) {sorted(unknown)} unknown to this checker: extend _check"
    if "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path)
    if "anyOf" in node:
        problems = []
        for alternative in node["anyOf"]:
            try:
                _check(value, alternative, root, path)
                break
            except AssertionError as e:
                problems.append(str(e))
        else:
            raise AssertionError(f"{path}: matches no alternative: {problems}")
    if "enum" in node:
        assert value in node["enum"], f"{path}: {value!r} not one of {node['enum']}"
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        assert any(_TYPES[t](value) for t in types), f"{path}: expected {types}, got {value!r}"
    if isinstance(value, dict):
        props = node.get("properties", {})
        if node.get("additionalProperties") is False:
            extra = sorted(value.keys() - props.keys())
            assert not extra, f"{path}: key(s) {extra} are not properties in {SCHEMA_FILE.name}"
        missing = sorted(set(node.get("required", ())) - value.keys())
        assert not missing, f"{path}: required key(s) {missing} missing"
        for key, sub in props.items():
            if key in value:
                _check(value[key], sub, root, f"{path}.{key}")
    if isinstance(value, list):
        assert len(value) >= node.get("minItems", 0), f"{path}: too few items"
        assert len(value) <= node.get("maxItems", len(value)), f"{path}: too many items"
        prefix = node.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else node.get("items")
            if sub is not None:
                _check(item, sub, root, f"{path}[{i}]")


def _validate(trace: Any) -> None:
    shipped = _shipped()
    if jsonschema is not None:
        jsonschema.validate(trace, shipped)
    schema.Trace.model_validate(trace)
    _check(trace, shipped, shipped, "trace")


# ---------------------------------------------------------------- (a) the shipped schema is current


def test_shipped_schema_matches_models():
    generated = json.loads(json.dumps(schema.json_schema()))
    assert _shipped() == generated, (
        f"{SCHEMA_FILE.relative_to(ROOT)} is out of date with gradstep/schema.py: run `make schema`"
    )


def test_shipped_schema_title_names_the_version():
    assert _shipped()["title"] == f"gradstep trace v{schema.VERSION}"


# ---------------------------------------------------------------- (b) real traces validate


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_snippet_trace_validates(path: Path):
    torch.manual_seed(0)
    trace = record(path.read_text())
    schema.Trace.model_validate(pack(trace))  # the packed dicts, as gradstep.trace() reads them
    _validate(_as_json(trace))


@pytest.mark.parametrize("name", sorted(EXTRA_CODE))
def test_edge_case_trace_validates(name: str):
    code, limits = EXTRA_CODE[name]
    trace = record(code, limits)
    schema.Trace.model_validate(pack(trace))
    _validate(_as_json(trace))


def test_edge_cases_reach_what_they_are_for():
    """The extra traces above really contain folds, caps, stale and dropped nodes."""
    syntax = record(EXTRA_CODE["syntax_error"][0])
    assert syntax["status"] == "error" and syntax["error"]["column"] is not None
    trace = record(*EXTRA_CODE["loop_caps_stale"])
    assert set(trace["truncated"]) == {"steps", "stdout"}
    steps = trace["steps"]
    assert any(s.get("repeat", 1) > 1 for s in steps)
    assert any(n.get("stale") for s in steps for n in s["nodes"])
    assert any(n.get("dropped") for s in steps for n in s["nodes"])
    assert any(n.get("failed") for s in steps for n in s["nodes"])
    assert any(t["grad"] and "values" not in t["grad"] for s in steps for t in s["tensors"])
    assert "nodes" in record(*EXTRA_CODE["node_cap"])["truncated"]


@pytest.mark.parametrize("status", sorted(RUNNER_FAILURES))
def test_runner_failure_trace_validates(status: str):
    _validate(_as_json(RUNNER_FAILURES[status]))


def test_checker_rejects_what_the_schema_forbids():
    good = _as_json(record("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"))
    shipped = _shipped()
    _check(good, shipped, shipped, "trace")
    bad = [
        {**good, "extra": 1},
        {**good, "status": "fine"},
        {**good, "steps": [{**good["steps"][0], "nodes": {"id": [0], "colour": ["red"]}}]},
        {**good, "steps": [{**good["steps"][0], "nodes": [{"id": 0}]}]},  # rows: version 3's layout
        {**good, "steps": [{**good["steps"][0], "edges": [[0, 1]]}]},  # left out since version 4
        {**good, "nodes": {k: v for k, v in good["nodes"].items() if k != "op"}},
        {**good, "nodes": {**good["nodes"], "next": [["1"]] * len(good["nodes"]["op"])}},
    ]
    for trace in bad:
        with pytest.raises(AssertionError):
            _check(trace, shipped, shipped, "trace")


# ---------------------------------------------------------------- (c) documented names


@pytest.mark.parametrize("model", sorted(STABLE))
def test_stable_field_names_in_schema(model: str):
    shipped = _shipped()
    node = shipped if model == "Trace" else shipped["$defs"][model]
    missing = STABLE[model] - node["properties"].keys()
    assert not missing, f"{model} lost documented field(s) {sorted(missing)}: that needs a version bump"


def _doc_tables() -> dict[str, list[str]]:
    """Each ``### Model`` section's table of docs/trace-format.md: {model: [field, ...]}, in order."""
    tables: dict[str, list[str]] = {}
    reference = DOC.read_text().split("\n## Reference\n")[1].split("\n## ")[0]
    for section in re.split(r"^### ", reference, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        fields = re.findall(r"^\| `(\w+)` \|", body, re.M)
        if fields:
            tables[title.split()[0]] = fields
    return tables


def _documented_models() -> dict[str, type[BaseModel]]:
    """The trace's models by the name the docs give them; a table as columns is its row model's."""
    shipped = _shipped()
    by_name = {
        m.__name__: m for m in vars(schema).values() if isinstance(m, type) and issubclass(m, BaseModel)
    }
    models = {"Trace": schema.Trace}
    for name in shipped["$defs"]:
        model = by_name[name]
        model = getattr(model, "row_model", model)
        models[model.__name__.rstrip("_")] = model
    return models


@pytest.mark.parametrize("name", sorted(_documented_models()))
def test_each_models_table_lists_exactly_its_fields(name: str):
    table = _doc_tables().get(name)
    assert table is not None, f"{DOC.relative_to(ROOT)} has no '### {name}' table"
    fields = list(_documented_models()[name].model_fields)
    assert sorted(table) == sorted(fields), (
        f"{DOC.relative_to(ROOT)}: the {name} table should list its fields"
    )


def test_every_documented_table_is_a_model():
    assert set(_doc_tables()) <= set(_documented_models())


def test_doc_example_is_a_valid_trace():
    examples = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert examples, "docs/trace-format.md has no example trace"
    for example in examples:
        _validate(json.loads(example))
