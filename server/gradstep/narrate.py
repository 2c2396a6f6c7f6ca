"""Narration: a short plain-language ``explanation`` for every step, from the trace alone.

A pure function of the trace's plain dicts (as ``record()`` builds them): each
sentence states a fact the trace carries — which nodes a line built and what
they saved, which nodes a call ran and in which order, whose saved tensors it
released or kept, how each ``.grad`` changed, where and why a call failed. The
spans that name a node or a tensor are listed in ``links`` so a viewer can
highlight what the text talks about.

It runs once per trace, where the trace is finished, so it must stay cheap: one
pass over each step's node states, nothing quadratic in the graph's size.
"""

from __future__ import annotations

import ast
import math
from collections import Counter

from gradstep import cells, narrate_error
from gradstep.grad_equality import same_grad
from gradstep.narrate_updates import Sources, narrate_update
from gradstep.printing import fmt_bytes, fmt_number, fmt_values, quoted
from gradstep.schema import CALL_KINDS
from gradstep.trace_dicts import GradDict, NodeDict, StepDict, TensorDict, TraceDict

MAX_LISTED = 6  # nodes or tensors named one by one before the rest is summarised
MAX_VALUES = 4  # gradients with at most this many elements are shown by value
MAX_NORMS = 3  # when many .grad changed: the largest named by norm (and the smallest)


class _Text:
    """Sentences under construction, with the spans that name nodes and tensors."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.links: list[dict] = []

    def add(self, text: str) -> _Text:
        self.parts.append(text)
        self.size += len(text)
        return self

    def node(self, nid: int, label: str) -> _Text:
        self.links.append({"start": self.size, "end": self.size + len(label), "node": nid, "tensor": None})
        return self.add(label)

    def tensor(self, name: str, label: str) -> _Text:
        self.links.append({"start": self.size, "end": self.size + len(label), "node": None, "tensor": name})
        return self.add(label)

    def join(self, items: list, write, last: str = "and") -> None:
        """``write(item)`` for each item, separated as in prose: a, b and c."""
        for i, item in enumerate(items):
            if i:
                self.add(f" {last} " if i == len(items) - 1 else ", ")
            write(item)

    def sentence_break(self) -> None:
        if self.parts and not self.parts[-1].endswith(" "):
            self.add(" ")

    def text(self) -> str:
        return "".join(self.parts).rstrip()


def fmt_grad(grad: GradDict | None) -> str:
    """A gradient as a reader wants it: its values as torch prints them when small, else its shape
    and norm."""
    if grad is None:
        return "None"
    values = grad.get("values")
    shape = grad["shape"]
    if values is not None and math.prod(shape) <= MAX_VALUES:
        return fmt_values(values, grad["dtype"], grad.get("format"))
    norm = grad["norm"]
    size = "×".join(str(s) for s in shape) or "scalar"
    return f"a {size} tensor of norm {fmt_number(norm)}" if norm is not None else f"a {size} tensor"


def _saved_bytes(info: NodeDict) -> int:
    """What a node's saved tensors hold: the trace's own ``NodeInfo.saved_bytes`` (each storage once),
    never a sum of its slots (``x * x`` saves one storage in two slots). Absent: none readable."""
    return info.get("saved_bytes") or 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class _Narrator:
    def __init__(self, trace: TraceDict):
        self.trace = trace
        self.nodes: list[dict] = trace.get("nodes") or []
        self.freed_at: dict[int, int] = {}  # node id -> index of the step that first showed it freed
        self.stale_at: dict[int, int] = {}
        self.new_at: dict[int, list[int]] = {}  # step index -> ids of the nodes it shows first
        self.op: list[str] = []  # op of each node, by id (nodes[i].id == i)
        for info in self.nodes:
            self.new_at.setdefault(info["step"], []).append(info["id"])
            self.op.append(info["op"])
        # file (None: the snippet) -> line -> backward/grad calls written there
        self.calls: dict[int | None, dict[int, list[str]]] | None = None
        self.tensor_names: set[str] = set()  # tensors the current step lists (links may name only these)
        self.ran_at: dict[int, int] = {}  # node id -> index of the last call step that ran it
        self.states: dict[int, dict] = {}  # the current step's node states that say more than their id
        self.update_sources: Sources | None = None  # the optimizer calls, by line (update steps)

    def label(self, nid: int) -> str:
        if not 0 <= nid < len(self.nodes):  # an id the node table does not hold (a cut-short trace)
            return "?"
        info = self.nodes[nid]
        if info["op"] == "AccumulateGrad":
            # the leaf as this step lists it: a rebound name's old leaf is shown under its label
            vars_ = self.states.get(nid, {}).get("vars")
            tensor = vars_[0] if vars_ else info.get("tensor")
            if tensor:
                return f"AccumulateGrad ({tensor})"
        return info["op"]

    def run(self) -> None:
        prev_states: dict[int, dict] = {}
        prev_step: dict | None = None
        for step in self.trace.get("steps") or ():
            states = {}  # only the states that say more than their id: most say nothing
            index = step["index"]
            for st in step.get("nodes") or ():
                if len(st) == 1 or ("dropped" in st and st["dropped"]):
                    continue
                nid = st["id"]
                states[nid] = st
                if "freed" in st and st["freed"] and nid not in self.freed_at:
                    self.freed_at[nid] = index
                if "stale" in st and st["stale"] and nid not in self.stale_at:
                    self.stale_at[nid] = index
            self.tensor_names = {te["name"] for te in step.get("tensors") or ()}
            self.states = states
            text = _Text()
            if step["kind"] == "forward":
                self.forward(step, states, prev_states, prev_step, text)
            elif step["kind"] == "update":
                self.update(step, states, prev_states, text)
            elif step["kind"] == "error":
                narrate_error.explain(self, step, states, text)
            else:
                self.call(step, states, prev_states, prev_step, text)
            step["explanation"] = text.text()
            step["links"] = [link for link in text.links if link["end"] <= len(step["explanation"])]
            if step["kind"] in CALL_KINDS:
                for nid, st in states.items():
                    if st.get("executed") or st.get("failed"):
                        self.ran_at[nid] = index
            prev_states, prev_step = states, step

    # -- update steps (narrate_updates.py) --------------------------------------

    def update(self, step: StepDict, states: dict, prev: dict, t: _Text) -> None:
        if self.update_sources is None:
            self.update_sources = Sources(self.trace.get("code") or "")
        narrate_update(
            step,
            t,
            self.update_sources,
            lambda name, label: self.tensor_or_text(t, name, label),
            self.at(step),
        )
        self._stale(step, states, prev, t)  # an optimizer step changes parameters a graph saved

    # -- forward steps ---------------------------------------------------------

    def forward(self, step: StepDict, states: dict, prev: dict, prev_step: StepDict | None, t: _Text) -> None:
        index = step["index"]
        new = self.new_at.get(index, [])  # first shown at this step, so alive in it
        where = f"Line {self.at(step)}" if step.get("line") is not None else "The snippet"
        repeat = step.get("repeat") or 1
        retaining = self._newly_retaining(step, prev_step)
        if retaining and not new:
            t.add(f"{where}: ")
            self._retaining(retaining, index, t)
            self._stale(step, states, prev, t)
            self._dropped(step, t)
            self._unnamed(step, prev_step, t)
            return
        if repeat > 1:
            t.add(f"{where} (the last of {repeat} line executions folded into this step) built ")
        else:
            t.add(f"{where} built ")
        t.add(_plural(len(new), "node"))
        op = self.op
        ops = [nid for nid in new if op[nid] != "AccumulateGrad"]
        leaves = [nid for nid in new if op[nid] == "AccumulateGrad"]
        if new and len(ops) <= MAX_LISTED:
            t.add(": ")
            t.join(ops + leaves[: max(0, MAX_LISTED - len(ops))], lambda nid: self._built(nid, states, t))
            if len(leaves) > MAX_LISTED - len(ops):
                t.add(f" and {len(leaves) - max(0, MAX_LISTED - len(ops))} more AccumulateGrad nodes")
            t.add(".")
        elif new:
            counts = Counter(op[nid] for nid in new)
            top = counts.most_common(MAX_LISTED)
            t.add(": " + ", ".join(f"{n} × {op}" for op, n in top))
            if len(counts) > len(top):
                t.add(f" and {len(counts) - len(top)} other ops")
            t.add(".")
        else:
            t.add(".")
        if retaining:
            t.sentence_break()
            self._retaining(retaining, index, t)
        self._stale(step, states, prev, t)
        self._dropped(step, t)
        self._unnamed(step, prev_step, t)
        before = prev_step.get("saved_bytes", 0) if prev_step is not None else 0
        if before != step.get("saved_bytes", 0):
            t.sentence_break()
            delta = step.get("saved_bytes", 0) - before
            sign = "+" if delta > 0 else "−"
            t.add(
                f"Saved tensors now hold {fmt_bytes(step.get('saved_bytes', 0))} ({sign}{fmt_bytes(abs(delta))})."
            )

    @staticmethod
    def _newly_retaining(step: StepDict, prev_step: StepDict | None) -> list[TensorDict]:
        """Non-leaf tensors whose .retain_grad() ran at this step."""
        before = {te["name"] for te in (prev_step or {}).get("tensors") or () if te.get("retains_grad")}
        return [
            te
            for te in step.get("tensors") or ()
            if te.get("retains_grad") and not te["is_leaf"] and te["name"] not in before
        ]

    def _retaining(self, tensors: list[TensorDict], index: int, t: _Text) -> None:
        """What ``retain_grad()`` changes, and why it changes nothing for a backward already run."""
        for k, te in enumerate(tensors[:MAX_LISTED]):
            name = te["name"]
            if k:
                t.sentence_break()
            t.add(f"`{name}.retain_grad()`: ")
            self.tensor_or_text(t, name, name)
            t.add(" is not a leaf, so a backward passes its gradient on without keeping it. From here on, ")
            t.add(f"a backward that reaches {name}'s grad_fn keeps it in {name}.grad.")
            node = te.get("node")
            ran = self.ran_at.get(node) if node is not None else None
            if ran is not None and ran < index and te.get("grad") is None:
                call = self.trace["steps"][ran]
                t.add(" The ")
                t.add("autograd.grad" if call["kind"] == "grad" else "backward")
                t.add(f" at line {self.at(call)} (step {ran + 1}) already ran through ")
                t.node(node, self.label(node))
                t.add(
                    f" before this line, so it kept nothing: {name}.grad stays None until a backward runs after it."
                )

    def _built(self, nid: int, states: dict, t: _Text) -> None:
        info = self.nodes[nid]
        t.node(nid, self.label(nid))
        details = []
        vars_ = states.get(nid, {}).get("vars") or []
        if info["op"] != "AccumulateGrad" and vars_:
            details.append(("grad_fn of ", vars_[0]))
        saved = [s for s in info.get("saved") or () if s["kind"] != "value"]
        if info["op"] == "AccumulateGrad":
            pass
        elif saved:
            names = [s["name"] + (f" = {s['of']}" if s.get("of") else "") for s in saved]
            listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
            details.append((f"saved {listed}, {fmt_bytes(_saved_bytes(info))}", None))
        else:
            details.append(("saved no tensors", None))
        if details:
            t.add(" (")
            for i, (text, tensor) in enumerate(details):
                if i:
                    t.add("; ")
                t.add(text)
                if tensor:
                    self.tensor_or_text(t, tensor, tensor)
            t.add(")")

    def _stale(self, step: dict, states: dict, prev: dict, t: _Text) -> None:
        now = [nid for nid, st in states.items() if st.get("stale") and not prev.get(nid, {}).get("stale")]
        for nid in now[:MAX_LISTED]:
            which = states[nid].get("stale_saved") or []
            saved = {s["name"]: s for s in self.nodes[nid].get("saved") or ()}
            t.sentence_break()
            t.add("The tensor ")
            t.add(", ".join(which) or "that")
            ofs = [saved[w]["of"] for w in which if w in saved and saved[w].get("of")]
            if ofs:
                t.add(" (")
                self.tensor_or_text(t, ofs[0], ofs[0])
                t.add(")")
            t.add(" that ")
            t.node(nid, self.label(nid))
            t.add(" saved was modified in place here: it is stale now, and a backward that reaches ")
            t.node(nid, self.label(nid))
            t.add(" will fail.")

    def _unnamed(self, step: StepDict, prev_step: StepDict | None, t: _Text) -> None:
        """Tensors that can hold a .grad and that no name reaches from this step on (a rebound
        name's old leaf, a rebuilt model's old parameters): what the name is now, and the label
        the leaf is shown under."""
        before = {te["name"] for te in (prev_step or {}).get("tensors") or ()}
        tensors = step.get("tensors") or []
        now = {te["name"]: te for te in tensors}
        new = [te for te in tensors if te.get("unnamed") and te["name"] not in before]
        if not new:
            return
        grad_fn_of = {}  # variable -> the node it is the output of (a non-leaf is listed only there)
        for nid, st in self.states.items():
            if self.op[nid] != "AccumulateGrad":
                for var in st.get("vars") or ():
                    grad_fn_of.setdefault(var, nid)
        for te in new[:MAX_LISTED]:
            label, was = te["name"], te.get("was")
            t.sentence_break()
            current = now.get(was) if was else None
            if was and (was in grad_fn_of or current is not None):
                self._code_name(t, was)
                t.add(" now names ")
                if was in grad_fn_of:
                    t.add("a non-leaf, the output of ")
                    t.node(grad_fn_of[was], self.label(grad_fn_of[was]))
                elif current is not None and current["is_leaf"]:
                    t.add("another leaf")
                else:
                    t.add("another tensor")
                t.add("; the leaf it named is still alive and is shown as ")
            elif was:
                t.add(f"No name reaches the leaf `{was}` named any more, but it is alive; it is shown as ")
            else:
                t.add("A leaf no name reaches is alive; it is shown as ")
            self._code_name(t, label)
            now_grad = f" (it is {fmt_grad(te.get('grad'))} now)" if te.get("grad") is not None else ""
            if te.get("node") is not None:
                t.add(f": a backward through a graph that holds it accumulates into its .grad{now_grad}.")
            else:  # no live graph holds it: an optimizer does
                t.add(f": an optimizer holds it, so its step() still updates it{now_grad}.")
        if len(new) > MAX_LISTED:
            t.sentence_break()
            t.add(
                f"{len(new) - MAX_LISTED} more tensors no name reaches are shown under labels of their own."
            )

    def _code_name(self, t: _Text, name: str) -> None:
        """A tensor's name: linked when the step lists it, else as code."""
        if name in self.tensor_names:
            t.tensor(name, name)
        else:
            t.add(f"`{name}`")

    def _dropped(self, step: dict, t: _Text) -> None:
        dropped = sum(1 for st in step.get("nodes") or () if st.get("dropped"))
        if dropped:
            t.sentence_break()
            t.add(
                f"{_plural(dropped, 'node')} that no variable reaches any more "
                f"{'was' if dropped == 1 else 'were'} dropped (torch frees {'it' if dropped == 1 else 'them'})."
            )

    # -- call steps ------------------------------------------------------------

    def call(self, step: StepDict, states: dict, prev: dict, prev_step: StepDict | None, t: _Text) -> None:
        ordered = []
        failed = None
        for nid, st in states.items():
            if "order" in st and st["order"] is not None:
                ordered.append((st["order"], nid))
            if "failed" in st and st["failed"]:
                failed = nid
        ordered.sort()
        ran = [nid for _, nid in ordered if states[nid].get("executed")]
        retain = bool(step.get("retain_graph"))
        self._call_head(step, ordered, states, t)
        error = step.get("error")
        # What a learner came for first: a failure, what changed in .grad, what was freed; then the
        # engine's order.
        t.add(":")
        if error:
            self._failure(step, failed, ran, states, t)
        self._grads(step, prev_step, t)
        self._unnamed(step, prev_step, t)
        self._returned(step, t)
        self._memory(step, ran, states, prev, prev_step, retain, t)
        self._order(ran, error, failed, t)
        if step.get("rebuilt"):
            lines = step.get("ran_lines") or []
            at = f" (line {', '.join(map(str, lines))})" if lines else ""
            t.sentence_break()
            t.add(
                f"On the way it built {_plural(step['rebuilt'], 'node')} again{at}: activation checkpointing "
                "recomputes the forward whose saved tensors it did not keep, and frees them as it goes."
            )
        elif step.get("ran_lines"):
            t.sentence_break()
            t.add(
                f"The snippet's own code ran during the call: line {', '.join(map(str, step['ran_lines']))}."
            )
        if step.get("create_graph"):
            built = sum(1 for nid in self.new_at.get(step["index"], ()) if self.nodes[nid].get("grad_graph"))
            if built:
                t.sentence_break()
                t.add(f"create_graph=True built {_plural(built, 'node')} of the gradient's own graph.")

    def _returned(self, step: StepDict, t: _Text) -> None:
        returned = step.get("returned")
        if returned is None:
            return
        t.sentence_break()
        t.add("It returned ")
        names = step.get("inputs") or []
        items = list(enumerate(returned))

        def write(item):
            i, g = item
            t.add(fmt_grad(g))
            if i < len(names) and names[i] != "?":
                t.add(" for ")
                self.tensor_or_text(t, names[i], names[i])

        t.join(items, write)
        t.add(" (returned, not written into .grad).")

    def _order(self, ran: list[int], error: dict | None, failed: int | None, t: _Text) -> None:
        t.sentence_break()
        if len(ran) > 2 * MAX_LISTED:  # a real model's backward: the order of hundreds is not read
            t.add(f"It ran {_plural(len(ran), 'node')}, from ")
            t.node(ran[0], self.label(ran[0])).add(" to the leaves (numbered in the graph in order).")
        elif ran:
            t.add(f"It ran {_plural(len(ran), 'node')}{' in this order' if len(ran) > 1 else ''}: ")
            shown = ran[:MAX_LISTED]
            for i, nid in enumerate(shown):
                if i:
                    t.add(" → ")
                t.node(nid, self.label(nid))
            rest = ran[len(shown) :]
            if rest:
                # the leaves come last and are what a reader looks for: named, not counted away
                leaves = [nid for nid in rest if self.op[nid] == "AccumulateGrad"][:MAX_LISTED]
                t.add(f" → … ({len(rest)} more")
                if leaves:
                    t.add(", among them ")
                    t.join(leaves, lambda nid: t.node(nid, self.label(nid)))
                t.add(")")
            t.add(".")
        elif error and failed is None:
            t.add("It failed before the engine started: no node ran.")
        elif error:
            t.add("It could not run even its first node.")
        else:
            t.add("It ran no node.")

    def _call_head(self, step: dict, ordered: list, states: dict, t: _Text) -> None:
        api = step.get("api") or ("torch.autograd.grad" if step["kind"] == "grad" else "backward")
        roots = [nid for order, nid in ordered if order == 0]
        root_var = None
        for nid in roots:
            vars_ = states[nid].get("vars") or []
            if vars_:
                root_var = vars_[0]
                break
        flags = [f"retain_graph={bool(step.get('retain_graph'))}"]
        if step.get("create_graph"):
            flags.append("create_graph=True")
        if step.get("gradient"):
            flags.append("gradient given")
        if step.get("inputs"):
            flags.append("inputs=" + ", ".join(step["inputs"]))
        t.add("`")
        source = self.call_source(step.get("line"), step.get("file"))
        if source:
            t.add(source)
        elif api == "Tensor.backward" and root_var:
            self.tensor_or_text(t, root_var, root_var)
            t.add(".backward()")
        elif root_var:
            t.add(f"{api}({root_var}, …)")
        else:
            t.add(f"{api}()" if api != "Tensor.backward" else ".backward()")
        t.add("`")
        if step.get("line") is not None:
            t.add(f" (line {self.at(step)}, {', '.join(flags)})")
        else:
            t.add(f" ({', '.join(flags)})")

    def at(self, rec: dict) -> str:
        """A step's or node's line; with its file in a recording of the user's own code (Trace.files)."""
        files = self.trace.get("files") or []
        file = rec.get("file")
        if file is not None and 0 <= file < len(files):
            return f"{rec.get('line')} of {files[file].get('path')}"
        return str(rec.get("line"))

    def call_source(self, line: int | None, file: int | None = None) -> str | None:
        """The call as the snippet wrote it, when its line holds exactly one short backward/grad call."""
        if line is None:
            return None
        if self.calls is None:
            self.calls = {}
        if file not in self.calls:
            self.calls[file] = _calls_by_line(self.source_of(file))
        found = self.calls[file].get(line) or []
        return found[0] if len(found) == 1 and len(found[0]) <= 80 else None

    def source_of(self, file: int | None) -> str:
        """The code of a step's or node's ``file`` (None: the snippet's)."""
        if file is None:
            return self.trace.get("code") or ""
        files = self.trace.get("files") or []
        return (files[file].get("code") if 0 <= file < len(files) else None) or ""

    def tensor_or_text(self, t: _Text, name: str, label: str) -> None:
        """Link ``label`` to tensor ``name`` when the step lists that tensor (else plain text)."""
        if name in self.tensor_names:
            t.tensor(name, label)
        else:
            t.add(label)

    def _failure(self, step: dict, failed: int | None, ran: list, states: dict, t: _Text) -> None:
        error = step["error"]
        first = error["message"].split(". ")[0].rstrip(".")
        t.sentence_break()
        if failed is None:
            t.add(f"It raised {error.get('type', 'an error')}: {quoted(first)}.")
            return
        info = self.nodes[failed] if failed < len(self.nodes) else {}
        t.add("It failed at ")
        t.node(failed, self.label(failed))
        if info.get("line") is not None:
            t.add(f" (built at line {self.at(info)})")
        st = states.get(failed, {})
        steps = self.trace.get("steps") or []
        by = self.freed_at.get(failed)
        if st.get("freed") and by == step["index"]:
            # freed by this failing call itself (anomaly mode's NaN check, a hook that raised): the
            # release is not why it failed, the error is
            t.add(f": {first}.")
        elif st.get("freed"):
            if by is not None and by < step["index"] and steps[by]["kind"] in CALL_KINDS:
                t.add(
                    f": its saved tensors were freed by the {'autograd.grad' if steps[by]['kind'] == 'grad' else 'backward'}"
                    f" call at line {self.at(steps[by])} (step {by + 1}), which ran without retain_graph=True."
                )
            else:
                t.add(": its saved tensors were already freed.")
        elif st.get("stale"):
            since = self.stale_at.get(failed)
            which = ", ".join(st.get("stale_saved") or []) or "a saved tensor"
            at = f" at line {self.at(steps[since])}" if since is not None else ""
            t.add(f": its saved {which} was modified in place{at} after it was saved.")
        else:
            t.add(".")
        if ran:
            t.add(
                f" The {_plural(len(ran), 'node')} before it had already run: a failed backward is not all-or-nothing."
            )

    def _memory(
        self, step: dict, ran: list, states: dict, prev: dict, prev_step: dict | None, retain: bool, t: _Text
    ) -> None:
        op = self.op
        ops = [nid for nid in ran if op[nid] != "AccumulateGrad"]
        if not ops:
            return
        before = prev_step.get("saved_bytes", 0) if prev_step else 0
        after = step.get("saved_bytes", 0)
        if retain:
            if after:
                t.sentence_break()
                t.add(
                    f"retain_graph=True kept the saved tensors of the nodes it ran (saved tensors hold {fmt_bytes(after)}), "
                )
                t.add("so another backward through them works.")
            return
        released = [nid for nid in ops if states[nid].get("freed") and not prev.get(nid, {}).get("freed")]
        if released:
            t.sentence_break()
            t.add("It released the saved tensors of ")
            if len(released) > MAX_LISTED:  # counted by op, as a forward step counts what it built
                counts = Counter(self.op[nid] for nid in released).most_common()
                t.add(f"{len(released)} nodes: ")
                shown = [f"{n} × {op}" for op, n in counts[:MAX_LISTED]]
                if len(counts) > MAX_LISTED:
                    shown.append(f"{len(counts) - MAX_LISTED} other ops")
                t.join(shown, t.add)
            else:
                t.join(released, lambda nid: t.node(nid, self.label(nid)))
            t.add(f" (saved tensors held: {fmt_bytes(before)} → {fmt_bytes(after)}).")
        # a call without retain_graph frees every node it ran that saved a tensor: the rest saved none
        # (said only when that is why nothing was released: beside a release it is noise)
        savers_none = [nid for nid in ops if not states[nid].get("freed")] if not released else []
        if savers_none:
            t.sentence_break()
            t.join(savers_none[:MAX_LISTED], lambda nid: t.node(nid, self.label(nid)))
            if len(savers_none) > MAX_LISTED:
                t.add(f" and {len(savers_none) - MAX_LISTED} more")
            t.add(
                f" saved no tensors, so a second backward through {'it' if len(savers_none) == 1 else 'them'}"
                " alone would still work."
            )

    def _grads(self, step: dict, prev_step: StepDict | None, t: _Text) -> None:
        prev_tensors = (prev_step or {}).get("tensors") or ()
        before = {te["name"]: te.get("grad") for te in prev_tensors}
        # a leaf listed under a new label (its name was rebound) is the same leaf: its AccumulateGrad node
        by_leaf = {
            te["node"]: te.get("grad") for te in prev_tensors if te["is_leaf"] and te.get("node") is not None
        }
        changed = []
        kept = []
        unnamed = set()
        for te in step.get("tensors") or ():
            name, grad = te["name"], te.get("grad")
            if te.get("unnamed"):
                unnamed.add(name)
            if name in before:
                old = before[name]
            else:
                old = by_leaf.get(te.get("node")) if te["is_leaf"] and te.get("node") is not None else None
            if not same_grad(old, grad):
                changed.append((name, old, grad))
            elif grad is not None:
                kept.append(name)
        if len(changed) > MAX_LISTED:
            self._grads_summary(changed, unnamed, t)
            changed_listed: list = []
        else:
            changed_listed = changed
        for name, old, grad in changed_listed:
            t.sentence_break()
            t.tensor(name, f"{name}'s .grad" if name in unnamed else f"{name}.grad")
            if old is None:  # the numbers link to their tensor too; torch's 448. must not end a sentence
                t.add(" was None; the call wrote ").tensor(name, fmt_grad(grad)).add(" into it.")
            elif grad is None:
                t.add(" was reset to None.")
            else:
                t.add(" went from ").tensor(name, fmt_grad(old)).add(" to ").tensor(name, fmt_grad(grad))
                t.add(" (it accumulates: old + new).")
        if step.get("error") and not changed:
            t.sentence_break()
            if kept:
                t.add("No .grad changed: ")
                t.join(kept[:MAX_LISTED], lambda name: t.tensor(name, f"{name}.grad"))
                t.add(" kept " + ("its value." if len(kept) == 1 else "their values."))
            else:
                t.add("No .grad changed.")

    def _grads_summary(self, changed: list, unnamed: set, t: _Text) -> None:
        """Many .grad changed (a real model's backward): counted by module, the largest named, the
        smallest too — a list of them all would not be read (the tensors panel has it)."""
        modules = {name.rsplit(".", 1)[0] if "." in name else "" for name, _, _ in changed}
        written = sum(1 for _, old, grad in changed if old is None and grad is not None)
        reset = sum(1 for _, _, grad in changed if grad is None)
        normed = sorted(
            (
                (grad["norm"], name)
                for name, _, grad in changed
                if grad is not None and grad.get("norm") is not None
            ),
            key=lambda pair: -pair[0],
        )
        accumulated = len(changed) - written - reset
        where = f" in {len(modules)} modules" if len(modules) > 1 else ""
        t.sentence_break()
        if written == len(changed):
            t.add(f"The call wrote the .grad of {len(changed)} tensors{where} (each was None).")
        elif accumulated == len(changed):
            t.add(
                f"The call added into the .grad of {len(changed)} tensors{where} (it accumulates: old + new)."
            )
        else:
            counts = [
                f"{written} written where it was None" if written else "",
                f"{accumulated} accumulated (old + new)" if accumulated else "",
                f"{reset} reset to None" if reset else "",
            ]
            t.add(f"The call changed the .grad of {len(changed)} tensors{where}: ")
            t.add(", ".join(c for c in counts if c) + ".")

        def named(pair: tuple) -> None:
            norm, name = pair
            t.tensor(name, f"{name}'s .grad" if name in unnamed else name).add(f" ‖{fmt_number(norm)}‖")

        if normed:
            t.sentence_break()
            t.add("Largest .grad norms: ")
            t.join(normed[:MAX_NORMS], named)
            if len(normed) > MAX_NORMS:
                t.add("; smallest: ")
                named(normed[-1])
            t.add(". The tensors panel lists each.")


_CALL_NAMES = frozenset({"backward", "grad"})


def _calls_by_line(code: str) -> dict[int, list[str]]:
    try:
        tree, _ = cells.parse(code)
    except (SyntaxError, ValueError):
        return {}
    out: dict[int, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.end_lineno == node.lineno:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in _CALL_NAMES:
                segment = ast.get_source_segment(code, node)
                if segment:
                    out.setdefault(node.lineno, []).append(segment)
    return out


def narrate(trace: TraceDict) -> TraceDict:
    """Add ``explanation`` and ``links`` to every step of ``trace`` (in place); returns it.

    Never raises: a narration failure must not cost the user the trace, so the
    steps then keep no narration and the trace says so in ``notes``.
    """
    try:
        _Narrator(trace).run()
    except Exception as e:
        for step in trace.get("steps") or ():
            step["explanation"], step["links"] = "", []
        trace.setdefault("notes", []).append(
            f"No narration for this trace: {type(e).__name__} {quoted(str(e), 80)}."
        )
    return trace
