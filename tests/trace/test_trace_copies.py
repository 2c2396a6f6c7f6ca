"""Every copy of the trace's fields outside gradstep/schema.py says what the schema says.

The copies that are data are written from the schema (``make schema``, trace_copies.py) and
checked here to be what writing them gives; the ones in code (frontend/columns.js, frontend/model.js)
are read with a regex and compared with the schema. The C reader's field names are checked by
tests/tracer/test_tracer_seam.py, its records by tests/tracer/test_tracer_native.py.
"""

from __future__ import annotations

import json
import re
import types
import typing

import pytest
from gradstep import schema
from gradstep.columns import NODE_STATES, NODES, TENSORS, Table
from trace_copies import (
    DICTS_FILE,
    DOC,
    EXAMPLE_FILE,
    GENERATED,
    ROOT,
    TABLES_FILE,
    VARIES,
    block,
    doc_example,
    tables,
    traced,
    with_typed_dicts,
)

COLUMNS_JS = (ROOT / "frontend" / "columns.js").read_text()
MODEL_JS = (ROOT / "frontend" / "model.js").read_text()


def test_the_front_end_tests_tables_are_the_schemas():
    assert json.loads(TABLES_FILE.read_text()) == tables(), f"{TABLES_FILE.name} is stale: run `make schema`"


TABLES = {"NODE_REQUIRED": NODES, "STATE_REQUIRED": NODE_STATES, "TENSOR_REQUIRED": TENSORS}


@pytest.mark.parametrize("name, table", TABLES.items())
def test_columns_js_lists_each_tables_required_fields(name: str, table: Table):
    found = re.search(rf"const {name} = new Set\(\[(.*?)\]\);", COLUMNS_JS, re.S)
    assert found, f"frontend/columns.js: no `const {name} = new Set([...]);`"
    assert re.findall(r'"(\w+)"', found[1]) == list(table.key)


def _admits(annotation, kind: type) -> bool:
    """Can a value of ``annotation`` be a ``kind`` (one of a union's)?"""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = typing.get_args(annotation) if union else ()
    return annotation is kind or typing.get_origin(annotation) is kind or any(_admits(t, kind) for t in args)


@pytest.mark.parametrize(
    "model", [schema.NodeInfo, schema.NodeState, schema.TensorState], ids=lambda m: m.__name__
)
def test_a_tables_defaults_are_the_empty_values_columns_js_leaves_out(model):
    """columns.js reads a column's null, false and [] as its default, for any field not required:
    each default is its type's empty value, and a field that defaults to null holds no bool or list."""
    for name, info in model.model_fields.items():
        if info.is_required():
            continue
        default = info.get_default(call_default_factory=True)
        assert default is None or default is False or default == [], f"{model.__name__}.{name}: {default!r}"
        if default is None:
            assert not _admits(info.annotation, bool), f"{model.__name__}.{name}: false would read as null"
            assert not _admits(info.annotation, list), f"{model.__name__}.{name}: [] would read as null"
        elif default is False:
            assert not _admits(info.annotation, list) and not _admits(info.annotation, type(None))
        else:
            assert not _admits(info.annotation, bool) and not _admits(info.annotation, type(None))


def _defaults_read(function: str, variable: str) -> dict[str, str]:
    """``variable.field ?? literal`` in ``function`` of model.js: {field: literal}."""
    body = MODEL_JS[MODEL_JS.index(f"function {function}(") :]
    body = body[: body.index("\n}\n")]
    return dict(re.findall(rf"\b{variable}\.(\w+) \?\? (null|false|true|\[\]|\"\"|-?\d+)\b", body))


OLDER = {"edges", "index", "version", "step"}  # read from older versions, or required (a position)


@pytest.mark.parametrize(
    "function, variable, model",
    [
        ("nodeInfo", "raw", schema.NodeInfo),
        ("nodeInfo", "s", schema.SavedValue),
        ("stepInfo", "raw", schema.Step),
        ("buildModel", "raw", schema.Trace),
    ],
)
def test_model_js_reads_each_field_with_the_schemas_default(function: str, variable: str, model):
    read = _defaults_read(function, variable)
    assert read, f"frontend/model.js {function}: no `{variable}.field ?? default` found"
    for field, literal in read.items():
        if field in OLDER:
            continue
        assert field in model.model_fields, f"model.js reads {model.__name__}.{field}, not in the schema"
        info = model.model_fields[field]
        default = info.get_default(call_default_factory=True)
        if hasattr(default, "model_dump"):  # a table's columns: no rows
            continue
        assert json.loads(literal) == default, (
            f"model.js {function}: {field} ?? {literal}, schema {default!r}"
        )


def test_the_docs_example_is_what_gradstep_trace_prints():
    code, shown = doc_example()
    ran = traced(code)
    for key in VARIES:
        shown.pop(key, None), ran.pop(key, None)
    assert shown == ran, "docs/trace-format.md's example is stale: run `make schema`"


def test_the_front_end_example_is_the_docs_example():
    assert json.loads(EXAMPLE_FILE.read_text()) == doc_example()[1], "run `make schema`"


@pytest.mark.parametrize("name", GENERATED)
def test_each_generated_block_of_the_docs_is_what_make_schema_writes(name: str):
    doc = DOC.read_text()
    start, stop = block(doc, name)
    assert doc[start:stop] == GENERATED[name](), f"{DOC.name}'s {name} are stale: run `make schema`"


def test_trace_dicts_typed_dicts_are_what_make_schema_writes():
    text = DICTS_FILE.read_text()
    assert text == with_typed_dicts(text), f"{DICTS_FILE.name}'s TypedDicts are stale: run `make schema`"
