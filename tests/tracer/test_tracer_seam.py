"""The C passes (tracer/_nodes.c) and their Python twins (tracer/passes.py) are one list.

Every function of the C module but ``setup`` (which hands it graph.py's caches and helpers and
has nothing to twin) is a pass with a Python twin of the same name and parameters in
passes.ALL, and the other way round; the C code's record keys are fields of the schema's
models; and the whole-trace comparisons of tests/tracer/test_tracer_native.py run every C pass.
"""

from __future__ import annotations

import inspect
import re
import types
from collections import Counter
from pathlib import Path

import pytest
from gradstep import schema
from gradstep.tracer import graph, passes, record
from gradstep.tracer.names import Names
from test_tracer_native import ODD_SAVES, TRANSFORMER

SOURCE = (Path(graph.__file__).parent / "_nodes.c").read_text()
NOT_A_PASS = {"setup"}  # gives the module torch.Tensor and graph.py's caches: no Python twin

needs_native = pytest.mark.skipif(graph._nodes is None, reason="the C reader was not built")


def _method_table() -> list[str]:
    table = SOURCE[SOURCE.index("static PyMethodDef methods[]") :]
    table = table[: table.index("{NULL, NULL")]
    return re.findall(r'\{"(\w+)", \w+, METH_', table)


def _c_parameters(name: str) -> list[str]:
    """The parameters of a C pass, from the ``/* name(a, b, ...)`` comment above it."""
    found = re.search(rf"/\* {name}\(([^)]*)\)", SOURCE)
    assert found, f"_nodes.c: no '/* {name}(...)' comment says the parameters of {name}"
    return [p.strip() for p in found.group(1).split(",")]


def test_every_c_function_but_setup_is_a_pass_with_a_python_twin_and_back():
    c = set(_method_table()) - NOT_A_PASS
    assert c == set(passes.ALL)
    assert set(vars(passes.PYTHON)) == set(passes.ALL)
    assert len(passes.ALL) == len(set(passes.ALL))


@needs_native
def test_the_built_module_is_the_source_read_here():
    public = {k for k, v in vars(graph._nodes).items() if isinstance(v, types.BuiltinFunctionType)}
    assert public == set(_method_table())


@pytest.mark.parametrize("name", passes.ALL)
def test_a_pass_takes_the_same_parameters_in_c_and_python(name):
    twin = inspect.signature(getattr(passes.PYTHON, name))
    assert list(twin.parameters) == _c_parameters(name)


@pytest.mark.parametrize("name, fields", [("into", graph.Into._fields), ("reading", graph.Reading._fields)])
def test_read_new_unpacks_its_tuples_in_their_order(name, fields):
    found = re.search(rf"\*   {name} = \(([^)]*)\)", SOURCE)
    assert found, f"_nodes.c: read_new's comment lists no '{name} = (...)'"
    assert [p.strip() for p in found.group(1).split(",")] == list(fields)


def test_the_c_module_reads_no_attribute_of_the_tracers_own_objects():
    """The passes are handed containers: the attribute names C interns are torch's, or the keys
    of the records it writes."""
    interned = set(re.findall(r'\{&s_\w+, "(\w+)"', SOURCE))
    records = {f for names in _c_fields().values() for f in names} | {"tensors"}  # a saved value's kind
    ours = {*vars(graph.Graph(0, 1, passes.chosen())), *vars(graph.SeqRanges()), *vars(graph.Graph)}
    ours |= {*vars(Names()), *vars(Names)}
    assert (interned - records) & ours == set()
    assert "PyObject_CallMethodObjArgs" not in SOURCE  # no method of ours called by name either


def _c_fields() -> dict[str, list[str]]:
    table = SOURCE[SOURCE.index("} fields[] = {") :]
    table = table[: table.index("};")]
    out: dict[str, list[str]] = {}
    for name, models in re.findall(r'\{&s_\w+, "(\w+)", "([\w ]+)"\}', table):
        for model in models.split():
            out.setdefault(model, []).append(name)
    return out


def test_the_keys_c_writes_are_fields_of_the_schema_in_its_order():
    fields = _c_fields()
    assert set(fields) == {"NodeInfo", "NodeState", "SavedValue", "TensorState"}
    for model, names in fields.items():
        in_schema = [f for f in getattr(schema, model).model_fields if f in names]
        assert names == in_schema, f"_nodes.c fields[]: {model}'s should be its schema fields, in their order"
    kinds = set(schema.SavedValue.model_fields["kind"].annotation.__args__)
    assert kinds == {"tensor", "tensors", "value"}  # the kinds C writes: s_tensor, s_tensors, s_value


@needs_native
def test_the_built_module_lists_the_same_fields():
    assert graph._nodes.FIELDS == _c_fields()


def _calls(native: object | None, code: str) -> tuple[Counter, Counter]:
    """How often each pass ran to its end, and how often it raised, recording ``code``."""
    done: Counter = Counter()
    raised: Counter = Counter()

    def counted(name, fn):
        def run(*args):
            try:
                out = fn(*args)
            except Exception:
                raised[name] += 1
                raise
            done[name] += 1
            return out

        return run

    source = passes.PYTHON if native is None else native
    stand_in = types.SimpleNamespace(**{n: counted(n, getattr(source, n)) for n in passes.ALL})
    saved = graph._nodes, passes.PYTHON
    try:
        if native is None:
            graph._nodes, passes.PYTHON = None, stand_in
        else:
            graph._nodes = types.SimpleNamespace(**{**vars(native), **vars(stand_in)})
        record(code)
    finally:
        graph._nodes, passes.PYTHON = saved
    return done, raised


@needs_native
def test_the_whole_trace_comparisons_run_every_pass_in_c_and_in_python():
    """tests/tracer/test_tracer_native.py records these with each reader and compares the bytes: each
    pass must have run there, in C without falling back at least once, and in Python."""
    c_done, py_done = Counter(), Counter()
    for code in (ODD_SAVES, TRANSFORMER):
        c_done += _calls(graph._nodes, code)[0]
        py_done += _calls(None, code)[0]
    assert {n for n in passes.ALL if not c_done[n]} == set()
    assert {n for n in passes.ALL if not py_done[n]} == set()
