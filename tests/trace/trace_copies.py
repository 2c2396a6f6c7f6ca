"""The copies of the trace format that can be written from their source, written (``make schema``).

* ``tests/frontend/trace_tables.json``: each table's key fields and defaults, as
  ``gradstep.columns`` reads them from ``gradstep/schema.py``; the front end's unit tests write and
  read version-4 columns with them.
* the example of ``docs/trace-format.md`` ("## Example"): what ``gradstep trace`` prints for the
  snippet shown there, here with short lists on one line; and ``tests/frontend/example_trace.json``,
  the same trace, which the front end's fixtures load.
* the field tables of docs/trace-format.md's Reference (between ``<!-- generated: <Model> fields``
  markers): each model's fields in order, their type and default in the docs' notation
  (``type_name``, ``default_shown``) and their ``description`` as the meaning.
* the TypedDicts of ``server/gradstep/trace_dicts.py`` (between its ``# ---- generated`` markers): one
  per model, its keys required where the model has no default (``typed_dicts``).
* the list of diagnosis kinds in docs/trace-format.md (between ``<!-- generated: diagnosis kinds``
  markers): ``gradstep.diagnose.registry``'s kinds in its order, each with its rule's ``DESCRIPTION``
  or else its module docstring's first line.

``python tests/trace/trace_copies.py`` writes them; tests/trace/test_trace_copies.py checks that the
committed files are what this gives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "trace-format.md"
TABLES_FILE = ROOT / "tests" / "frontend" / "trace_tables.json"
EXAMPLE_FILE = ROOT / "tests" / "frontend" / "example_trace.json"
EXAMPLE = re.compile(
    r"(## Example\n.*?```python\n)(?P<code>.*?)(```\n.*?```json\n)(?P<json>.*?)(```\n)", re.S
)
VARIES = ("torch",)
BEGIN, END = (
    "<!-- generated: {} (make schema) -->\n",
    "<!-- /generated: {} -->\n",
)  # differs from machine to machine: not compared


def tables() -> dict[str, dict[str, Any]]:
    from gradstep.columns import NODE_STATES, NODES, TENSORS

    return {
        name: {"required": list(table.key), "defaults": table.defaults}
        for name, table in (("nodes", NODES), ("states", NODE_STATES), ("tensors", TENSORS))
    }


def doc_example(doc: str | None = None) -> tuple[str, dict]:
    """The example's snippet and trace, as the docs show them."""
    found = EXAMPLE.search(DOC.read_text() if doc is None else doc)
    if not found:
        raise ValueError(f"{DOC.name}: no '## Example' with a python and a json block")
    return found["code"], json.loads(found["json"])


def traced(code: str) -> dict:
    """What ``gradstep trace`` prints for ``code`` (run in the sandbox, as the CLI runs it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x7.py"
        path.write_text(code)
        out = subprocess.run(
            [sys.executable, "-m", "gradstep", "trace", str(path)],
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "server")},
        )
    if out.returncode:
        raise RuntimeError(f"gradstep trace failed ({out.returncode}): {out.stderr.decode(errors='replace')}")
    return json.loads(out.stdout)


def dumps(value: Any, indent: str = "") -> str:
    """JSON indented by two, a value holding no object on one line."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = (f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, dict | list) and v for v in value):
        if "{" in json.dumps(value):
            return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def block(doc: str, name: str) -> tuple[int, int]:
    """Where the generated block ``name`` of ``doc`` starts and ends (its markers excluded)."""
    begin, end = BEGIN.format(name), END.format(name)
    if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
        raise ValueError(f"{DOC.name}: expected one {begin.strip()} ... {end.strip()}")
    return doc.index(begin) + len(begin), doc.index(end)


def replace_block(doc: str, name: str, text: str) -> str:
    start, stop = block(doc, name)
    return doc[:start] + text + doc[stop:]


def markdown(text: str) -> str:
    """A docstring's reST literals (````x````) as Markdown's (```x```)."""
    return text.replace("``", "`")


def diagnosis_kinds() -> str:
    """The docs' list of diagnosis kinds, from the rule registry."""
    from gradstep.diagnose.registry import RULES

    lines = []
    for rule in RULES:
        said = getattr(rule, "DESCRIPTION", None) or (rule.__doc__ or "").strip().split("\n")[0]
        lines.append(f"- `{rule.KIND}`" + (f": {markdown(said)}" if said else ""))
    return "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------- the Reference's field tables

SHOWN_DEFAULT = {("Trace", "version"): "`1`"}  # the model writes the current version; an absent one is 1
JSON_TYPES = {str: "string", int: "int", float: "number", bool: "bool", type(None): "null", Any: "any"}


def type_name(annotation: Any) -> str:
    """A field's type in the docs' notation: ``int \\| null``, ``[Reach]``, ``"ok"``, ``NodeInfo columns``."""
    from gradstep.schema import _Columns

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " \\| ".join(f"`{json.dumps(arg)}`" for arg in args)
    if origin is list:
        return f"[{type_name(args[0])}]"
    if isinstance(annotation, type) and issubclass(annotation, _Columns):
        return f"{annotation.row_model.__name__} columns"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.model_config.get("title") or annotation.__name__
    return JSON_TYPES[annotation]


def default_shown(model: type[BaseModel], name: str) -> str:
    from gradstep.schema import NodeTable, _Columns

    info = model.model_fields[name]
    if (model.__name__, name) in SHOWN_DEFAULT:
        return SHOWN_DEFAULT[model.__name__, name]
    if model is NodeTable.row_model and name == NodeTable.implicit:
        return "its position"
    if info.is_required():
        return "required"
    default = info.get_default(call_default_factory=True)
    return "no rows" if isinstance(default, _Columns) else f"`{json.dumps(default, ensure_ascii=False)}`"


def field_table(model: type[BaseModel]) -> str:
    """The docs' table of ``model``'s fields: name, type, default, and its description as meaning."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        cells = [f"`{name}`", type_name(info.annotation), default_shown(model, name), info.description or ""]
        rows.append(("| " + " | ".join(cells) + " |").replace("|  |", "| |"))
    return "\n".join(rows) + "\n\n"  # the blank line ends the table before the marker (else a row)


def documented_models() -> dict[str, type[BaseModel]]:
    """The models the Reference gives a table, by the name its headings give them."""
    from gradstep import schema

    models = (schema.Trace, schema.SourceFile, schema.TraceError, schema.Reach, schema.Use, schema.Warning_)
    models += (schema.NodeInfo, schema.SavedValue, schema.Step, schema.Update, schema.ParamUpdate)
    models += (schema.Link, schema.Diagnosis, schema.Fix, schema.NodeState, schema.TensorState, schema.Grad)
    return {model.model_config.get("title") or model.__name__: model for model in models}


GENERATED = {"diagnosis kinds": diagnosis_kinds} | {
    f"{name} fields": lambda model=model: field_table(model) for name, model in documented_models().items()
}


def generated(doc: str) -> str:
    """``doc`` with every generated block written anew."""
    for name, make in GENERATED.items():
        doc = replace_block(doc, name, make())
    return doc


# ---------------------------------------------------------------- gradstep/trace_dicts.py's TypedDicts

DICTS_FILE = ROOT / "server" / "gradstep" / "trace_dicts.py"
DICTS_BEGIN = (
    "# ---- generated from gradstep.schema by `make schema` (tests/trace/trace_copies.py): do not edit ----\n"
)
DICTS_END = "# ---- end of the generated TypedDicts ----\n"
# The models' TypedDicts, by model: the names the readers know (a few older than this list).
DICT_NAMES = {
    "TraceError": "TraceErrorDict",
    "SavedValue": "SavedDict",
    "NodeInfo": "NodeDict",
    "NodeState": "NodeStateDict",
    "Grad": "GradDict",
    "TensorState": "TensorDict",
    "Warning_": "WarningDict",
    "Reach": "ReachDict",
    "Use": "UseDict",
    "Link": "LinkDict",
    "ParamUpdate": "ParamUpdateDict",
    "Update": "UpdateDict",
    "Step": "StepDict",
    "Fix": "FixDict",
    "Diagnosis": "DiagnosisDict",
    "SourceFile": "SourceFileDict",
    "Trace": "TraceDict",
}
# Keys of the rows in memory that the wire has not: {dict: (key, type, the key it follows)}.
ROW_ONLY = {"StepDict": ("edges", "NotRequired[list[tuple[int, int]]]", "nodes")}


def dict_type(annotation: Any, aliases: dict[Any, str]) -> str:
    """``annotation`` as the TypedDicts write it: models as their dicts, a table as columns as a list
    of its rows' dicts, a ``Literal`` by its name in gradstep.schema."""
    from gradstep.schema import _Columns

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        if annotation not in aliases:
            raise ValueError(f"{annotation}: give it a name in gradstep/schema.py (the TypedDicts use it)")
        return f"schema.{aliases[annotation]}"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(dict_type(arg, aliases) for arg in args)
    if origin is list:
        return f"list[{dict_type(args[0], aliases)}]"
    if isinstance(annotation, type) and issubclass(annotation, _Columns):
        return f"list[{DICT_NAMES[annotation.row_model.__name__]}]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return DICT_NAMES[annotation.__name__]
    return "None" if annotation is type(None) else "Any" if annotation is Any else annotation.__name__


def typed_dicts() -> str:
    """The TypedDicts of trace_dicts.py: one per model, its required keys first, each model after
    the models it holds (a TypedDict's annotations are evaluated where it is defined)."""
    from gradstep import schema

    aliases = {
        value: name for name, value in vars(schema).items() if typing.get_origin(value) is typing.Literal
    }
    models = {name: getattr(schema, name) for name in DICT_NAMES}
    out: list[str] = []
    done: set[str] = set()

    def define(name: str) -> None:
        if name in done:
            return
        done.add(name)
        model = models[name]
        fields = model.model_fields
        keys = [key for key in fields if fields[key].is_required()] + [
            k for k in fields if not fields[k].is_required()
        ]
        for info in fields.values():
            for arg in re.findall(r"\b(\w+)Dict\b", dict_type(info.annotation, aliases)):
                held = next(m for m, d in DICT_NAMES.items() if d == arg + "Dict")
                if held != name:
                    define(held)
        lines = ["@_strict_keys", f"class {DICT_NAMES[name]}(TypedDict):"]
        extra = ROW_ONLY.get(DICT_NAMES[name])
        for key in keys:
            hint = dict_type(fields[key].annotation, aliases)
            lines.append(f"    {key}: {hint if fields[key].is_required() else f'NotRequired[{hint}]'}")
            if extra and extra[2] == key:
                lines.append(f"    {extra[0]}: {extra[1]}")
        out.append("\n".join(lines) + "\n")

    for name in DICT_NAMES:
        define(name)
    return "\n\n" + "\n\n".join(out) + "\n\n"


def with_typed_dicts(text: str) -> str:
    """trace_dicts.py's text with its generated TypedDicts written anew."""
    if text.count(DICTS_BEGIN) != 1 or text.count(DICTS_END) != 1:
        raise ValueError(f"{DICTS_FILE.name}: expected one {DICTS_BEGIN.strip()} ... {DICTS_END.strip()}")
    start, stop = text.index(DICTS_BEGIN) + len(DICTS_BEGIN), text.index(DICTS_END)
    return text[:start] + typed_dicts() + text[stop:]


def write() -> None:
    DICTS_FILE.write_text(with_typed_dicts(DICTS_FILE.read_text()))
    TABLES_FILE.write_text(dumps(tables()) + "\n")
    doc = generated(DOC.read_text())
    code, _ = doc_example(doc)
    trace = traced(code)
    found = EXAMPLE.search(doc)
    assert found
    text = dumps(trace) + "\n"
    DOC.write_text(doc[: found.start("json")] + text + doc[found.end("json") :])
    EXAMPLE_FILE.write_text(text)


if __name__ == "__main__":
    write()
