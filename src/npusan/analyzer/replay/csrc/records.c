/* The compiled replay core, records.c: the rules, one per record type, and the record loop (Core.replay).
 *
 * Part of a unity build: _core.c includes this after strided.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ the rules, one per record type */

static inline i128 bid_of(i128 a) { return a < 0 ? ~a : a; }

static int kernel_run(Core *c, int32_t S, const field_t *f, uint32_t nacc);

/* (kept out of line: inlined into the record loop it made GCC move range_access out of it) */
__attribute__((noinline)) static int kernel(Core *c, const field_t *f, uint32_t nacc) {
    int32_t S;
    if (stream(c, &f[1], 1, &S)) return -1;
    for (uint32_t i = 0; i < nacc; i++) {
        afield_t *a = &c->afields[i];
        target_t *t = &c->targets[i];
        t->bi = i;
        t->seg = NO_SEG;
        t->shape = NULL;
        if (a->t == A_INT) {
            t->write = a->f[0].v < 0; t->ranged = 0; t->off = t->n = 0;
            if (!(t->b = block(c, bid_of(a->f[0].v), 4 + (int)i))) return -1;
            t->a = (int64_t)a->f[0].v; /* (a block was found: its id is below max_id) */
            continue;
        }
        if (a->t == A_SHAPE) return fail(c, E_ACCESS_SHAPE, 4 + (int)i);
        if (a->f[0].t != F_INT || a->f[1].t != F_INT || a->f[2].t != F_INT || a->f[1].v < 0 || a->f[2].v < 0)
            return fail(c, E_ACCESS_MALFORMED, 4 + (int)i);
        t->write = a->f[0].v < 0; t->ranged = 1; t->off = (uint64_t)a->f[1].v; t->n = (uint64_t)a->f[2].v;
        if (!(t->b = block(c, bid_of(a->f[0].v), 4 + (int)i))) return -1;
        t->a = (int64_t)a->f[0].v;
    }
    if (check_op(c, &f[2])) return -1;
    return kernel_run(c, S, f, nacc);
}

/* A range access as writers write it, [id, offset, length] in the encodings quick_i64_at
 * reads (0: anything else, or cut short; *pp then anywhere inside it) */
__attribute__((always_inline)) static inline int quick_range(const uint8_t **pp, const uint8_t *end, int64_t *a,
                                                             int64_t *off, int64_t *n, int checked) {
    if ((checked && *pp >= end) || **pp != 0x93) return 0;
    ++*pp;
    return quick_i64_at(pp, end, a, checked) && quick_i64_at(pp, end, off, checked) && quick_i64_at(pp, end, n, checked);
}

/* A kernel record as writers write it: the stream, the op and the stack ints or nil,
 * each access an int or [int, offset, length] with the offset and length non-negative, all
 * in the encodings quick_i64 reads. Its fields go into f[1..3] (as read_field would put
 * them) and its accesses straight into c->targets (t->a, ranged, off, n), without the
 * general fields that kernel then checks. 0: anything else, or the record cut short; the
 * general reader then reads the record from its start (c->tcap >= nacc). */
__attribute__((always_inline)) static inline int read_kernel_at(Core *c, const uint8_t **pp, const uint8_t *end,
                                                                field_t *f, uint32_t nacc, int checked) {
    const uint8_t *p = *pp;
    int64_t v;
    for (int i = 1; i < 4; i++) {
        if (quick_i64_at(&p, end, &v, checked)) { f[i].t = F_INT; f[i].v = v; }
        else if ((!checked || p < end) && *p == 0xc0) { f[i].t = F_NIL; p++; }
        else return 0;
    }
    for (uint32_t i = 0; i < nacc; i++) {
        target_t *t = &c->targets[i];
        if (quick_i64_at(&p, end, &t->a, checked)) { t->ranged = 0; t->off = t->n = 0; continue; }
        int64_t off, n;
        if (quick_range(&p, end, &t->a, &off, &n, checked) && off >= 0 && n >= 0) {
            t->ranged = 1; t->off = (uint64_t)off; t->n = (uint64_t)n;
            continue;
        }
        return 0;
    }
    *pp = p;
    return 1;
}
/* Has a kernel record of nacc accesses from p on room for the most such a record can take
 * (three fields, then [id, offset, length] each access), so it is read without bound tests? */
static inline int kernel_room(const uint8_t *p, const uint8_t *end, uint32_t nacc) {
    return (size_t)(end - p) >= 3 * QUICK_INT_MAX + (1 + 3 * QUICK_INT_MAX) * (size_t)nacc;
}
/* The type of the record at p when its first two bytes are as writers write them (a
 * fixarray of at least the type's length, then the type as a fixint), else -1. */
static inline int quick_type(const limits_t *L, const uint8_t *p, const uint8_t *end) {
    if (end - p >= 2 && (p[0] & 0xf0) == 0x90 && p[1] >= T_STREAM_CREATED && p[1] <= T_KERNEL &&
        (p[0] & 0x0f) >= MIN_LENGTH[p[1]] && (uint64_t)(p[0] & 0x0f) <= L->max_array)
        return p[1];
    return -1;
}
static inline int read_kernel_quick(Core *c, const uint8_t **pp, const uint8_t *end, field_t *f, uint32_t nacc) {
    if (kernel_room(*pp, end, nacc)) return read_kernel_at(c, pp, end, f, nacc, 0);
    return read_kernel_at(c, pp, end, f, nacc, 1);
}

/* kernel for a record read_kernel_quick read: the same checks, in the same order, of what
 * it can hold (the stream, then each access's block) */
__attribute__((noinline)) static int kernel_quick(Core *c, const field_t *f, uint32_t nacc) {
    int32_t S; /* (the lookups of stream and block on 64-bit ints first: what they hold here) */
    if (!(f[1].t == F_INT && stream_dense(c, (uint64_t)(int64_t)f[1].v, &S)) && stream(c, &f[1], 1, &S)) return -1;
    for (uint32_t i = 0; i < nacc; i++) {
        target_t *t = &c->targets[i];
        t->bi = i;
        t->seg = NO_SEG;
        t->shape = NULL;
        t->write = t->a < 0;
        uint64_t id = (uint64_t)(t->write ? ~t->a : t->a);
        if (!(t->b = block_dense(c, id)) && !(t->b = block_slow(c, (i128)id, 4 + (int)i))) return -1;
    }
    if (check_op(c, &f[2])) return -1;
    return kernel_run(c, S, f, nacc);
}

/* A kernel's accesses (c->targets, their blocks found) at stream S */
static int kernel_run(Core *c, int32_t S, const field_t *f, uint32_t nacc) {
    int64_t seq = ++c->seq;
    int64_t *vec = c->cur[S];
    vec[S] = seq;
    if (c->views_seq == seq) /* the VIEWS record just before this kernel refines its accesses */
        for (uint32_t i = 0; i < nacc; i++) {
            target_t *t = &c->targets[i];
            if (!t->ranged) continue;
            pview_t *pv = pv_find(c, t->a, t->off, t->n);
            if (pv && pv->has_shape) t->shape = &pv->shape;
        }
    int32_t op = id_or_none(c, &f[2]), stack = id_or_none(c, &f[3]);
    uint32_t queued = 0; /* accesses that can be queued (can_defer), which the batch prefetches */
    int made = !(nacc > 1 && nacc <= 16); /* an access was made at once (or queued is not known) */
    if (!made) {
        /* The blocks are independent: load the state of all of them at once (each step's
         * loads overlap) before the first is used. Only hints: nothing here changes state. */
        for (uint32_t i = 0; i < nacc; i++) { /* (a plain range: the two lines it reads first; see block_t) */
            const char *p = (const char *)c->targets[i].b; /* (loops of a constant count: unrolled) */
            __builtin_prefetch(p); __builtin_prefetch(p + 64);
            if (!c->targets[i].ranged || c->targets[i].shape)
                for (size_t off = 128; off < sizeof(block_t); off += 64) __builtin_prefetch(p + off);
        }
        uint32_t ranged = 0; /* the ranges not queued, whose segments are requested next */
        for (uint32_t i = 0; i < nacc; i++) {
            target_t *t = &c->targets[i];
            const block_t *b = t->b;
            if (t->ranged && !t->shape && can_defer(c, b, S, vec)) { queued |= 1u << i; continue; } /* (the batch prefetches) */
            ranged |= (uint32_t)t->ranged << i;
            if (!b->nseg) {
                if (b->reads.cap > 1) __builtin_prefetch(b->reads.heap);
            } else { /* the index (the search below then hits the cache); t->seg: the guess, until then */
                t->seg = prefetch_index(b, t->off, t->ranged);
            }
            if (b->uses.cap > 1) __builtin_prefetch(b->uses.heap);
        }
        for (; ranged; ranged &= ranged - 1) {
            target_t *t = &c->targets[__builtin_ctz(ranged)];
            t->seg = prefetch_segment(t->b, t->off, t->seg);
        }
    }
    /* A queued access of one part of a block in the grid form is encoded here, once (the
     * three-access form of its acc_t, as p3_encode would make it, when it packs3): what its
     * kernel's fields give (fits3: -1 until the first such access) */
    int fits3 = -1;
    uint64_t w0k = 0, w1k = 0;
    for (uint32_t i = 0; i < nacc; i++) {
        target_t *t = &c->targets[i];
        if (t->ranged && t->n == 0) continue; /* an empty range touches nothing */
        block_t *b = t->b;
        /* (the prefetch pass's answer holds until an access is made at once: a strided one
         * may give a later one's block a strided entry; a flush changes none of it) */
        if (t->ranged && !t->shape && (made ? can_defer(c, b, S, vec) : (int)(queued >> i & 1))) {
            if (!b->gbits) {
                acc_t acc = {seq, S, op, stack, i, t->write, 1, t->off, t->n};
                if (defer(c, b, &acc)) return -1;
                continue;
            }
            if (fits3 < 0) fits3 = p3_kernel_words(seq, S, nacc, op, stack, &w0k, &w1k);
            if (fits3 && grid_queues(b, t->off, t->n)) {
                struct pend *q = pend_slot(c, b);
                if (!q) return -1;
                grid_queue(q, b, i, t->write, t->off, t->n, w0k, w1k);
                continue;
            }
        }
        acc_t acc = {seq, S, op, stack, i, t->write, t->ranged, t->off, t->n};
        made = 1;
        if ((b->pending && flush(c)) || one_access(c, b, S, vec, &acc, t->shape, t->seg)) return -1;
    }
    return 0;
}

/* A kernel record (as read_kernel_quick reads them) whose accesses are all ranges of one
 * part each of blocks in the grid form, each of which can wait in the queue (can_defer):
 * what kernel_quick makes of it, queued straight from the record's bytes (the common
 * record of a trace of many ranges per block). 1: done, *pp past the record; 0: not such a
 * record, or no room for it in the queue, and nothing changed: the general path reads it
 * from its start. checked: as read_kernel_at's. */
__attribute__((always_inline)) static inline int kernel_grid_at(Core *c, const uint8_t **pp, const uint8_t *end,
                                                                uint32_t nacc, int checked) {
    const uint8_t *p = *pp;
    uint32_t start = c->npend;
    if (nacc - 1u >= 16u || start + nacc > PEND_MAX) return 0;
    if (!c->pend && !(c->pend = malloc(PEND_MAX * sizeof(struct pend)))) return 0; /* (pend_slot then says) */
    int64_t v[3];
    for (int k = 0; k < 3; k++) { /* the stream, the op and the stack (an int, or nil) */
        if (quick_i64_at(&p, end, &v[k], checked)) continue;
        if (k && (!checked || p < end) && *p == 0xc0) { v[k] = -1; p++; continue; }
        return 0;
    }
    int32_t S;
    int64_t seq = c->seq + 1;
    if (!stream_dense(c, (uint64_t)v[0], &S) || c->views_seq == seq) return 0;
    if (!op_defined_i64(c, v[1])) return 0; /* (a nil op too: the general path takes it) */
    int32_t op = id_or_none_i64(c, v[1]), stack = id_or_none_i64(c, v[2]);
    uint64_t w0k, w1k;
    if (!p3_kernel_words(seq, S, nacc, op, stack, &w0k, &w1k)) return 0;
    struct pend *q = &c->pend[start];
    for (uint32_t i = 0; i < nacc; i++) { /* (into the queue's entries as read: the blocks' first lines
                                           * are requested before any is read) */
        int64_t a, off, n;
        if (!quick_range(&p, end, &a, &off, &n, checked) || !(q[i].b = block_dense(c, (uint64_t)(a < 0 ? ~a : a))))
            return 0;
        __builtin_prefetch(q[i].b); __builtin_prefetch((const char *)q[i].b + 64);
        q[i].e.w0 = (uint64_t)a; q[i].e.w1 = (uint64_t)off; q[i].e.w2 = (uint64_t)n;
    }
    const int64_t *vec = c->cur[S]; /* (all_before never reads vec[S], which the kernel sets) */
    uint32_t i;
    for (i = 0; i < nacc; i++) {
        block_t *b = q[i].b;
        int write = (int64_t)q[i].e.w0 < 0;
        uint64_t off = q[i].e.w1, n = q[i].e.w2;
        if (!b->gbits || b->ng || b->nviews || !all_before(b, S, vec) || !grid_queues(b, off, n)) /* (no part is below 0) */
            break;
        b->pending++;
        grid_queue(&q[i], b, i, write, off, n, w0k, w1k);
    }
    if (i < nacc) { /* undone */
        while (i--) q[i].b->pending--;
        return 0;
    }
    c->npend = start + nacc;
    c->seq = seq;
    c->cur[S][S] = seq;
    *pp = p;
    return 1;
}
/* kernel_grid_at for the kernel record whose fields start at *pp (nacc accesses), then for
 * each next record while it is such a record (its first two bytes as writers write them:
 * Core_replay's quick test). Returns how many it made; *pp: past the last of them, or where
 * it was if none (a next record it does not make is read again from its start). */
__attribute__((noinline)) static uint32_t kernel_grid(Core *c, const uint8_t **pp, const uint8_t *end, uint32_t nacc) {
    const uint8_t *p = *pp;
    uint32_t made = 0;
    for (;;) {
        if (!(kernel_room(p, end, nacc) ? kernel_grid_at(c, &p, end, nacc, 0) : kernel_grid_at(c, &p, end, nacc, 1)))
            return made;
        *pp = p;
        made++;
        if (quick_type(&c->L, p, end) != T_KERNEL) return made;
        nacc = (uint32_t)(p[0] & 0x0f) - 4u;
        p += 2;
    }
}

/* Python's Engine.host_access: a kernel on the host stream H (its state merges whatever the
 * host's does, so it is the host's), then every stream and the host learn H's sequence
 * number: each later device operation is issued after it in host program order. */
static int host_access(Core *c, const field_t *f, uint32_t nacc) {
    if (kernel(c, f, nacc)) return -1;
    int32_t H;
    if (stream(c, &f[1], 1, &H)) return -1; /* (found: kernel made it) */
    for (uint32_t s = 0; s < c->nslots; s++) c->cur[s][H] = c->seq;
    c->host[H] = c->seq;
    return 0;
}

static int check_block(Core *c, const field_t *f) {
    if (f[1].t != F_INT || f[1].v < 0 || f[1].v >= (i128)c->L.max_id) return fail(c, E_BID_RANGE, 1);
    if (f[2].t != F_INT || f[2].v < 0 || !(f[3].t == F_NIL || (f[3].t == F_INT && f[3].v >= 0)))
        return fail(c, E_MALFORMED_BLOCK, 1);
    return 0;
}

static int apply(Core *c, int t, const field_t *f, uint32_t nacc) {
    int32_t S;
    uint64_t e;
    c->events++;
    if ((t <= T_KERNEL || t == T_HOST_ACCESS) && f[STACK_FIELD[t]].t == F_OTHER) return fail(c, E_STACK, STACK_FIELD[t]);
    switch (t) {
    case T_KERNEL:
        return kernel(c, f, nacc);
    case T_HOST_ACCESS:
        return host_access(c, f, nacc);
    case T_STREAM_CREATED: {
        uint64_t v;
        if (f[1].t == F_INT && f[1].v >= 0 && f[1].v < (i128)c->L.max_id && map_get(&c->slot_of, (uint64_t)f[1].v, &v))
            return 0; /* a known stream: a second creation is ignored */
        if (stream(c, &f[1], 1, &S)) return -1;
        c->created_stack[S] = id_or_none(c, &f[2]);
        return 0;
    }
    case T_EVENT_CREATED:
        if (event_id(c, &f[1], &e)) return -1;
        return set_snapshot(c, e, NULL, 0);
    case T_EVENT_DELETED:
        if (event_id(c, &f[1], &e)) return -1;
        return event_deleted_(c, e);
    case T_EVENT_RECORD:
        if (event_id(c, &f[1], &e) || stream(c, &f[2], 2, &S)) return -1;
        return set_snapshot(c, e, c->cur[S], c->nslots);
    case T_EVENT_WAIT: {
        if (event_id(c, &f[1], &e) || stream(c, &f[2], 2, &S)) return -1;
        snap_t *s = snapshot(c, e);
        if (s) merge(c->cur[S], s->v, s->n);
        return 0;
    }
    case T_EVENT_SYNC: {
        if (event_id(c, &f[1], &e)) return -1;
        snap_t *s = snapshot(c, e);
        if (s) merge_all(c, s->v, s->n);
        return 0;
    }
    case T_STREAM_SYNC: {
        if (stream(c, &f[1], 1, &S)) return -1;
        int64_t *src = malloc(c->nslots * sizeof(int64_t) + 1);
        if (!src) return oom(c);
        memcpy(src, c->cur[S], c->nslots * sizeof(int64_t));
        merge_all(c, src, c->nslots);
        free(src);
        return 0;
    }
    case T_DEVICE_SYNC: {
        if (f[1].t == F_OTHER) return fail(c, E_DEVICE, 1);
        for (uint32_t s = 0; s < c->nslots; s++)
            if (f[1].t == F_NIL || c->slot_dev[s] == f[1].v)
                if (c->host[s] < c->cur[s][s]) c->host[s] = c->cur[s][s];
        for (uint32_t s = 0; s < c->nslots; s++) merge(c->cur[s], c->host, c->nslots);
        return 0;
    }
    case T_ALLOC: {
        if (check_block(c, f) || stream(c, &f[4], 4, &S)) return -1;
        if (c->pfpending && judge_stream(c, S)) return -1;
        block_t *b = new_block(c, (uint32_t)f[1].v, (uint64_t)f[2].v, f[3].t == F_INT ? (uint64_t)f[3].v : 0,
                               f[3].t == F_INT, S, id_or_none(c, &f[5]), 0, 0);
        if (!b) return oom(c);
        if (c->gcount) return attach_ghosts(c, b);
        return 0;
    }
    case T_FREE: {
        block_t *b = f[1].t == F_INT ? block(c, f[1].v, 1) : (fail(c, E_BLOCK_UNDEFINED, 1), NULL);
        if (!b || (b->pending && flush(c))) return -1;
        if (b->stream >= 0) {
            acc_t fr = {c->seq, b->stream, OP_FREE, id_or_none(c, &f[2]), 0, 1, 0, 0, 0};
            if (check_free(c, b, &fr, 1)) return -1;
        }
        drop_block(c, b);
        return 0;
    }
    case T_RECORD_STREAM:
    case T_ERASE_STREAM: {
        block_t *b = f[1].t == F_INT ? block(c, f[1].v, 1) : (fail(c, E_BLOCK_UNDEFINED, 1), NULL);
        if (!b || stream(c, &f[2], 2, &S)) return -1;
        uint32_t k;
        for (k = 0; k < b->nrec; k++) if (b->recorded[k] == S) break;
        if (t == T_RECORD_STREAM && k == b->nrec) {
            if (b->nrec == b->reccap) {
                uint32_t cap = b->reccap ? b->reccap * 2 : 2;
                int32_t *p = realloc(b->recorded, cap * sizeof(int32_t));
                if (!p) return oom(c);
                b->recorded = p; b->reccap = cap;
            }
            b->recorded[b->nrec++] = S;
        } else if (t == T_ERASE_STREAM && k < b->nrec) {
            b->recorded[k] = b->recorded[--b->nrec];
        }
        return 0;
    }
    }
    return 0;
}

/* ------------------------------------------------------------------ the record loop */

static int ensure_scratch(Core *c, size_t n) {
    if (n <= c->tcap) return 0;
    size_t cap = c->tcap ? c->tcap : 16;
    while (cap < n) cap *= 2;
    target_t *t = realloc(c->targets, cap * sizeof(target_t));
    if (!t) return -1;
    c->targets = t;
    afield_t *a = realloc(c->afields, cap * sizeof(afield_t));
    if (!a) return -1;
    c->afields = a;
    c->tcap = cap;
    return 0;
}

static PyObject *result(int status, Py_ssize_t pos, Py_ssize_t len, int code, int field) {
    if (status == ST_ERROR) return Py_BuildValue("(innii)", status, pos, len, code, field);
    if (status == ST_NEED) return Py_BuildValue("(in)", status, pos);
    return Py_BuildValue("(inn)", status, pos, len);
}

static PyObject *Core_replay(Core *c, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &stop)) return NULL;
    if (pos < 0 || stop > view.len || pos > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad buffer range");
        return NULL;
    }
    const uint8_t *base = view.buf, *end = base + stop;
    const limits_t *L = &c->L;
    if (ensure_scratch(c, 16)) { PyBuffer_Release(&view); return PyErr_NoMemory(); } /* (read_kernel_quick's) */
    field_t f[6];
    int status = ST_NEED, code = 0, field = 0;
    Py_ssize_t len = 0;
    for (;;) {
        const uint8_t *p = base + pos;
        if (p >= end) break;
        obj_t o;
        int r, t = -1;
        int skip = 0; uint64_t skip_t = 0; /* the record's type, when it may be one to skip (c->skip) */
        if (c->slow_all) { /* capturing a graph: Python stores or replays each record (graphs.py) */
            r = read_obj(L, &p, end, &o);
            if (r == MP_OK) r = skip_rest(L, &p, end, &o, 1);
            if (r == MP_NEED) break;
            if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
            status = ST_SLOW; len = p - (base + pos);
            break;
        }
        if (quick_type(L, p, end) >= 0) {
            /* an event record as writers write it (a fixarray, then the type as a fixint):
             * what the two read_obj calls below would make of its first two bytes */
            o.t = O_ARR; o.n = p[0] & 0x0f; t = p[1]; p += 2; r = MP_OK;
        } else {
            r = read_obj(L, &p, end, &o);
            if (r == MP_NEED) break;
            if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
            if (o.t == O_ARR && o.n > 0) {
                obj_t ot;
                r = read_obj(L, &p, end, &ot);
                if (r == MP_OK) {
                    if (ot.t == O_INT && ((ot.v >= T_STREAM_CREATED && ot.v <= T_KERNEL) || ot.v == T_HOST_ACCESS ||
                                          (ot.v == T_VIEWS && c->views_on)) &&
                        o.n >= (uint64_t)MIN_LENGTH[(int)ot.v])
                        t = (int)ot.v;
                    else if ((r = skip_rest(L, &p, end, &ot, 2)) == MP_OK) {
                        r = skip_objs(L, &p, end, o.n - 1, 0, 1);
                        if (ot.t == O_INT && ot.v >= 0 && ot.v <= (i128)UINT64_MAX && c->skip.n) { skip = 1; skip_t = (uint64_t)ot.v; }
                    }
                }
            } else {
                r = skip_rest(L, &p, end, &o, 1);
            }
        }
        if (r == MP_NEED) break;
        if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
        if (t < 0) {
            if (skip && map_add(&c->skip, skip_t, 1)) {
                c->records++;
                pos = p - base;
                continue;
            }
            status = ST_SLOW; len = p - (base + pos); break;
        }
        uint32_t nacc = 0;
        if (t == T_VIEWS) {
            int bad = 0;
            r = read_views(c, L, &p, end, o.n - 1, &bad);
            if (r == -2) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
            if (r == MP_NEED) break;
            if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
            c->err = E_NONE;
            if (bad || index_views(c)) {
                if (c->err == E_NOMEM) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
                status = ST_ERROR; len = p - (base + pos); code = E_VIEWS; field = 0;
                break;
            }
            c->records++;
            c->events++;
            c->views_seq = c->seq + 1;
            pos = p - base;
            continue;
        }
        int quick = 0; /* a kernel record read_kernel_quick read */
        if (t == T_KERNEL) {
            nacc = (uint32_t)(o.n - 4);
            uint32_t made = c->poolbytes ? kernel_grid(c, &p, end, nacc) : 0; /* (no pool: no block in the grid form) */
            if (made) {
                c->records += made;
                c->events += made;
                pos = p - base;
                continue;
            }
            quick = nacc <= c->tcap && read_kernel_quick(c, &p, end, f, nacc);
        }
        if (t == T_KERNEL || t == T_HOST_ACCESS) { /* (a host access: always the general path) */
            nacc = (uint32_t)(o.n - 4);
            for (int i = 1; i < 4 && !r && !quick; i++) r = read_field(L, &p, end, &f[i], 1);
            for (uint32_t i = 0; i < nacc && !r && !quick; i++) {
                /* grown as accesses arrive, never to a length field's claim */
                if (i >= c->tcap && ensure_scratch(c, (size_t)i + 1)) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
                r = read_access(L, &p, end, &c->afields[i]);
            }
        } else {
            uint64_t nf = o.n - 1 < 5 ? o.n - 1 : 5;
            for (uint64_t i = 1; i <= nf && !r; i++) r = read_field(L, &p, end, &f[i], 1);
            if (!r) r = skip_objs(L, &p, end, o.n - 1 - nf, 0, 1);
        }
        if (r == MP_NEED) break;
        if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
        c->records++;
        c->err = E_NONE;
        if (quick ? (c->events++, kernel_quick(c, f, nacc)) : apply(c, t, f, nacc)) {
            if (c->err == E_NOMEM) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
            c->records--; /* counted when it is replayed, maybe after a missing definition */
            c->events--;
            status = ST_ERROR; len = p - (base + pos); code = c->err; field = c->err_field;
            break;
        }
        pos = p - base;
    }
    PyBuffer_Release(&view);
    if (flush(c)) return PyErr_NoMemory(); /* (the queue is empty between calls) */
    return result(status, pos, len, code, field);
}
