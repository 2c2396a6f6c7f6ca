"""The snippet's source as a syntax tree, and precise edits to it.

Fixes are rewrites at positions the syntax tree gives (never string guessing):
insert text at a (line, column), replace a node's span, add a statement before
or after another with the same indentation, delete a statement's lines.
Everything else in the snippet keeps its formatting and comments.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from dataclasses import dataclass

from gradstep import cells


@dataclass(frozen=True)
class Edit:
    line: int  # 1-based
    col: int  # 0-based, in characters
    end_line: int
    end_col: int
    text: str


class Source:
    def __init__(self, code: str):
        self.code = code
        self.tree, _ = cells.parse(code)  # a notebook cell's IPython lines skipped, as the run skipped them
        self.lines = code.splitlines(keepends=True)
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent

    @classmethod
    def parse(cls, code: str) -> Source | None:
        try:
            return cls(code)
        except (SyntaxError, ValueError):
            return None

    # -- positions (ast columns are UTF-8 byte offsets) ---------------------------

    def _chars(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def start(self, node: ast.AST) -> tuple[int, int]:
        return node.lineno, self._chars(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> tuple[int, int]:
        return node.end_lineno, self._chars(node.end_lineno, node.end_col_offset)

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.code, node) or ""

    def indent_of(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]

    # -- finding things --------------------------------------------------------------

    def walk(self) -> Iterator[ast.AST]:
        return ast.walk(self.tree)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        while node is not None and not isinstance(node, ast.stmt):
            node = self.parents.get(node)
        return node

    def body_of(self, stmt: ast.stmt) -> tuple[list[ast.stmt], int] | None:
        """The statement list that holds ``stmt``, and its position in it."""
        parent = self.parents.get(stmt)
        for field in ("body", "orelse", "finalbody"):
            body = getattr(parent, field, None)
            if isinstance(body, list) and stmt in body:
                return body, body.index(stmt)
        for handler in getattr(parent, "handlers", ()) or ():
            if stmt in handler.body:
                return handler.body, handler.body.index(stmt)
        return None

    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        node = self.parents.get(node)
        while node is not None and not isinstance(node, kinds):
            node = self.parents.get(node)
        return node

    def owns_its_lines(self, stmt: ast.stmt) -> bool:
        """``stmt`` starts its first line and nothing but a comment follows it on its last line."""
        first = self.lines[stmt.lineno - 1]
        if self._chars(stmt.lineno, stmt.col_offset) != len(self.indent_of(stmt.lineno)):
            return False
        rest = self.lines[stmt.end_lineno - 1][self.end(stmt)[1] :].strip()
        return bool(first.strip()) and (not rest or rest.startswith("#"))

    # -- edits --------------------------------------------------------------------------

    def replace(self, node: ast.AST, text: str) -> Edit:
        (line, col), (end_line, end_col) = self.start(node), self.end(node)
        return Edit(line, col, end_line, end_col, text)

    def insert_at(self, line: int, col: int, text: str) -> Edit:
        return Edit(line, col, line, col, text)

    def insert_before(self, stmt: ast.stmt, statement: str) -> Edit | None:
        if not self.owns_its_lines(stmt):
            return None
        return self.insert_at(stmt.lineno, 0, self.indent_of(stmt.lineno) + statement + "\n")

    def insert_after(self, stmt: ast.stmt, statement: str) -> Edit | None:
        if not self.owns_its_lines(stmt):
            return None
        line = stmt.end_lineno
        text = self.lines[line - 1]
        newline = "" if text.endswith("\n") else "\n"
        return self.insert_at(line, len(text), newline + self.indent_of(stmt.lineno) + statement + "\n")

    def delete(self, stmt: ast.stmt) -> Edit | None:
        if not self.owns_its_lines(stmt):
            return None
        end_line = stmt.end_lineno
        if end_line < len(self.lines):
            return Edit(stmt.lineno, 0, end_line + 1, 0, "")
        return Edit(stmt.lineno, 0, end_line, len(self.lines[end_line - 1]), "")

    def _whole_lines(self, stmt: ast.stmt) -> tuple[int, int, str] | None:
        """The text of the lines ``stmt`` spans (it must own them), and where they end."""
        if not self.owns_its_lines(stmt):
            return None
        text = "".join(self.lines[stmt.lineno - 1 : stmt.end_lineno])
        return stmt.lineno, stmt.end_lineno, text if text.endswith("\n") else text + "\n"

    def _lines_edit(self, first: int, last: int, text: str) -> Edit:
        """Replace lines ``first``..``last`` (whole, ``text`` ending in a newline) by ``text``; on the
        file's last line, the file keeps the final newline it had, or its lack of one."""
        if last < len(self.lines):
            return Edit(first, 0, last + 1, 0, text)
        ending = "\n" if self.lines[last - 1].endswith("\n") else ""
        return Edit(first, 0, last, len(self.lines[last - 1]), text.rstrip("\n") + ending)

    def wrap(self, stmt: ast.stmt, header: str) -> Edit | None:
        """Put ``stmt`` in a block: ``header`` (e.g. ``with torch.no_grad():``) at its indentation, it inside."""
        found = self._whole_lines(stmt)
        if found is None:
            return None
        first, last, text = found
        inner = "".join("    " + line if line.strip() else line for line in text.splitlines(keepends=True))
        return self._lines_edit(first, last, self.indent_of(first) + header + "\n" + inner)

    def unwrap(self, block: ast.With) -> Edit | None:
        """Replace a ``with`` block by its body, dedented to the block's own indentation."""
        found = self._whole_lines(block)
        body = block.body
        if found is None or body[0].lineno == block.lineno:
            return None
        outer, inner = self.indent_of(block.lineno), self.indent_of(body[0].lineno)
        if not inner.startswith(outer) or len(inner) == len(outer):
            return None
        cut = len(inner) - len(outer)
        lines = self.lines[body[0].lineno - 1 : block.end_lineno]
        if any(line.strip() and line[:cut].strip() for line in lines):
            return None  # a line less indented than the body (a continuation): not a plain dedent
        text = "".join(line[cut:] if line.strip() else line for line in lines)
        return self._lines_edit(block.lineno, block.end_lineno, text if text.endswith("\n") else text + "\n")

    def apply(self, edits: list[Edit | None]) -> str | None:
        """The code with ``edits`` applied (None when one of them could not be made, or two overlap)."""
        if not edits or any(e is None for e in edits):
            return None
        offsets = [0]
        for text in self.lines:
            offsets.append(offsets[-1] + len(text))

        def at(line: int, col: int) -> int:
            return offsets[line - 1] + col if line <= len(self.lines) else offsets[-1]

        spans = sorted(((at(e.line, e.col), at(e.end_line, e.end_col), e.text) for e in edits), reverse=True)
        for (start, _, _), (_, end, _) in zip(spans, spans[1:], strict=False):
            if end > start:
                return None
        code = self.code
        for start, end, text in spans:
            code = code[:start] + text + code[end:]
        return code


def call_name(call: ast.Call) -> str:
    """``backward`` for ``x.backward()``, ``torch.autograd.grad`` for that call, else the dotted name."""
    parts = []
    func = call.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def is_backward(call: ast.Call) -> bool:
    """``<tensor>.backward(...)`` (not ``torch.autograd.backward(...)``)."""
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "backward"
        and not is_autograd(call, "backward")
    )


def is_autograd(call: ast.Call, fn: str) -> bool:
    """``torch.autograd.<fn>(...)``, ``autograd.<fn>(...)`` (as imported from torch)."""
    name = call_name(call)
    return name in (f"torch.autograd.{fn}", f"autograd.{fn}")


def torch_alias(src: Source) -> str | None:
    """The name ``import torch`` binds in the snippet (``torch``, or its ``as`` name)."""
    for node in src.walk():
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    return alias.asname or "torch"
    return None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def names_in(node: ast.AST, ctx: type = ast.Load) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}


def assigned_names(stmt: ast.stmt) -> set[str]:
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    out: set[str] = set()
    for t in targets:
        out |= names_in(t, ast.Store)
    return out


def is_pure(node: ast.AST) -> bool:
    """A name or attribute path: evaluating it twice gives the same tensor, with no side effect."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def line_sources(old_code: str, new_code: str) -> list[int | None]:
    """For each line of ``new_code``, the line of ``old_code`` it comes from (1-based; None: added).

    The one line map between a snippet and its fix: diagnose uses it to find a line in the fixed
    code, and it is shipped with each fix (``Fix.source_lines``) for the page's side-by-side view
    and change marks. Lines compare with their ends' whitespace ignored (a fix may re-indent). A
    rewritten line comes from the line it replaces when the rewrite has as many lines; a line
    rewritten into more or fewer lines counts as removed, and its rewrite as added.
    """
    old = [t.strip() for t in old_code.splitlines()]
    new = [t.strip() for t in new_code.splitlines()]
    # The lines before the first change and after the last are where they were (counted from the
    # end after it). Only the changed middle is diffed: over the whole text, difflib pairs
    # `y.backward()` rewritten on line 4 with the identical `y.backward()` of line 5, and
    # says line 4 moved to 5.
    shortest = min(len(old), len(new))
    head = next((i for i in range(shortest) if old[i] != new[i]), shortest)
    tail = next((i for i in range(shortest - head) if old[-1 - i] != new[-1 - i]), shortest - head)
    sources: list[int | None] = list(range(1, head + 1)) + [None] * (len(new) - head - tail)
    sources += range(len(old) - tail + 1, len(old) + 1)
    matcher = difflib.SequenceMatcher(
        a=old[head : len(old) - tail], b=new[head : len(new) - tail], autojunk=False
    )
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and a1 - a0 == b1 - b0):
            for k in range(b1 - b0):
                sources[head + b0 + k] = head + a0 + k + 1
    return sources


def moved_line(old_code: str, new_code: str, line: int | None) -> int | None:
    """Where line ``line`` of ``old_code`` is in ``new_code`` (None: the fix removed it)."""
    if line is None:
        return None
    return next((i for i, s in enumerate(line_sources(old_code, new_code), 1) if s == line), None)
