"""Backward/grad calls in the source: find the one a step made, and rewrite its arguments."""

from __future__ import annotations

import ast

from gradstep.diagnose.source import Edit, Source, is_autograd, is_backward, keyword


def autograd_calls_at(src: Source, line: int | None) -> list[ast.Call]:
    """``x.backward(...)``, ``torch.autograd.backward(...)`` and ``torch.autograd.grad(...)`` calls spanning ``line``."""
    if line is None:
        return []
    found = [
        node
        for node in src.walk()
        if isinstance(node, ast.Call)
        and node.lineno <= line <= node.end_lineno
        and (is_backward(node) or is_autograd(node, "backward") or is_autograd(node, "grad"))
    ]
    return sorted(found, key=lambda c: (c.lineno, c.col_offset))


def the_call_at(src: Source, line: int | None) -> ast.Call | None:
    """The one backward/grad call at ``line`` (None when there is none, or more than one: ambiguous)."""
    found = autograd_calls_at(src, line)
    return found[0] if len(found) == 1 else None


def api_of(call: ast.Call) -> str:
    if is_backward(call):
        return "Tensor.backward"
    return "torch.autograd.grad" if is_autograd(call, "grad") else "torch.autograd.backward"


def output_of(call: ast.Call) -> ast.expr | None:
    """The tensor the call differentiates: the receiver of ``.backward()``, else its first argument."""
    if is_backward(call):
        return call.func.value
    if call.args:
        return call.args[0]
    kw = keyword(call, "outputs") or keyword(call, "tensors")
    return kw.value if kw else None


def set_keyword(src: Source, call: ast.Call, name: str, value: str) -> Edit:
    """Pass ``name=value`` to ``call``: replace the value if the keyword is there, else add it last."""
    kw = keyword(call, name)
    if kw is not None:
        return src.replace(kw.value, value)
    end_line, end_col = src.end(call)  # just past the closing parenthesis
    before = src.lines[end_line - 1][: end_col - 1].rstrip()
    has_args = bool(call.args or call.keywords)
    sep = " " if before.endswith(",") else (", " if has_args else "")
    return src.insert_at(end_line, end_col - 1, f"{sep}{name}={value}")


def drop_keyword(src: Source, call: ast.Call, name: str) -> Edit | None:
    """Remove ``name=...`` from ``call``, with the comma that joins it to its neighbour."""
    kw = keyword(call, name)
    if kw is None:
        return None
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    at = items.index(kw)
    start, end = src.start(kw), src.end(kw)
    if at > 0:  # from the end of the previous item: `f(a, k=v)` -> `f(a)`
        start = src.end(items[at - 1])
    elif len(items) > 1:  # to the start of the next one: `f(k=v, a)` -> `f(a)`
        end = src.start(items[1])
    return Edit(start[0], start[1], end[0], end[1], "")


def wrap_output(src: Source, call: ast.Call, method: str) -> Edit | None:
    """Differentiate ``output.<method>()`` instead of ``output`` (e.g. ``.sum()``)."""
    out = output_of(call)
    if out is None:
        return None
    if is_backward(call):
        # insert before the ".backward" dot: right for `y.backward()` and `(x**2).backward()` alike
        line, end_col = src.end(call.func)
        if call.func.end_lineno != call.func.lineno and line != call.func.lineno:
            return None
        text = src.lines[line - 1]
        attr_start = end_col - len("backward")
        if text[attr_start:end_col] != "backward":
            return None
        dot = text.rfind(".", 0, attr_start)
        if dot < 0 or text[dot + 1 : attr_start].strip():
            return None
        return src.insert_at(line, dot, f".{method}()")
    text = src.text(out)
    simple = isinstance(out, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return src.replace(out, f"{text}.{method}()" if simple else f"({text}).{method}()")


def replace_output(src: Source, call: ast.Call, text: str) -> Edit | None:
    out = output_of(call)
    return None if out is None else src.replace(out, text)
