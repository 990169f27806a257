/* The compiled replay core, module.c: the CPython glue: definitions from Python, findings to Python, the Core type and the module (with the tables it exports).
 *
 * Part of a unity build: _core.c includes this after records.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ definitions from Python */

static int py_i128(PyObject *o, i128 *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (!overflow) { *v = x; return 0; }
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *v = (i128)u;
    return 0;
}

static PyObject *Core_define_stream(Core *c, PyObject *args) {
    PyObject *sidx_o, *dev_o;
    if (!PyArg_ParseTuple(args, "OO", &sidx_o, &dev_o)) return NULL;
    i128 sidx, dev;
    if (py_i128(sidx_o, &sidx) || py_i128(dev_o, &dev)) return NULL;
    if (sidx < 0 || sidx >= (i128)c->L.max_id) Py_RETURN_NONE;
    uint64_t di;
    if (!map_get(&c->sdef, (uint64_t)sidx, &di)) {
        if (c->nsdef == c->sdefcap) {
            size_t cap = c->sdefcap ? c->sdefcap * 2 : 16;
            i128 *p = realloc(c->sdev, cap * sizeof(i128));
            if (!p) return PyErr_NoMemory();
            c->sdev = p; c->sdefcap = cap;
        }
        di = c->nsdef++;
        if (map_put(&c->sdef, (uint64_t)sidx, di)) return PyErr_NoMemory();
    }
    c->sdev[di] = dev;
    Py_RETURN_NONE;
}

/* define_string(sid): a STR (only its id: the op field of a kernel must name one). */
static PyObject *Core_define_string(Core *c, PyObject *sid_o) {
    i128 sid;
    if (py_i128(sid_o, &sid)) return NULL;
    if (sid < 0 || sid >= (i128)c->L.max_id) Py_RETURN_NONE;
    uint64_t id = (uint64_t)sid;
    if (id >= STR_BIT_IDS) {
        if (map_put(&c->strs, id, 1)) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    size_t w = (size_t)(id >> 6);
    if (w >= c->strwords) {  /* doubled as far as this id: the bits of the ids a trace uses */
        size_t n = c->strwords ? c->strwords : 64;
        while (n <= w) n *= 2;
        uint64_t *bits = realloc(c->strbits, n * sizeof(uint64_t));
        if (!bits) return PyErr_NoMemory();
        memset(bits + c->strwords, 0, (n - c->strwords) * sizeof(uint64_t));
        c->strbits = bits;
        c->strwords = n;
    }
    c->strbits[w] |= 1ULL << (id & 63);
    Py_RETURN_NONE;
}

/* define_block(bid, ptr, size or None, forget): a BLOCK_DEF (a new generation of the id). */
static PyObject *Core_define_block(Core *c, PyObject *args) {
    PyObject *bid_o, *ptr_o, *size_o;
    int forget;
    if (!PyArg_ParseTuple(args, "OOOp", &bid_o, &ptr_o, &size_o, &forget)) return NULL;
    i128 bid, ptr = -1, size = 0;
    if (py_i128(bid_o, &bid)) return NULL;
    if (bid < 0 || bid >= (i128)c->L.max_id) Py_RETURN_NONE;
    int valid = PyLong_CheckExact(ptr_o) && (size_o == Py_None || PyLong_CheckExact(size_o));
    if (valid && py_i128(ptr_o, &ptr)) { PyErr_Clear(); valid = 0; }
    if (valid && size_o != Py_None && py_i128(size_o, &size)) { PyErr_Clear(); valid = 0; }
    if (ptr < 0 || ptr > (i128)UINT64_MAX || size < 0 || size > (i128)UINT64_MAX) valid = 0;
    if (forget) {
        block_t *b = find_block(c, (uint64_t)bid);
        if (b) drop_block(c, b);
        map_del(&c->stale, (uint64_t)bid);
    }
    uint64_t di;
    if (!map_get(&c->defs, (uint64_t)bid, &di)) {
        if (c->nbdefs == c->bdefcap) {
            size_t cap = c->bdefcap ? c->bdefcap * 2 : 16;
            bdef_t *p = realloc(c->bdefs, cap * sizeof(bdef_t));
            if (!p) return PyErr_NoMemory();
            c->bdefs = p; c->bdefcap = cap;
        }
        di = c->nbdefs++;
        if (map_put(&c->defs, (uint64_t)bid, di)) return PyErr_NoMemory();
    }
    bdef_t *d = &c->bdefs[di];
    d->ptr = (uint64_t)ptr; d->size = size_o == Py_None ? 0 : (uint64_t)size;
    d->size_known = size_o != Py_None; d->valid = (uint8_t)valid; d->gen = ++c->gen;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ findings to Python */

static PyObject *opt_id(int32_t v) { if (v < 0) Py_RETURN_NONE; return PyLong_FromLong(v); }

static PyObject *opt_u64(int present, uint64_t v) {
    if (!present) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *acc_tuple(Core *c, const acc_t *a) {
    PyObject *op;
    if (a->op == OP_FREE) { op = c->free_op; Py_INCREF(op); }
    else if (a->op == OP_LEAK) { op = c->leak_op; Py_INCREF(op); }
    else op = opt_id(a->op);
    PyObject *off = a->ranged ? PyLong_FromUnsignedLongLong(a->off) : (Py_INCREF(Py_None), Py_None);
    PyObject *n = a->ranged ? PyLong_FromUnsignedLongLong(a->n) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(LINNONN)", (long long)a->seq, c->sidx_of[a->stream], op, opt_id(a->stack),
                         a->write ? Py_True : Py_False, off, n);
}

static PyObject *Core_findings(Core *c, PyObject *args) {
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "n", &start)) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (size_t i = (size_t)(start < 0 ? 0 : start); i < c->nfound; i++) {
        finding_t *f = &c->found[i];
        PyObject *addrs = PyList_New(f->naddr), *occ = PyList_New(f->nocc);
        if (!addrs || !occ) { Py_XDECREF(addrs); Py_XDECREF(occ); Py_DECREF(out); return NULL; }
        for (uint32_t k = 0; k < f->naddr; k++) PyList_SET_ITEM(addrs, k, PyLong_FromUnsignedLongLong(f->addrs[k]));
        for (uint32_t k = 0; k < f->nocc; k++) {
            const occ_t *o = &f->occ[k];
            PyObject *t = Py_BuildValue("(LLKNNNN)", (long long)o->seq, (long long)o->pseq, (unsigned long long)o->addr,
                                        opt_u64(o->ranged & 1, o->off), opt_u64(o->ranged & 1, o->n),
                                        opt_u64(o->ranged & 2, o->poff), opt_u64(o->ranged & 2, o->pn));
            if (!t) { Py_DECREF(addrs); Py_DECREF(occ); Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(occ, k, t);
        }
        PyObject *size = f->bsize_known ? PyLong_FromUnsignedLongLong(f->bsize) : (Py_INCREF(Py_None), Py_None);
        PyObject *bstream = f->bstream >= 0 ? PyLong_FromUnsignedLong(c->sidx_of[f->bstream]) : (Py_INCREF(Py_None), Py_None);
        PyObject *item = Py_BuildValue("(iNN(KNNN)LLLNNN)", f->kind, acc_tuple(c, &f->acc), acc_tuple(c, &f->prev),
                                       (unsigned long long)f->bptr, size, bstream, opt_id(f->bstack),
                                       (long long)f->count, (long long)f->first, (long long)f->last, addrs, occ,
                                       PyBool_FromLong(f->merged));
        if (!item || PyList_Append(out, item)) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
        Py_DECREF(item);
    }
    return out;
}

static int cmp_bid(const void *a, const void *b) {
    uint32_t x = (*(block_t *const *)a)->bid, y = (*(block_t *const *)b)->bid;
    return x < y ? -1 : x > y;
}

/* finish's leak check: every live block allocated in the trace, in block id order. */
static PyObject *Core_check_leaks(Core *c, PyObject *unused) {
    if (c->check_leaks_done) Py_RETURN_NONE;
    c->check_leaks_done = 1;
    size_t n = c->nlive, k = 0;
    block_t **all = malloc((n ? n : 1) * sizeof(block_t *));
    if (!all) return PyErr_NoMemory();
    for (uint32_t i = 0; i < c->bdensecap; i++)
        if (c->bdense[i] && k < n) all[k++] = c->bdense[i];
    for (size_t i = 0; i < c->blocks.cap; i++)
        if (c->blocks.state[i] == 1 && k < n) all[k++] = (block_t *)(uintptr_t)c->blocks.vals[i];
    qsort(all, k, sizeof(block_t *), cmp_bid);
    for (size_t i = 0; i < k; i++) {
        block_t *b = all[i];
        if (b->stream < 0) continue;
        acc_t leak = {c->seq, b->stream, OP_LEAK, -1, 0, 1, 0, 0, 0};
        c->err = E_NONE;
        if (check_free(c, b, &leak, 0)) { free(all); return PyErr_NoMemory(); }
    }
    free(all);
    Py_RETURN_NONE;
}

/* finish's judgment of the frees still pending (engine.Engine.judge_at_end). */
static PyObject *Core_judge_at_end(Core *c, PyObject *unused) {
    c->err = E_NONE;
    if (judge_at_end(c)) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *Core_created_stack(Core *c, PyObject *arg) {
    i128 sidx;
    uint64_t v;
    if (py_i128(arg, &sidx)) return NULL;
    if (sidx < 0 || sidx >= (i128)c->L.max_id || !map_get(&c->slot_of, (uint64_t)sidx, &v)) Py_RETURN_NONE;
    return opt_id(c->created_stack[v]);
}

static PyObject *Core_counters(Core *c, PyObject *unused) {
    return Py_BuildValue("(LLLLnLLL)", (long long)c->seq, (long long)c->events, (long long)c->records,
                         (long long)c->dropped, (Py_ssize_t)c->nfound, (long long)c->vgave_up, (long long)c->capped,
                         (long long)c->hulled);
}

/* ------------------------------------------------------------------ type */

static int Core_init(Core *c, PyObject *args, PyObject *kw) {
    limits_t *L = &c->L;
    unsigned long long max_id;
    long long budget;
    Py_ssize_t queue_from;
    if (!PyArg_ParseTuple(args, "lllllllKKKKKKOOplLn", &L->max_segments, &L->max_streams, &L->max_findings,
                          &L->max_occurrences, &L->max_addresses, &L->max_ghosts, &L->max_block_ghosts, &max_id,
                          &L->max_str, &L->max_bin, &L->max_array, &L->max_map, &L->max_ext, &c->free_op,
                          &c->leak_op, &c->views_on, &c->max_views, &budget, &queue_from))
        return -1;
    c->vbudget_left = budget;
    c->queue_from = queue_from < 0 ? 0 : (size_t)queue_from;
    if (c->refs) { PyErr_SetString(PyExc_RuntimeError, "Core is initialized once"); return -1; }
    Py_INCREF(c->free_op); Py_INCREF(c->leak_op);
    c->refs = 1;
    L->max_id = max_id;
    if (L->max_ghosts < 2 || L->max_findings < 1 || L->max_segments < 1 || L->max_addresses < 1 ||
        L->max_streams < 1 || L->max_block_ghosts < 1 || L->max_occurrences < 1 || max_id > (1ULL << 31) ||
        c->max_views < 1) {
        PyErr_SetString(PyExc_ValueError, "bad limits");
        return -1;
    }
    c->ring = calloc(L->max_ghosts, sizeof(ghost_t));
    c->gscratch = calloc(L->max_ghosts, sizeof(ghost_t));
    c->found = calloc(L->max_findings, sizeof(finding_t));
    size_t cap = 16;
    while (cap < (size_t)L->max_findings * 2) cap *= 2;
    c->ftab = malloc(cap * sizeof(int32_t));
    if (!c->ring || !c->gscratch || !c->found || !c->ftab) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < cap; i++) c->ftab[i] = -1;
    c->ftabcap = cap;
    return 0;
}

static void Core_dealloc(Core *c) {
    for (size_t i = 0; i < c->blocks.cap; i++)
        if (c->blocks.state && c->blocks.state[i] == 1) block_free(c, (block_t *)(uintptr_t)c->blocks.vals[i]);
    for (uint32_t i = 0; i < c->bdensecap; i++) if (c->bdense[i]) block_free(c, c->bdense[i]);
    while (c->spare) { block_t *b = c->spare; c->spare = *(block_t **)b; free(b); }
    map_free(&c->blocks); map_free(&c->live_ptr); map_free(&c->defs); map_free(&c->stale);
    map_free(&c->sdef); map_free(&c->slot_of); map_free(&c->evmap); map_free(&c->skip); map_free(&c->strs);
    free(c->strbits);
    for (uint32_t s = 0; s < c->nslots; s++) free(c->cur[s]);
    free(c->cur); free(c->host); free(c->sidx_of); free(c->created_stack); free(c->slot_dev); free(c->sdev);
    for (size_t i = 0; i < c->nsnaps; i++) free(c->snaps[i].v);
    free(c->snaps); free(c->free_snaps); free(c->bdefs);
    for (size_t i = 0; i < c->nfound; i++) { free(c->found[i].addrs); free(c->found[i].occ); }
    for (uint32_t s = 0; s < c->npfl; s++) free(c->pfl[s].v);
    free(c->pfl);
    free(c->found); free(c->ftab); free(c->ring); free(c->gscratch);
    free(c->targets); free(c->afields); free(c->sigs); free(c->reported); for (int k = 0; k < 2; k++) { free(c->pv[k].v); free(c->pv[k].tab); }
    free(c->bdense); free(c->sdense); free(c->ascr); free(c->pend); free(c->allvec);
    arena_free(&c->arena); /* (after the blocks: they give their pools back to it) */
    if (c->refs) { Py_XDECREF(c->free_op); Py_XDECREF(c->leak_op); }
    Py_TYPE(c)->tp_free((PyObject *)c);
}

/* set_capturing(flag): while a graph capture is open, replay hands every record back (ST_SLOW). */
static PyObject *Core_set_capturing(Core *c, PyObject *flag) {
    int v = PyObject_IsTrue(flag);
    if (v < 0) return NULL;
    c->slow_all = v;
    Py_RETURN_NONE;
}

/* skip_type(t): records of type t (a type of no known kind, which Python has warned about)
 * are skipped here from now on, counted by type (skipped() hands the counts back). */
static PyObject *Core_skip_type(Core *c, PyObject *t_o) {
    i128 t;
    if (py_i128(t_o, &t)) return NULL;
    if (t < 0 || t > (i128)UINT64_MAX) Py_RETURN_FALSE; /* (no msgpack int is larger; Python checks first) */
    uint64_t n;
    if (!map_get(&c->skip, (uint64_t)t, &n) && map_put(&c->skip, (uint64_t)t, 0)) return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

/* skipped() -> [(type, records)]: the records of each type skip_type named that replay
 * skipped since the last call (the counts start again from 0). */
static PyObject *Core_skipped(Core *c, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (size_t i = 0; i < c->skip.cap; i++) {
        if (c->skip.state[i] != 1 || !c->skip.vals[i]) continue;
        PyObject *item = Py_BuildValue("(KK)", (unsigned long long)c->skip.keys[i], (unsigned long long)c->skip.vals[i]);
        if (!item || PyList_Append(out, item)) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
        Py_DECREF(item);
        c->skip.vals[i] = 0;
    }
    return out;
}

/* block_live(bid): would an access of block bid find a block (live, or from a BLOCK_DEF not
 * freed since)? What graphs.py asks before a graph launch. */
static PyObject *Core_block_live(Core *c, PyObject *bid_o) {
    i128 bid;
    if (py_i128(bid_o, &bid)) return NULL;
    if (bid < 0 || bid >= (i128)c->L.max_id) Py_RETURN_FALSE;
    if (find_block(c, (uint64_t)bid)) Py_RETURN_TRUE;
    uint64_t di, sg;
    if (!map_get(&c->defs, (uint64_t)bid, &di)) Py_RETURN_FALSE;
    if (map_get(&c->stale, (uint64_t)bid, &sg) && sg == c->bdefs[di].gen) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyMethodDef Core_methods[] = {
    {"set_capturing", (PyCFunction)Core_set_capturing, METH_O, "set_capturing(flag): hand every record back"},
    {"block_live", (PyCFunction)Core_block_live, METH_O, "block_live(bid) -> whether an access finds the block"},
    {"skip_type", (PyCFunction)Core_skip_type, METH_O, "skip_type(t): skip records of type t from now on"},
    {"skipped", (PyCFunction)Core_skipped, METH_NOARGS, "skipped() -> [(type, records skipped since the last call)]"},
    {"replay", (PyCFunction)Core_replay, METH_VARARGS, "replay(buffer, pos, end) -> (status, pos, ...)"},
    {"define_stream", (PyCFunction)Core_define_stream, METH_VARARGS, "define_stream(sidx, device)"},
    {"define_string", (PyCFunction)Core_define_string, METH_O, "define_string(sid)"},
    {"define_block", (PyCFunction)Core_define_block, METH_VARARGS, "define_block(bid, ptr, size, forget)"},
    {"findings", (PyCFunction)Core_findings, METH_VARARGS, "findings(start) -> list of tuples"},
    {"check_leaks", (PyCFunction)Core_check_leaks, METH_NOARGS, "the end-of-trace leak check (once)"},
    {"judge_at_end", (PyCFunction)Core_judge_at_end, METH_NOARGS, "judge the pending frees (end of trace)"},
    {"created_stack", (PyCFunction)Core_created_stack, METH_O, "created_stack(sidx) -> stack id or None"},
    {"counters", (PyCFunction)Core_counters, METH_NOARGS, "(seq, events, records, dropped, findings, gave_up, capped, hulled)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "npusan.analyzer.replay._core.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
    .tp_doc = "The compiled replay core (see npusan.analyzer.replay.native).",
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_core", "npusan's compiled replay core.", -1, NULL, NULL, NULL, NULL, NULL};

/* The tables this core was compiled with (_tables.h), as the module's attributes ERRORS
 * (name -> code), RECORD_TYPES (name -> type), MIN_LENGTH and STACK_FIELD (type -> number,
 * STACK_FIELD only for event records): native.py takes its error codes from ERRORS, and a
 * test checks all four against the Python definitions. */
static int add_tables(PyObject *m) {
    PyObject *errors = PyDict_New(), *types = PyDict_New(), *minlen = PyDict_New(), *stack = PyDict_New();
    int ok = errors && types && minlen && stack;
    for (int code = 1; ok && code <= N_ERRORS; code++) {
        PyObject *v = PyLong_FromLong(code);
        ok = v && PyDict_SetItemString(errors, ERROR_NAMES[code], v) == 0;
        Py_XDECREF(v);
    }
    for (size_t i = 0; ok && i < sizeof RECORD_TYPES / sizeof *RECORD_TYPES; i++) {
        int t = RECORD_TYPES[i].type;
        PyObject *k = PyLong_FromLong(t), *n = PyLong_FromLong(MIN_LENGTH[t]);
        ok = k && n && PyDict_SetItemString(types, RECORD_TYPES[i].name, k) == 0 && PyDict_SetItem(minlen, k, n) == 0;
        if (ok && t < (int)(sizeof STACK_FIELD / sizeof *STACK_FIELD) && STACK_FIELD[t]) {
            PyObject *f = PyLong_FromLong(STACK_FIELD[t]);
            ok = f && PyDict_SetItem(stack, k, f) == 0;
            Py_XDECREF(f);
        }
        Py_XDECREF(k); Py_XDECREF(n);
    }
    const char *names[] = {"ERRORS", "RECORD_TYPES", "MIN_LENGTH", "STACK_FIELD"};
    PyObject *dicts[] = {errors, types, minlen, stack};
    for (int i = 0; i < 4; i++) {
        if (ok && PyModule_AddObject(m, names[i], dicts[i]) == 0) continue; /* (stolen) */
        ok = 0;
        Py_XDECREF(dicts[i]);
    }
    return ok ? 0 : -1;
}

PyMODINIT_FUNC PyInit__core(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) { Py_DECREF(&CoreType); Py_DECREF(m); return NULL; }
    if (add_tables(m) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
