/* The tracer's hot loops, in C: reading newly discovered autograd nodes into the node table,
 * and the per-step passes over every live node and every named tensor.
 *
 * A 24-layer transformer has ~1800 nodes, ~2700 saved slots and ~300 named tensors, and in
 * Python the bookkeeping around each torch call costs several times the call itself. Each
 * function here (but setup) has a Python twin of the same name and arguments in passes.py,
 * which is the reference and the fallback when this module is not built: the same records,
 * field for field and in the same key order (tests/tracer/test_tracer_native.py compares whole
 * traces; tests/tracer/test_tracer_seam.py holds the two lists of passes together). The passes are
 * handed the containers they read and write, never the tracer's own objects: the only
 * attributes read here are torch's. Rare cases (lists of saved tensors, unusual saved values)
 * are handed back to the Python helpers setup() gives. What this module may keep, and what it
 * shares with the Python reader: see NOTE [reader shared state] in passes.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define UNSEQUENCED 0xFFFFFFFFFFFFFFFFULL /* AccumulateGrad's sequence number */

/* Set once by setup(): torch.Tensor, graph.py's caches and its fallbacks (NOTE [reader shared state]). */
static PyObject *Tensor, *SlotCache, *type_slots, *jsonable, *describe, *DtypeNames, *dtype_name;

/* The keys of the records built here, gradstep/schema.py's fields, listed with their models in
 * PyInit__nodes (FIELDS there, which tests/tracer/test_tracer_seam.py checks against the schema); the
 * kinds of a saved value; and the torch attributes read. Interned once. */
static PyObject *s_id, *s_op, *s_step, *s_seq, *s_line, *s_tensor, *s_module, *s_grad_graph, *s_saved,
    *s_next, *s_name, *s_kind, *s_value, *s_shape, *s_dtype, *s_bytes, *s_of, *s_freed, *s_stale,
    *s_stale_saved, *s_order, *s_failed, *s_executed, *s_vars, *s_requires_grad, *s_is_leaf,
    *s_retains_grad, *s_node, *s_grad;
static PyObject *s_tensors; /* SavedValue.kind: "tensor" (s_tensor), "tensors", "value" (s_value) */
static PyObject *s_sequence_nr, *s_variable, *s_untyped_storage, *s_nbytes, *s_data_ptr, *s_grad_fn,
    *s_next_functions, *s_data; /* torch's (shape, dtype, grad, requires_grad, ... are fields too) */

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *objs[7];
    if (!PyArg_UnpackTuple(args, "setup", 7, 7, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                           &objs[6]))
        return NULL;
    PyObject **slots[7] = {&Tensor, &SlotCache, &type_slots, &jsonable, &describe, &DtypeNames, &dtype_name};
    for (int i = 0; i < 7; i++) {
        PyObject *old = *slots[i];
        Py_INCREF(objs[i]);
        *slots[i] = objs[i];
        Py_XDECREF(old);
    }
    Py_RETURN_NONE;
}

/* SeqRanges.lookup: the value current when ``seq`` was handed out, or NULL (no error) for none. */
static PyObject *seq_lookup(PyObject *starts, PyObject *values, unsigned long long seq) {
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
    while (lo < hi) { /* bisect_right */
        Py_ssize_t mid = (lo + hi) / 2;
        unsigned long long s = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(starts, mid));
        if (s == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (seq < s)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (lo == 0 || lo - 1 >= PyList_GET_SIZE(values))
        return NULL;
    return PyList_GET_ITEM(values, lo - 1); /* borrowed */
}

/* A new list or tuple of plain values, out of the cyclic collector's sight from the start (see
 * untrack_tree; a dict still becomes tracked when such a list goes into it, as CPython tracks a
 * dict on inserting any container, so dicts are untracked once built). Passes NULL through. */
static PyObject *untracked(PyObject *o) {
    if (o && PyObject_IS_GC(o) && PyObject_GC_IsTracked(o))
        PyObject_GC_UnTrack(o);
    return o;
}

/* Does weak reference ``ref`` still point at ``obj``? */
static int refers_to(PyObject *ref, PyObject *obj) {
    if (!PyWeakref_Check(ref))
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(target); /* only compared: obj is alive, held by the caller */
    return target == obj;
#else
    return PyWeakref_GetObject(ref) == obj;
#endif
}

static int is_plain(PyObject *v) {
    return PyLong_CheckExact(v) || PyFloat_CheckExact(v) || PyBool_Check(v) || PyUnicode_CheckExact(v);
}

/* The message of the exception being raised (a RuntimeError from reading a saved value), which is
 * cleared: a new reference, or NULL with an error set. */
static PyObject *raised_message(void) {
    PyObject *etype, *exc, *tb;
    PyErr_Fetch(&etype, &exc, &tb);
    PyErr_NormalizeException(&etype, &exc, &tb);
    PyObject *msg = exc ? PyObject_Str(exc) : NULL;
    Py_XDECREF(etype);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
    if (!msg && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "an exception without a value");
    return msg;
}

/* A saved value that is neither None nor a tensor: sizes and strides (tuples of ints) here, the
 * rest through graph.py's _jsonable. Returns a new reference. */
static PyObject *json_value(PyObject *v) {
    if (is_plain(v))
        return Py_NewRef(v);
    if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
        PyObject *seq = PySequence_Fast(v, "");
        if (!seq)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        PyObject **items = PySequence_Fast_ITEMS(seq);
        int plain = 1;
        for (Py_ssize_t i = 0; i < n && plain; i++)
            plain = is_plain(items[i]);
        PyObject *out = plain ? untracked(PySequence_List(seq)) : NULL;
        Py_DECREF(seq);
        if (plain)
            return out;
    }
    return PyObject_CallOneArg(jsonable, v);
}

static int set_new(PyObject *d, PyObject *key, PyObject *value) { /* steals value */
    if (!value)
        return -1;
    int r = PyDict_SetItem(d, key, value);
    Py_DECREF(value);
    return r;
}

/* graph.py's name for a dtype ("float32"): a new reference, or NULL with an error set. */
static PyObject *dtype_label(PyObject *dtype) {
    PyObject *name = PyDict_GetItemWithError(DtypeNames, dtype);
    if (name)
        return Py_NewRef(name);
    return PyErr_Occurred() ? NULL : PyObject_CallOneArg(dtype_name, dtype);
}

/* The name of a snippet tensor with the same data, shape (a tuple) and dtype, or NULL (no error). */
static PyObject *name_of_data(PyObject *index, PyObject *ptr, PyObject *shape, PyObject *dtype) {
    PyObject *same = PyDict_GetItemWithError(index, ptr);
    if (!same || !PyDict_Check(same))
        return NULL;
    PyObject *key = PyTuple_Pack(2, shape, dtype);
    if (!key)
        return NULL;
    PyObject *name = PyDict_GetItemWithError(same, key);
    Py_DECREF(key);
    return name; /* borrowed */
}

/* The layers of a model save the same sizes and dims over and over: records of one run that
 * are equal share one object (``shared``, Graph.shared: key -> record), which saves building, tracking
 * and freeing thousands of small dicts and lists. Nothing changes a node record once made.
 * Returns a new reference to the record under ``key``, ``made`` when it is the first;
 * steals both. */
static PyObject *shared(PyObject *cache, PyObject *key, PyObject *made) {
    PyObject *have = key && made ? PyDict_SetDefault(cache, key, made) : NULL;
    Py_XINCREF(have);
    Py_XDECREF(key);
    Py_XDECREF(made);
    return have;
}

/* A shape as a list, shared with the equal shapes of the run (``key``: the shape as a tuple). */
static PyObject *shared_shape(PyObject *cache, PyObject *key) {
    PyObject *have = PyDict_GetItemWithError(cache, key);
    if (have || PyErr_Occurred())
        return Py_XNewRef(have);
    return shared(cache, Py_NewRef(key), untracked(PySequence_List(key)));
}

/* One saved tensor's entry: {name, kind, shape, dtype, bytes[, of]}; adds (address, bytes) to storages. */
static PyObject *tensor_entry(PyObject *label, PyObject *value, PyObject *storages, PyObject *index,
                              PyObject *cache) {
    PyObject *entry = NULL, *st = NULL, *nbytes = NULL, *ptr = NULL, *shape = NULL, *dtype = NULL;
    PyObject *dname = NULL, *data_ptr = NULL, *dims = NULL;
    st = PyObject_CallMethodNoArgs(value, s_untyped_storage);
    if (!st)
        goto done;
    nbytes = PyObject_CallMethodNoArgs(st, s_nbytes);
    ptr = nbytes ? PyObject_CallMethodNoArgs(st, s_data_ptr) : NULL;
    if (!ptr)
        goto done;
    PyObject *pair = untracked(PyTuple_Pack(2, ptr, nbytes));
    if (!pair || PyList_Append(storages, pair) < 0) {
        Py_XDECREF(pair);
        goto done;
    }
    Py_DECREF(pair);
    PyObject *size = PyObject_GetAttr(value, s_shape);
    if (!size)
        goto done;
    dims = PySequence_Tuple(size);
    Py_DECREF(size);
    shape = dims ? shared_shape(cache, dims) : NULL;
    dtype = shape ? PyObject_GetAttr(value, s_dtype) : NULL;
    if (!dtype)
        goto done;
    if (!(dname = dtype_label(dtype)))
        goto done;
    entry = PyDict_New();
    if (!entry || PyDict_SetItem(entry, s_name, label) < 0 || PyDict_SetItem(entry, s_kind, s_tensor) < 0 ||
        PyDict_SetItem(entry, s_shape, shape) < 0 || PyDict_SetItem(entry, s_dtype, dname) < 0 ||
        PyDict_SetItem(entry, s_bytes, nbytes) < 0)
        goto fail;
    /* most saved tensors are intermediates no name holds: one lookup by address settles them */
    data_ptr = PyObject_CallMethodNoArgs(value, s_data_ptr);
    if (!data_ptr)
        goto fail;
    PyObject *name = name_of_data(index, data_ptr, dims, dtype);
    if (PyErr_Occurred())
        goto fail;
    if (name && PyObject_IsTrue(name) == 1 && PyDict_SetItem(entry, s_of, name) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(entry);
done:
    Py_XDECREF(st);
    Py_XDECREF(nbytes);
    Py_XDECREF(ptr);
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(dname);
    Py_XDECREF(data_ptr);
    Py_XDECREF(dims);
    return entry;
}

/* {name, kind[, value]}: ``value`` is stolen; NULL for no value key (and no error). */
static PyObject *entry3(PyObject *label, PyObject *kind, PyObject *value) {
    if (!value && PyErr_Occurred())
        return NULL;
    PyObject *e = PyDict_New();
    if (!e || PyDict_SetItem(e, s_name, label) < 0 || PyDict_SetItem(e, s_kind, kind) < 0 ||
        (value && PyDict_SetItem(e, s_value, value) < 0)) {
        Py_XDECREF(e);
        e = NULL;
    }
    Py_XDECREF(value);
    return e;
}

/* {name, kind: "value", value}, shared by equal entries when the value is an int, a bool, a
 * string or a list of ints (floats stay apart: 0.0 and -0.0 are one key but two texts).
 * Steals ``value``. */
static PyObject *value_entry(PyObject *cache, PyObject *label, PyObject *value) {
    if (!value)
        return NULL;
    PyObject *frozen = NULL;
    if (PyLong_CheckExact(value) || PyBool_Check(value) || PyUnicode_CheckExact(value)) {
        frozen = Py_NewRef(value);
    } else if (PyList_CheckExact(value)) {
        int ints = 1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value) && ints; i++)
            ints = PyLong_CheckExact(PyList_GET_ITEM(value, i));
        if (ints && !(frozen = PyList_AsTuple(value))) {
            Py_DECREF(value);
            return NULL;
        }
    }
    if (!frozen)
        return entry3(label, s_value, value);
    PyObject *key = PyTuple_Pack(3, label, (PyObject *)Py_TYPE(value), frozen);
    Py_DECREF(frozen);
    PyObject *have = key ? PyDict_GetItemWithError(cache, key) : NULL;
    if (have || !key || PyErr_Occurred()) {
        Py_XDECREF(key);
        Py_DECREF(value);
        return Py_XNewRef(have);
    }
    return shared(cache, key, entry3(label, s_value, value));
}

/* What read_new's helpers share: its arguments, unpacked (see read_new). */
typedef struct {
    PyObject *mark_unreadable, *of_tensors, *of_modules, *index, *step, *line, *grad_graph;
    PyObject *lines_starts, *lines_values, *mod_starts, *mod_values, *tensor_slots, *storages_of,
        *accumulators, *shared;
    unsigned long long seq_base;
} Ctx;

/* A saved list holding a tensor (IndexBackward0's indices start with None for a skipped dim). */
static int holds_tensor(PyObject *seq) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyObject_TypeCheck(PySequence_Fast_GET_ITEM(seq, i), (PyTypeObject *)Tensor))
            return 1;
    return 0;
}

/* The saved values of one node into ``saved``; slots holding tensors into ``held``. 0 or -1. */
static int read_saved(Ctx *c, PyObject *node, PyObject *nid, PyObject *slots, PyObject *saved,
                      PyObject *held, PyObject *storages) {
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *slot = PyTuple_GET_ITEM(slots, i); /* _Slot(label, attr, as_tensor, as_tensors) */
        PyObject *label = PyTuple_GET_ITEM(slot, 0), *attr = PyTuple_GET_ITEM(slot, 1);
        PyObject *value = PyObject_GetAttr(node, attr);
        PyObject *entry = NULL, *kind_slot = NULL;
        if (!value) {
            if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
                return -1;
            /* Unreadable when first seen (modified in place on the line that built it, or
             * freed by a call not seen): a slot without metadata. */
            PyObject *msg = raised_message();
            if (!msg)
                return -1;
            kind_slot = PyTuple_GET_ITEM(slot, 2);
            entry = entry3(label, s_tensor, NULL);
            int bad = !entry || PyList_Append(saved, entry) < 0 || PyList_Append(held, kind_slot) < 0;
            Py_XDECREF(entry);
            PyObject *r = bad ? NULL : PyObject_CallFunctionObjArgs(c->mark_unreadable, nid, kind_slot, msg, NULL);
            Py_DECREF(msg);
            if (!r)
                return -1;
            Py_DECREF(r);
            continue;
        }
        if (value == Py_None) {
            Py_DECREF(value);
            continue; /* a slot this call did not need */
        }
        if (is_plain(value)) {
            entry = value_entry(c->shared, label, Py_NewRef(value));
        } else if (PyObject_TypeCheck(value, (PyTypeObject *)Tensor)) {
            entry = tensor_entry(label, value, storages, c->index, c->shared);
            kind_slot = PyTuple_GET_ITEM(slot, 2);
        } else if ((PyList_CheckExact(value) || PyTuple_CheckExact(value)) && holds_tensor(value)) {
            entry = PyObject_CallFunctionObjArgs(describe, label, s_tensors, value, storages, c->index, NULL);
            kind_slot = PyTuple_GET_ITEM(slot, 3);
        } else {
            entry = value_entry(c->shared, label, json_value(value));
        }
        Py_DECREF(value);
        if (!entry)
            return -1;
        int r = PyList_Append(saved, entry);
        Py_DECREF(entry);
        if (r < 0 || (kind_slot && PyList_Append(held, kind_slot) < 0))
            return -1;
    }
    return 0;
}

/* graph.node_info for one node: a new reference to its record, or NULL. */
static PyObject *node_info(Ctx *c, PyObject *node, PyObject *nid) {
    PyObject *type = (PyObject *)Py_TYPE(node);
    PyObject *op_slots = PyDict_GetItemWithError(SlotCache, type);
    if (op_slots)
        Py_INCREF(op_slots);
    else if (PyErr_Occurred() || !(op_slots = PyObject_CallOneArg(type_slots, type)))
        return NULL;
    PyObject *op = PyTuple_GET_ITEM(op_slots, 0), *slots = PyTuple_GET_ITEM(op_slots, 1);
    PyObject *info = PyDict_New(), *saved = NULL, *held = NULL, *storages = NULL;
    PyObject *seq_obj = PyObject_CallMethodNoArgs(node, s_sequence_nr);
    if (!info || !seq_obj)
        goto fail;
    unsigned long long seq = PyLong_AsUnsignedLongLong(seq_obj);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        goto fail;
    if (PyDict_SetItem(info, s_id, nid) < 0 || PyDict_SetItem(info, s_op, op) < 0 ||
        PyDict_SetItem(info, s_step, c->step) < 0)
        goto fail;
    if (seq == UNSEQUENCED) {
        PyObject *var = PyObject_GetAttr(node, s_variable);
        if (!var)
            goto fail;
        PyObject *key = PyLong_FromVoidPtr(var);
        Py_DECREF(var); /* the node keeps it alive */
        if (!key)
            goto fail;
        PyObject *entry = PyDict_GetItemWithError(c->of_tensors, key); /* (tensor, [names]) */
        PyObject *name = entry ? PyList_GET_ITEM(PyTuple_GET_ITEM(entry, 1), 0) : Py_None;
        int bad = PyErr_Occurred() || PyDict_SetItem(info, s_seq, Py_None) < 0 ||
                  PyDict_SetItem(info, s_line, c->line) < 0 || PyDict_SetItem(info, s_tensor, name) < 0 ||
                  PyDict_SetItem(c->accumulators, key, nid) < 0;
        Py_DECREF(key);
        if (bad)
            goto fail;
    } else {
        if (set_new(info, s_seq, PyLong_FromUnsignedLongLong(seq - c->seq_base)) < 0)
            goto fail;
        PyObject *line = seq_lookup(c->lines_starts, c->lines_values, seq);
        if (PyErr_Occurred())
            goto fail;
        if (!line || PyObject_IsTrue(line) != 1)
            line = c->line;
        if (PyDict_SetItem(info, s_line, line) < 0)
            goto fail;
        PyObject *module = seq_lookup(c->mod_starts, c->mod_values, seq); /* (id, class name) */
        if (PyErr_Occurred())
            goto fail;
        if (module && module != Py_None) {
            PyObject *path = PyDict_GetItemWithError(c->of_modules, PyTuple_GET_ITEM(module, 0));
            if (PyErr_Occurred())
                goto fail;
            if (!path || PyObject_IsTrue(path) != 1)
                path = PyTuple_GET_ITEM(module, 1);
            if (PyDict_SetItem(info, s_module, path) < 0)
                goto fail;
        }
    }
    if (c->grad_graph == Py_True && PyDict_SetItem(info, s_grad_graph, Py_True) < 0)
        goto fail;
    saved = PyList_New(0); /* untracked with its entries, once they are in (untrack_tree) */
    if (!saved || PyDict_SetItem(info, s_saved, saved) < 0)
        goto fail;
    if (PyTuple_GET_SIZE(slots)) {
        /* the graph's own bookkeeping: strings and ints, no cycle; the collector need not walk it */
        held = untracked(PyList_New(0));
        storages = untracked(PyList_New(0));
        if (!held || !storages || read_saved(c, node, nid, slots, saved, held, storages) < 0)
            goto fail;
        if (PyList_GET_SIZE(held) &&
            (PyDict_SetItem(c->tensor_slots, nid, held) < 0 || PyDict_SetItem(c->storages_of, nid, storages) < 0))
            goto fail;
    }
    Py_DECREF(op_slots);
    Py_DECREF(seq_obj);
    Py_DECREF(saved);
    Py_XDECREF(held);
    Py_XDECREF(storages);
    return info;
fail:
    Py_XDECREF(op_slots);
    Py_XDECREF(seq_obj);
    Py_XDECREF(info);
    Py_XDECREF(saved);
    Py_XDECREF(held);
    Py_XDECREF(storages);
    return NULL;
}

/* Takes a tree of trace data (dicts, lists, tuples of plain values) out of the cyclic garbage
 * collector's sight. A traced run keeps tens of thousands of such containers, which no cycle
 * can run through, and without this every collection of a young generation walks them again:
 * milliseconds per run that plain torch does not spend. A container is untracked only when
 * everything it holds is untracked or not a container, so no cycle through live objects can
 * hide behind it. Returns 1 when ``o`` is (now) untracked, 0 when it stays tracked, -1 on error. */
static int untrack_tree(PyObject *o, int depth) {
    if (!PyObject_IS_GC(o) || !PyObject_GC_IsTracked(o))
        return 1;
    if (depth > 32)
        return 0;
    int all = 1;
    if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++) {
            int r = untrack_tree(items[i], depth + 1);
            if (r < 0)
                return -1;
            all &= r;
        }
    } else if (PyDict_CheckExact(o)) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &key, &value)) {
            int r = untrack_tree(value, depth + 1);
            if (r < 0)
                return -1;
            all &= r && !(PyObject_IS_GC(key) && PyObject_GC_IsTracked(key));
        }
    } else {
        return 0;
    }
    if (all)
        PyObject_GC_UnTrack(o);
    return all;
}

/* untrack(tree): untrack_tree for passes.untrack, which cannot (True: now out of sight). */
static PyObject *untrack(PyObject *self, PyObject *o) {
    int r = untrack_tree(o, 0);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* read_new(nodes, nexts, ids, first_id, step, line, grad_graph, into, reading)
 *
 * Appends the records of ``nodes`` (new, in id order from ``first_id``, each already in ``ids``)
 * to the table and their children's ids to children, as passes.read_new. ``into`` and
 * ``reading`` are graph.Into and graph.Reading, read by position (lines and modules are each
 * a SeqRanges' (starts, values) lists):
 *   into = (table, children, tensor_slots, storages, accumulators, shared, mark_unreadable)
 *   reading = (seq_base, lines, modules, of_tensors, of_modules, index) */
static PyObject *read_new(PyObject *self, PyObject *args) {
    PyObject *nodes, *nexts, *ids, *step, *line, *grad_graph, *table, *children;
    Py_ssize_t first_id;
    Ctx c = {0};
    if (!PyArg_ParseTuple(args, "O!O!O!nOOO(O!O!O!O!O!O!O)(K(O!O!)(O!O!)O!O!O!)", &PyList_Type, &nodes,
                          &PyList_Type, &nexts, &PyDict_Type, &ids, &first_id, &step, &line, &grad_graph,
                          &PyList_Type, &table, &PyList_Type, &children, &PyDict_Type, &c.tensor_slots,
                          &PyDict_Type, &c.storages_of, &PyDict_Type, &c.accumulators, &PyDict_Type, &c.shared,
                          &c.mark_unreadable, &c.seq_base, &PyList_Type, &c.lines_starts, &PyList_Type,
                          &c.lines_values, &PyList_Type, &c.mod_starts, &PyList_Type, &c.mod_values,
                          &PyDict_Type, &c.of_tensors, &PyDict_Type, &c.of_modules, &PyDict_Type, &c.index))
        return NULL;
    if (!Tensor) {
        PyErr_SetString(PyExc_RuntimeError, "_nodes.setup() was not called");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(nodes);
    if (PyList_GET_SIZE(nexts) != n) {
        PyErr_SetString(PyExc_ValueError, "nodes and nexts differ in length");
        return NULL;
    }
    c.step = step;
    c.line = line;
    c.grad_graph = grad_graph;
    PyObject *result = NULL;
    if (PyList_GET_SIZE(table) != first_id || PyList_GET_SIZE(children) != first_id) {
        PyErr_SetString(PyExc_ValueError, "first_id is not the table's length");
    } else {
        Py_ssize_t i = 0;
        for (; i < n; i++) {
            PyObject *node = PyList_GET_ITEM(nodes, i), *next = PyList_GET_ITEM(nexts, i);
            PyObject *nid = PyLong_FromSsize_t(first_id + i), *kids = untracked(PyList_New(0)), *info = NULL;
            if (!nid || !kids || !PyTuple_Check(next))
                goto node_fail;
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(next); k++) { /* next_functions: (node, input_nr) */
                PyObject *child = PyTuple_GET_ITEM(PyTuple_GET_ITEM(next, k), 0);
                if (child == Py_None)
                    continue;
                PyObject *kid = PyDict_GetItemWithError(ids, child);
                if (kid ? PyList_Append(kids, kid) < 0 : PyErr_Occurred() != NULL)
                    goto node_fail;
            }
            info = node_info(&c, node, nid);
            if (!info || PyDict_SetItem(info, s_next, kids) < 0 || untrack_tree(info, 0) < 0 ||
                PyList_Append(table, info) < 0)
                goto node_fail;
            if (PyList_Append(children, kids) < 0)
                goto node_fail;
            Py_DECREF(nid);
            Py_DECREF(kids);
            Py_DECREF(info);
            continue;
        node_fail:
            Py_XDECREF(nid);
            Py_XDECREF(kids);
            Py_XDECREF(info);
            break;
        }
        if (i == n)
            result = Py_NewRef(Py_None);
    }
    return result;
}

/* states(live, freed, stale, run, failed, vars_of, plain): a step's node states, as
 * passes.states. Nodes with nothing to say share one {"id": n} dict across steps. */
static PyObject *states(PyObject *self, PyObject *args) {
    PyObject *live, *freed, *stale, *run, *failed, *vars_of, *plain;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!O!", &PyList_Type, &live, &PySet_Type, &freed, &PyDict_Type, &stale,
                          &PyDict_Type, &run, &failed, &PyDict_Type, &vars_of, &PyDict_Type, &plain))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(live);
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *nid = PyList_GET_ITEM(live, i), *state = NULL;
        int is_freed = PySet_Contains(freed, nid);
        PyObject *names = PyDict_GetItemWithError(stale, nid);
        PyObject *order = names || !PyErr_Occurred() ? PyDict_GetItemWithError(run, nid) : NULL;
        PyObject *vars = order || !PyErr_Occurred() ? PyDict_GetItemWithError(vars_of, nid) : NULL;
        if (is_freed < 0 || PyErr_Occurred())
            goto fail;
        int has_vars = vars ? PyObject_IsTrue(vars) : 0;
        if (has_vars < 0)
            goto fail;
        if (!is_freed && !names && !order && !vars) {
            state = PyDict_GetItemWithError(plain, nid);
            if (state)
                Py_INCREF(state);
            else if (PyErr_Occurred() || !(state = PyDict_New()) || PyDict_SetItem(state, s_id, nid) < 0 ||
                     PyDict_SetItem(plain, nid, state) < 0)
                goto state_fail;
        } else {
            state = PyDict_New();
            if (!state || PyDict_SetItem(state, s_id, nid) < 0 ||
                (is_freed && PyDict_SetItem(state, s_freed, Py_True) < 0))
                goto state_fail;
            if (names) {
                if (PyDict_SetItem(state, s_stale, Py_True) < 0 ||
                    set_new(state, s_stale_saved, untracked(PySequence_List(names))) < 0) /* a copy: later steps add */
                    goto state_fail;
            }
            if (order) {
                int is_failed = failed != Py_None ? PyObject_RichCompareBool(nid, failed, Py_EQ) : 0;
                if (is_failed < 0 || PyDict_SetItem(state, s_order, order) < 0 ||
                    PyDict_SetItem(state, is_failed ? s_failed : s_executed, Py_True) < 0)
                    goto state_fail;
            }
            if (has_vars && PyDict_SetItem(state, s_vars, vars) < 0)
                goto state_fail;
        }
        PyList_SET_ITEM(out, i, state);
        continue;
    state_fail:
        Py_XDECREF(state);
    fail:
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* new_edges(live, first_new, children): [[id, child], ...] of the live nodes from first_new on. */
static PyObject *new_edges(PyObject *self, PyObject *args) {
    PyObject *live, *children;
    Py_ssize_t first_new;
    if (!PyArg_ParseTuple(args, "O!nO!", &PyList_Type, &live, &first_new, &PyList_Type, &children))
        return NULL;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < PyList_GET_SIZE(live); i++) {
        PyObject *nid = PyList_GET_ITEM(live, i);
        Py_ssize_t id = PyLong_AsSsize_t(nid);
        if (id == -1 && PyErr_Occurred())
            goto fail;
        if (id < first_new)
            continue;
        if (id >= PyList_GET_SIZE(children) || !PyList_Check(PyList_GET_ITEM(children, id))) {
            PyErr_SetString(PyExc_IndexError, "a live node without children");
            goto fail;
        }
        PyObject *kids = PyList_GET_ITEM(children, id);
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(kids); k++) {
            PyObject *edge = untracked(PyList_New(2));
            if (!edge)
                goto fail;
            PyList_SET_ITEM(edge, 0, Py_NewRef(nid));
            PyList_SET_ITEM(edge, 1, Py_NewRef(PyList_GET_ITEM(kids, k)));
            int r = PyList_Append(out, edge);
            Py_DECREF(edge);
            if (r < 0)
                goto fail;
        }
    }
    return out;
fail:
    Py_XDECREF(out);
    return NULL;
}

/* reachable(root_ids, children): the set of ids the roots reach through children. */
static PyObject *reachable(PyObject *self, PyObject *args) {
    PyObject *roots, *children;
    if (!PyArg_ParseTuple(args, "OO!", &roots, &PyList_Type, &children))
        return NULL;
    PyObject *seen = PySet_New(NULL), *stack = PySequence_List(roots);
    if (!seen || !stack)
        goto fail;
    while (PyList_GET_SIZE(stack)) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *nid = Py_NewRef(PyList_GET_ITEM(stack, top));
        if (PyList_SetSlice(stack, top, top + 1, NULL) < 0) {
            Py_DECREF(nid);
            goto fail;
        }
        int known = PySet_Contains(seen, nid);
        Py_ssize_t id = known == 0 ? PyLong_AsSsize_t(nid) : 0;
        if (known < 0 || (id == -1 && PyErr_Occurred()) || (!known && PySet_Add(seen, nid) < 0)) {
            Py_DECREF(nid);
            goto fail;
        }
        Py_DECREF(nid);
        if (known)
            continue;
        if (id < 0 || id >= PyList_GET_SIZE(children) || !PyList_Check(PyList_GET_ITEM(children, id))) {
            PyErr_SetString(PyExc_IndexError, "a node without children");
            goto fail;
        }
        PyObject *kids = PyList_GET_ITEM(children, id);
        if (PyList_SetSlice(stack, PyList_GET_SIZE(stack), PyList_GET_SIZE(stack), kids) < 0)
            goto fail;
    }
    Py_DECREF(stack);
    return seen;
fail:
    Py_XDECREF(seen);
    Py_XDECREF(stack);
    return NULL;
}

/* saved_bytes(storages, freed): bytes of the saved tensors of nodes not freed, each storage once. */
static PyObject *saved_bytes(PyObject *self, PyObject *args) {
    PyObject *storages, *freed;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &storages, &PySet_Type, &freed))
        return NULL;
    PyObject *seen = PyDict_New(), *nid, *entries, *total = NULL;
    Py_ssize_t pos = 0;
    if (!seen)
        return NULL;
    while (PyDict_Next(storages, &pos, &nid, &entries)) {
        int is_freed = PySet_Contains(freed, nid);
        if (is_freed < 0 || !PyList_Check(entries)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "storages: a list per node");
            goto done;
        }
        if (is_freed)
            continue;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(entries); k++) {
            PyObject *pair = PyList_GET_ITEM(entries, k); /* (address, bytes) */
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "storages: (address, bytes) pairs");
                goto done;
            }
            if (PyDict_SetItem(seen, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0)
                goto done;
        }
    }
    total = PyLong_FromLong(0);
    PyObject *value;
    pos = 0;
    while (total && PyDict_Next(seen, &pos, &nid, &value)) {
        PyObject *sum = PyNumber_Add(total, value);
        Py_DECREF(total);
        total = sum;
    }
done:
    Py_DECREF(seen);
    return total;
}

/* Reads saved ``slot`` (a _Saved) of node ``nid``. Reading raises a RuntimeError once the
 * node was freed or the saved tensor modified in place: ``mark_unreadable`` (Graph's) sorts
 * which, except for a freed one when ``keep_freed`` is 0 and ``freed_mark`` is in the message.
 * 0, or -1 with an error set (any other error). */
static int read_or_mark(PyObject *mark_unreadable, PyObject *node, PyObject *nid, PyObject *slot, int keep_freed,
                        PyObject *freed_mark) {
    PyObject *value = PyObject_GetAttr(node, PyTuple_GET_ITEM(slot, 1));
    if (value) {
        Py_DECREF(value);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
        return -1;
    PyObject *msg = raised_message();
    if (!msg)
        return -1;
    /* PyUnicode_Find: the position, -1 when absent, -2 on error */
    Py_ssize_t at = keep_freed ? -1 : PyUnicode_Find(msg, freed_mark, 0, PY_SSIZE_T_MAX, 1);
    PyObject *r = at == -1 ? PyObject_CallFunctionObjArgs(mark_unreadable, nid, slot, msg, NULL) : NULL;
    Py_DECREF(msg);
    if (at >= 0) /* freed, and the caller asked to leave freed ones alone */
        return 0;
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The live node object of id ``nid`` (borrowed), or NULL with an error set. */
static PyObject *node_of(PyObject *objs, PyObject *nid) {
    PyObject *node = PyDict_GetItemWithError(objs, nid);
    if (!node && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, nid);
    return node;
}

/* check_stale(tensor_slots, freed, objs, stale, mark_unreadable, mark_freed, freed_mark, below):
 * passes.check_stale, over the nodes with ids below ``below``. Reading a saved tensor raises once
 * it was modified in place (or freed); ``mark_unreadable`` sorts which. */
static PyObject *check_stale(PyObject *self, PyObject *args) {
    PyObject *slots_of, *freed, *objs, *stale, *mark_unreadable, *freed_mark;
    int mark_freed;
    Py_ssize_t below;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OpUn", &PyDict_Type, &slots_of, &PySet_Type, &freed, &PyDict_Type,
                          &objs, &PyDict_Type, &stale, &mark_unreadable, &mark_freed, &freed_mark, &below))
        return NULL;
    PyObject *result = NULL, *nid, *slots;
    /* Nothing called from here changes tensor_slots (mark_unreadable writes freed and stale);
     * its size is checked anyway, so a change could only stop tracing, never misread memory. */
    Py_ssize_t pos = 0, size = PyDict_GET_SIZE(slots_of);
    while (PyDict_Next(slots_of, &pos, &nid, &slots)) {
        if (PyDict_GET_SIZE(slots_of) != size) {
            PyErr_SetString(PyExc_RuntimeError, "the graph's saved slots changed while checked");
            goto done;
        }
        Py_ssize_t id = PyLong_AsSsize_t(nid);
        if (id == -1 && PyErr_Occurred())
            goto done;
        if (id >= below)
            continue;
        int is_freed = PySet_Contains(freed, nid);
        if (is_freed < 0)
            goto done;
        if (is_freed)
            continue;
        PyObject *node = node_of(objs, nid);
        if (!node)
            goto done;
        Py_INCREF(node);
        Py_INCREF(nid);
        Py_INCREF(slots);
        PyObject *done_names = PyDict_GetItemWithError(stale, nid); /* the same list as it grows */
        Py_XINCREF(done_names);
        int bad = PyErr_Occurred() != NULL || !PyList_Check(slots);
        for (Py_ssize_t k = 0; !bad && k < PyList_GET_SIZE(slots); k++) {
            PyObject *slot = PyList_GET_ITEM(slots, k); /* _Saved(label, attr, raw, kind) */
            PyObject *label = PyTuple_GET_ITEM(slot, 0);
            int skip = done_names ? PySequence_Contains(done_names, label) : 0;
            if (skip) {
                bad = skip < 0;
                continue;
            }
            bad = read_or_mark(mark_unreadable, node, nid, slot, mark_freed, freed_mark) < 0;
        }
        Py_DECREF(node);
        Py_DECREF(nid);
        Py_DECREF(slots);
        Py_XDECREF(done_names);
        if (bad)
            goto done;
    }
    if (PyDict_GET_SIZE(slots_of) != size) {
        PyErr_SetString(PyExc_RuntimeError, "the graph's saved slots changed while checked");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    return result;
}

/* tensor_records(shown, facts, grads, leaf_ids, ids, last, now): the tensors of a step, as
 * passes.tensor_records, from what roots() read of each tensor. A tensor whose name, node,
 * grad, flags and shape are as at the last step keeps its record; ``now`` maps id(tensor) ->
 * (weakref, key, record). */
static PyObject *tensor_records(PyObject *self, PyObject *args) {
    PyObject *shown, *facts, *grads, *leaf_ids, *ids, *last, *now;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!", &PyList_Type, &shown, &PyList_Type, &facts, &PyList_Type,
                          &grads, &PyList_Type, &leaf_ids, &PyDict_Type, &ids, &PyDict_Type, &last, &PyDict_Type,
                          &now))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(shown);
    if (PyList_GET_SIZE(facts) != n || PyList_GET_SIZE(grads) != n || PyList_GET_SIZE(leaf_ids) != n) {
        PyErr_SetString(PyExc_ValueError, "shown, facts, grads and leaf_ids differ in length");
        return NULL;
    }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(shown, i), *grad = PyList_GET_ITEM(grads, i);
        PyObject *fact = PyList_GET_ITEM(facts, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyList_Check(PyTuple_GET_ITEM(pair, 1)) ||
            !PyList_GET_SIZE(PyTuple_GET_ITEM(pair, 1)) || !PyTuple_Check(fact) || PyTuple_GET_SIZE(fact) != 7) {
            PyErr_SetString(PyExc_TypeError, "shown: (tensor, [names]) pairs; facts: 7-tuples");
            Py_CLEAR(out);
            break;
        }
        PyObject *t = PyTuple_GET_ITEM(pair, 0), *name = PyList_GET_ITEM(PyTuple_GET_ITEM(pair, 1), 0);
        /* (grad_fn, grad, requires_grad, is_leaf, retains_grad, dtype, shape), borrowed */
        PyObject *fn = PyTuple_GET_ITEM(fact, 0), *rg = PyTuple_GET_ITEM(fact, 2);
        PyObject *leaf = PyTuple_GET_ITEM(fact, 3), *retains = PyTuple_GET_ITEM(fact, 4);
        PyObject *dtype = PyTuple_GET_ITEM(fact, 5), *shape = PyTuple_GET_ITEM(fact, 6);
        PyObject *key = NULL, *tid = NULL, *rec = NULL, *ref = NULL, *entry = NULL;
        PyObject *node = NULL; /* borrowed */
        int ok = 0;
        if (fn == Py_None) {
            node = PyList_GET_ITEM(leaf_ids, i);
        } else {
            node = PyDict_GetItemWithError(ids, fn);
            if (!node && PyErr_Occurred())
                goto next;
            node = node ? node : Py_None;
        }
        if (!(key = PyTuple_Pack(6, name, node, rg, leaf, retains, dtype)) || !(tid = PyLong_FromVoidPtr(t)))
            goto next;
        PyObject *prev = PyDict_GetItemWithError(last, tid); /* (weakref, key, record) */
        if (!prev && PyErr_Occurred())
            goto next;
        int alive = prev && PyTuple_Check(prev) && PyTuple_GET_SIZE(prev) == 3 &&
                    refers_to(PyTuple_GET_ITEM(prev, 0), t);
        if (alive) {
            int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(prev, 1), key, Py_EQ);
            if (same < 0)
                goto next;
            if (same) { /* a grad record is the same object while the gradient is unchanged */
                PyObject *old_grad = PyDict_GetItemWithError(PyTuple_GET_ITEM(prev, 2), s_grad);
                same = old_grad == grad;
            }
            if (same) {
                PyObject *old_shape = PyDict_GetItemWithError(PyTuple_GET_ITEM(prev, 2), s_shape);
                if (!old_shape && PyErr_Occurred())
                    goto next;
                same = old_shape ? PyObject_RichCompareBool(old_shape, shape, Py_EQ) : 0;
                if (same < 0)
                    goto next;
                if (same)
                    rec = Py_NewRef(PyTuple_GET_ITEM(prev, 2));
            }
            ref = Py_NewRef(PyTuple_GET_ITEM(prev, 0));
        } else if (!(ref = PyWeakref_NewRef(t, NULL))) {
            goto next;
        }
        if (!rec) {
            PyObject *dname = dtype_label(dtype);
            if (!dname)
                goto next;
            rec = PyDict_New();
            int bad = !rec || PyDict_SetItem(rec, s_name, name) < 0 || PyDict_SetItem(rec, s_shape, shape) < 0 ||
                      PyDict_SetItem(rec, s_dtype, dname) < 0 || PyDict_SetItem(rec, s_requires_grad, rg) < 0 ||
                      PyDict_SetItem(rec, s_is_leaf, leaf) < 0 || PyDict_SetItem(rec, s_node, node) < 0 ||
                      PyDict_SetItem(rec, s_grad, grad) < 0;
            Py_DECREF(dname);
            int retains_true = bad ? -1 : PyObject_IsTrue(retains);
            if (bad || retains_true < 0 || (retains_true && PyDict_SetItem(rec, s_retains_grad, Py_True) < 0))
                goto next;
        }
        if (!(entry = PyTuple_Pack(3, ref, key, rec)) || PyDict_SetItem(now, tid, entry) < 0 ||
            PyList_Append(out, rec) < 0)
            goto next;
        ok = 1;
    next:
        Py_XDECREF(key);
        Py_XDECREF(tid);
        Py_XDECREF(rec);
        Py_XDECREF(ref);
        Py_XDECREF(entry);
        if (!ok)
            Py_CLEAR(out);
    }
    return out;
}

/* roots(entries, extra_roots): passes.roots in C, one pass over the named tensors
 * (``entries`` are Names.tensors' values, (tensor, [names])). Returns (graph roots, the entries
 * a step lists, each entry's grad_fn, and per listed entry (grad_fn, grad, requires_grad, is_leaf,
 * retains_grad, dtype, shape)). */
static PyObject *roots(PyObject *self, PyObject *args) {
    PyObject *entries, *extra;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &entries, &extra))
        return NULL;
    PyObject *found = PySequence_List(extra), *shown = PyList_New(0), *fns = PyList_New(0);
    PyObject *facts = PyList_New(0), *key, *entry, *out = NULL;
    Py_ssize_t pos = 0;
    if (!found || !shown || !fns || !facts)
        goto done;
    while (PyDict_Next(entries, &pos, &key, &entry)) {
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "entries: (tensor, [names]) pairs");
            goto done;
        }
        PyObject *t = PyTuple_GET_ITEM(entry, 0), *fn = NULL, *grad = NULL, *gfn = NULL, *retains = NULL;
        PyObject *rg = NULL, *leaf = NULL, *dtype = NULL, *size = NULL, *shape = NULL, *fact = NULL;
        int ok = 0, is_retaining = 0, show = 0;
        if (!(fn = PyObject_GetAttr(t, s_grad_fn)) || PyList_Append(fns, fn) < 0)
            goto next;
        if (fn != Py_None && PyList_Append(found, fn) < 0)
            goto next;
        if (!(retains = PyObject_GetAttr(t, s_retains_grad)) || (is_retaining = PyObject_IsTrue(retains)) < 0)
            goto next;
        /* .grad of a non-leaf that does not retain it is always None, and reading it warns */
        grad = fn == Py_None || is_retaining ? PyObject_GetAttr(t, s_grad) : Py_NewRef(Py_None);
        if (!grad)
            goto next;
        if (grad != Py_None) {
            if (!(gfn = PyObject_GetAttr(grad, s_grad_fn)) || (gfn != Py_None && PyList_Append(found, gfn) < 0))
                goto next;
        }
        if (is_retaining || grad != Py_None) {
            show = 1;
        } else if (fn == Py_None) {
            if (!(rg = PyObject_GetAttr(t, s_requires_grad)) || (show = PyObject_IsTrue(rg)) < 0)
                goto next;
        }
        if (show) {
            if ((!rg && !(rg = PyObject_GetAttr(t, s_requires_grad))) || !(leaf = PyObject_GetAttr(t, s_is_leaf)) ||
                !(dtype = PyObject_GetAttr(t, s_dtype)) || !(size = PyObject_GetAttr(t, s_shape)) ||
                !(shape = untracked(PySequence_List(size))))
                goto next;
            if (!(fact = PyTuple_Pack(7, fn, grad, rg, leaf, retains, dtype, shape)) ||
                PyList_Append(shown, entry) < 0 || PyList_Append(facts, fact) < 0)
                goto next;
        }
        ok = 1;
    next:
        Py_XDECREF(fn);
        Py_XDECREF(grad);
        Py_XDECREF(gfn);
        Py_XDECREF(retains);
        Py_XDECREF(rg);
        Py_XDECREF(leaf);
        Py_XDECREF(dtype);
        Py_XDECREF(size);
        Py_XDECREF(shape);
        Py_XDECREF(fact);
        if (!ok)
            goto done;
    }
    out = PyTuple_Pack(4, found, shown, fns, facts);
done:
    Py_XDECREF(found);
    Py_XDECREF(shown);
    Py_XDECREF(fns);
    Py_XDECREF(facts);
    return out;
}

/* vars_of[nid] += names, as dict.setdefault(nid, []).extend(names). */
static int add_vars(PyObject *vars_of, PyObject *nid, PyObject *names) {
    PyObject *list = PyDict_GetItemWithError(vars_of, nid);
    if (!list) {
        if (PyErr_Occurred() || !(list = PyList_New(0)))
            return -1;
        int r = PyDict_SetItem(vars_of, nid, list);
        Py_DECREF(list);
        if (r < 0)
            return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    return PyList_SetSlice(list, n, n, names);
}

/* step_names(entries, fns, shown, facts, ids, table, accumulators, objs): passes.step_names, the
 * snapshot's per-tensor pass, from what roots() read. Returns (vars_of: node id -> variable names, leaf_ids: each shown tensor's
 * AccumulateGrad id or None, grads: each shown tensor's .grad where it can have one, else None). */
static PyObject *step_names(PyObject *self, PyObject *args) {
    PyObject *entries, *fns, *shown, *facts, *ids, *table, *accs, *objs;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!", &PyDict_Type, &entries, &PyList_Type, &fns, &PyList_Type,
                          &shown, &PyList_Type, &facts, &PyDict_Type, &ids, &PyList_Type, &table, &PyDict_Type,
                          &accs, &PyDict_Type, &objs))
        return NULL;
    if (PyList_GET_SIZE(fns) != PyDict_GET_SIZE(entries) || PyList_GET_SIZE(facts) != PyList_GET_SIZE(shown)) {
        PyErr_SetString(PyExc_ValueError, "fns/entries or facts/shown differ in length");
        return NULL;
    }
    PyObject *vars_of = PyDict_New(), *leaf_ids = PyList_New(0), *grads = PyList_New(0), *out = NULL;
    PyObject *key, *entry;
    Py_ssize_t pos = 0, i = 0;
    if (!vars_of || !leaf_ids || !grads)
        goto done;
    while (PyDict_Next(entries, &pos, &key, &entry)) { /* nodes the snippet's variables are the grad_fn of */
        PyObject *fn = PyList_GET_ITEM(fns, i++);
        PyObject *nid = fn != Py_None ? PyDict_GetItemWithError(ids, fn) : NULL;
        if (PyErr_Occurred() || (nid && add_vars(vars_of, nid, PyTuple_GET_ITEM(entry, 1)) < 0))
            goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(shown); k++) {
        PyObject *item = PyList_GET_ITEM(shown, k);
        PyObject *t = PyTuple_GET_ITEM(item, 0), *names = PyTuple_GET_ITEM(item, 1), *leaf_id = Py_None;
        PyObject *tid = PyLong_FromVoidPtr(t);
        if (!tid)
            goto done;
        PyObject *nid = PyDict_GetItemWithError(accs, tid); /* graph.accumulator_id */
        Py_DECREF(tid);
        if (!nid && PyErr_Occurred())
            goto done;
        PyObject *node = nid ? PyDict_GetItemWithError(objs, nid) : NULL;
        if (!node && PyErr_Occurred())
            goto done;
        if (node) {
            PyObject *var = PyObject_GetAttr(node, s_variable);
            if (!var)
                goto done;
            if (var == t)
                leaf_id = nid;
            Py_DECREF(var);
        }
        if (PyList_Append(leaf_ids, leaf_id) < 0)
            goto done;
        if (leaf_id != Py_None) {
            /* a leaf's AccumulateGrad already carries the leaf's name (`tensor`): repeat it per
             * step only when it differs (the leaf was renamed or has aliases) */
            Py_ssize_t id = PyLong_AsSsize_t(leaf_id);
            if (id == -1 && PyErr_Occurred())
                goto done;
            PyObject *info = id >= 0 && id < PyList_GET_SIZE(table) ? PyList_GET_ITEM(table, id) : NULL;
            PyObject *own = info && PyDict_Check(info) ? PyDict_GetItemWithError(info, s_tensor) : NULL;
            if (PyErr_Occurred())
                goto done;
            int same = 0;
            if (own && PyList_GET_SIZE(names) == 1 &&
                (same = PyObject_RichCompareBool(PyList_GET_ITEM(names, 0), own, Py_EQ)) < 0)
                goto done;
            if (!same && add_vars(vars_of, leaf_id, names) < 0)
                goto done;
        }
        /* a leaf (no grad_fn) or a retaining non-leaf: the .grad roots() read, else None */
        PyObject *fact = PyList_GET_ITEM(facts, k);
        if (!PyTuple_Check(fact) || PyTuple_GET_SIZE(fact) != 7) {
            PyErr_SetString(PyExc_TypeError, "facts: 7-tuples");
            goto done;
        }
        if (PyList_Append(grads, PyTuple_GET_ITEM(fact, 1)) < 0)
            goto done;
    }
    out = PyTuple_Pack(3, vars_of, leaf_ids, grads);
done:
    Py_XDECREF(vars_of);
    Py_XDECREF(leaf_ids);
    Py_XDECREF(grads);
    return out;
}

typedef struct {
    unsigned long long seq;
    Py_ssize_t first_sight;
} Found;

static int by_creation(const void *a, const void *b) {
    const Found *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->first_sight < y->first_sight ? -1 : x->first_sight > y->first_sight;
}

/* walk(roots, ids): the nodes reachable from ``roots`` that ``ids`` does not know, in creation
 * order (sequence number; AccumulateGrad, which has none, by first sight), with each one's
 * next_functions: passes.walk in C. Returns (nodes, nexts). */
static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *roots_in, *ids;
    if (!PyArg_ParseTuple(args, "OO!", &roots_in, &PyDict_Type, &ids))
        return NULL;
    PyObject *stack = PyList_New(0), *new = PyDict_New(), *seen = PyList_New(0), *out = NULL;
    PyObject *roots_list = PySequence_List(roots_in);
    Found *found = NULL;
    if (!stack || !new || !seen || !roots_list)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(roots_list); i++) {
        PyObject *r = PyList_GET_ITEM(roots_list, i);
        int known = r == Py_None ? 1 : PyDict_Contains(ids, r);
        if (known < 0 || (!known && PyList_Append(stack, r) < 0))
            goto done;
    }
    while (PyList_GET_SIZE(stack)) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *node = Py_NewRef(PyList_GET_ITEM(stack, top));
        int bad = PyList_SetSlice(stack, top, top + 1, NULL) < 0;
        int known = bad ? -1 : PyDict_Contains(new, node);
        PyObject *nexts = known == 0 ? PyObject_GetAttr(node, s_next_functions) : NULL;
        if (known == 0 && (!nexts || !PyTuple_Check(nexts) || PyDict_SetItem(new, node, nexts) < 0 ||
                           PyList_Append(seen, node) < 0))
            known = -1;
        for (Py_ssize_t k = 0; known == 0 && k < PyTuple_GET_SIZE(nexts); k++) {
            PyObject *edge = PyTuple_GET_ITEM(nexts, k);
            PyObject *child = PyTuple_Check(edge) && PyTuple_GET_SIZE(edge) ? PyTuple_GET_ITEM(edge, 0) : Py_None;
            if (child == Py_None)
                continue;
            int skip = PyDict_Contains(ids, child);
            if (!skip)
                skip = PyDict_Contains(new, child);
            if (skip < 0 || (!skip && PyList_Append(stack, child) < 0))
                known = -1;
        }
        Py_DECREF(node);
        Py_XDECREF(nexts);
        if (known < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "next_functions: a tuple of (node, input_nr)");
            goto done;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(seen);
    found = PyMem_Malloc(sizeof(Found) * (n ? n : 1));
    if (!found) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *seq = PyObject_CallMethodNoArgs(PyList_GET_ITEM(seen, i), s_sequence_nr);
        if (!seq)
            goto done;
        found[i].seq = PyLong_AsUnsignedLongLong(seq);
        found[i].first_sight = i;
        Py_DECREF(seq);
        if (PyErr_Occurred())
            goto done;
    }
    qsort(found, n, sizeof(Found), by_creation);
    PyObject *nodes = PyList_New(n), *nexts_out = PyList_New(n);
    if (!nodes || !nexts_out) {
        Py_XDECREF(nodes);
        Py_XDECREF(nexts_out);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *node = PyList_GET_ITEM(seen, found[i].first_sight);
        PyList_SET_ITEM(nodes, i, Py_NewRef(node));
        PyList_SET_ITEM(nexts_out, i, Py_NewRef(PyDict_GetItem(new, node)));
    }
    out = PyTuple_Pack(2, nodes, nexts_out);
    Py_DECREF(nodes);
    Py_DECREF(nexts_out);
done:
    PyMem_Free(found);
    Py_XDECREF(stack);
    Py_XDECREF(new);
    Py_XDECREF(seen);
    Py_XDECREF(roots_list);
    return out;
}

/* ids_of(nodes, ids): the ids of the known nodes among ``nodes``, in order (unknown ones left out). */
static PyObject *ids_of(PyObject *self, PyObject *args) {
    PyObject *nodes, *ids;
    if (!PyArg_ParseTuple(args, "OO!", &nodes, &PyDict_Type, &ids))
        return NULL;
    PyObject *seq = PySequence_Fast(nodes, "nodes: a sequence"), *out = PyList_New(0);
    for (Py_ssize_t i = 0; seq && out && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *nid = PyDict_GetItemWithError(ids, PySequence_Fast_GET_ITEM(seq, i));
        if ((!nid && PyErr_Occurred()) || (nid && PyList_Append(out, nid) < 0))
            Py_CLEAR(out);
    }
    Py_XDECREF(seq);
    if (!seq)
        Py_CLEAR(out);
    return out;
}

/* check_freed(nids, tensor_slots, freed, objs, mark_unreadable): passes.check_freed. After a
 * backward that did not retain its graph: did it release these nodes' saved tensors? A
 * SavedTensor handle's data is None once freed; list and custom-Function saves read through a
 * stale handle, so those are re-read. */
static PyObject *check_freed(PyObject *self, PyObject *args) {
    PyObject *nids, *slots_of, *freed, *objs, *mark_unreadable, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O", &PyList_Type, &nids, &PyDict_Type, &slots_of, &PySet_Type, &freed,
                          &PyDict_Type, &objs, &mark_unreadable))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nids); i++) {
        PyObject *nid = PyList_GET_ITEM(nids, i);
        PyObject *slots = PyDict_GetItemWithError(slots_of, nid);
        if (!slots && PyErr_Occurred())
            goto done;
        if (!slots || !PyList_Check(slots) || !PyList_GET_SIZE(slots))
            continue;
        int is_freed = PySet_Contains(freed, nid);
        if (is_freed < 0)
            goto done;
        if (is_freed)
            continue;
        PyObject *node = node_of(objs, nid);
        if (!node)
            goto done;
        /* a release frees every slot of the node at once: the first tells */
        PyObject *slot = PyList_GET_ITEM(slots, 0); /* _Saved(label, attr, raw, kind) */
        PyObject *raw = PyTuple_GET_ITEM(slot, 2), *kind = PyTuple_GET_ITEM(slot, 3);
        int plain_tensor = raw != Py_None ? PyUnicode_CompareWithASCIIString(kind, "tensor") == 0 : 0;
        if (plain_tensor) {
            PyObject *handle = PyObject_GetAttr(node, raw), *data = NULL;
            if (!handle || !(data = PyObject_GetAttr(handle, s_data))) {
                Py_XDECREF(handle);
                goto done;
            }
            int gone = data == Py_None;
            Py_DECREF(handle);
            Py_DECREF(data);
            if (gone && PySet_Add(freed, nid) < 0)
                goto done;
            continue;
        }
        if (read_or_mark(mark_unreadable, node, nid, slot, 1, NULL) < 0)
            goto done; /* list and custom-Function saves read through a stale handle: re-read */
    }
    result = Py_NewRef(Py_None);
done:
    return result;
}

/* data_index(entries): passes.data_index in C (Names.data_index keeps what it returns). Data address -> {(shape, dtype): first name} of
 * the named tensors (``entries`` are Names.tensors' values, (tensor, [names])). */
static PyObject *data_index(PyObject *self, PyObject *args) {
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &entries))
        return NULL;
    PyObject *index = PyDict_New(), *key, *entry;
    Py_ssize_t pos = 0;
    while (index && PyDict_Next(entries, &pos, &key, &entry)) {
        PyObject *t = PyTuple_GET_ITEM(entry, 0), *name = PyList_GET_ITEM(PyTuple_GET_ITEM(entry, 1), 0);
        PyObject *ptr = PyObject_CallMethodNoArgs(t, s_data_ptr), *size = PyObject_GetAttr(t, s_shape);
        PyObject *dtype = PyObject_GetAttr(t, s_dtype), *shape = size ? PySequence_Tuple(size) : NULL;
        PyObject *by_kind = NULL, *kind = shape && dtype ? PyTuple_Pack(2, shape, dtype) : NULL;
        int ok = kind && ptr;
        if (ok) {
            by_kind = PyDict_GetItemWithError(index, ptr);
            if (by_kind)
                Py_INCREF(by_kind);
            else if (PyErr_Occurred() || !(by_kind = PyDict_New()) || PyDict_SetItem(index, ptr, by_kind) < 0)
                ok = 0;
        }
        if (ok) {
            PyObject *had = PyDict_SetDefault(by_kind, kind, name); /* the first name stays */
            ok = had != NULL;
        }
        Py_XDECREF(ptr);
        Py_XDECREF(size);
        Py_XDECREF(dtype);
        Py_XDECREF(shape);
        Py_XDECREF(kind);
        Py_XDECREF(by_kind);
        if (!ok)
            Py_CLEAR(index);
    }
    return index;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(Tensor, slot_cache, type_slots, jsonable, describe, dtype_names, dtype_name)"},
    {"read_new", read_new, METH_VARARGS, "Append new nodes' records to the table (passes.read_new in C)."},
    {"untrack", untrack, METH_O, "Take a tree of plain trace data out of the garbage collector's sight."},
    {"states", states, METH_VARARGS, "A step's node states (passes.states in C)."},
    {"new_edges", new_edges, METH_VARARGS, "Edges of the live nodes from first_new on (passes.new_edges in C)."},
    {"reachable", reachable, METH_VARARGS, "Ids the roots reach (passes.reachable in C)."},
    {"check_stale", check_stale, METH_VARARGS, "Mark saved tensors modified in place (passes.check_stale in C)."},
    {"ids_of", ids_of, METH_VARARGS, "Ids of the known nodes among the given ones, in order (passes.ids_of in C)."},
    {"check_freed", check_freed, METH_VARARGS, "Mark nodes whose saved tensors a backward released (passes.check_freed in C)."},
    {"data_index", data_index, METH_VARARGS, "Data address -> {(shape, dtype): name} of named tensors (passes.data_index in C)."},
    {"walk", walk, METH_VARARGS, "New nodes reachable from the roots, in creation order, with their edges (passes.walk in C)."},
    {"roots", roots, METH_VARARGS, "Graph roots and the tensors a step lists (passes.roots in C)."},
    {"step_names", step_names, METH_VARARGS, "Variables per node, leaf ids and grads of a step's tensors (passes.step_names in C)."},
    {"tensor_records", tensor_records, METH_VARARGS, "A step's tensor records (passes.tensor_records in C)."},
    {"saved_bytes", saved_bytes, METH_VARARGS, "Bytes held by live saved tensors (passes.saved_bytes in C)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_nodes", .m_doc = "Autograd node records, in C.", .m_size = -1, .m_methods = methods,
};

/* The records' keys, once, each with the schema models (gradstep/schema.py) it is a field of, each
 * model's in the schema's order: the module's FIELDS ({model: (field, ...)}) lists them, and
 * tests/tracer/test_tracer_seam.py checks this table (names, models, order) against the schema and
 * the built module against this table (`make native` runs those checks). */
static const struct {
    PyObject **slot;
    const char *text, *models;
} fields[] = {
    /* NodeInfo, in the schema's order */
    {&s_id, "id", "NodeInfo NodeState"}, {&s_op, "op", "NodeInfo"}, {&s_seq, "seq", "NodeInfo"},
    {&s_line, "line", "NodeInfo"}, {&s_module, "module", "NodeInfo"}, {&s_next, "next", "NodeInfo"},
    {&s_saved, "saved", "NodeInfo"}, {&s_tensor, "tensor", "NodeInfo"}, {&s_grad_graph, "grad_graph", "NodeInfo"},
    {&s_step, "step", "NodeInfo"},
    /* NodeState */
    {&s_freed, "freed", "NodeState"}, {&s_stale, "stale", "NodeState"}, {&s_stale_saved, "stale_saved", "NodeState"},
    {&s_executed, "executed", "NodeState"}, {&s_failed, "failed", "NodeState"}, {&s_order, "order", "NodeState"},
    {&s_vars, "vars", "NodeState"},
    /* SavedValue */
    {&s_name, "name", "SavedValue TensorState"}, {&s_kind, "kind", "SavedValue"},
    {&s_shape, "shape", "SavedValue TensorState"}, {&s_dtype, "dtype", "SavedValue TensorState"},
    {&s_bytes, "bytes", "SavedValue"}, {&s_value, "value", "SavedValue"}, {&s_of, "of", "SavedValue"},
    /* TensorState */
    {&s_requires_grad, "requires_grad", "TensorState"}, {&s_is_leaf, "is_leaf", "TensorState"},
    {&s_retains_grad, "retains_grad", "TensorState"}, {&s_node, "node", "TensorState"}, {&s_grad, "grad", "TensorState"},
};

/* {model: [field, ...]} from ``fields``, in its order: a new reference, or NULL. */
static PyObject *fields_by_model(void) {
    PyObject *out = PyDict_New();
    for (size_t i = 0; out && i < sizeof(fields) / sizeof(fields[0]); i++) {
        PyObject *text = PyUnicode_FromString(fields[i].models);
        PyObject *models = text ? PyUnicode_Split(text, NULL, -1) : NULL;
        int ok = models != NULL;
        for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(models); k++) {
            PyObject *model = PyList_GET_ITEM(models, k), *names = PyDict_GetItemWithError(out, model);
            if (!names && (PyErr_Occurred() || set_new(out, model, PyList_New(0)) < 0 ||
                           !(names = PyDict_GetItemWithError(out, model))))
                ok = 0;
            else if (PyList_Append(names, *fields[i].slot) < 0)
                ok = 0;
        }
        Py_XDECREF(text);
        Py_XDECREF(models);
        if (!ok)
            Py_CLEAR(out);
    }
    return out;
}

PyMODINIT_FUNC PyInit__nodes(void) {
    static const struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_tensors, "tensors"}, /* a saved value's kind; "tensor" and "value" are fields too */
        {&s_sequence_nr, "_sequence_nr"}, {&s_variable, "variable"}, {&s_untyped_storage, "untyped_storage"},
        {&s_nbytes, "nbytes"}, {&s_data_ptr, "data_ptr"}, {&s_grad_fn, "grad_fn"},
        {&s_next_functions, "next_functions"}, {&s_data, "data"},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (!(*fields[i].slot = PyUnicode_InternFromString(fields[i].text)))
            return NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text)))
            return NULL;
    PyObject *m = PyModule_Create(&module), *by_model = m ? fields_by_model() : NULL;
    if (!by_model || PyModule_AddObject(m, "FIELDS", by_model) < 0) {
        Py_XDECREF(by_model);
        Py_XDECREF(m);
        return NULL;
    }
    return m;
}
