/* The compiled replay core, streams.c: streams (slots, the sync-state matrix), events (snapshots) and findings (deduplication, occurrences).
 *
 * Part of a unity build: _core.c includes this after reader.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ streams */

static int64_t *vec_new(Core *c) {
    int64_t *v = malloc(c->scap * sizeof(int64_t));
    if (v) for (uint32_t i = 0; i < c->scap; i++) v[i] = -1;
    return v;
}

static int grow_slots(Core *c) {
    uint32_t cap = c->scap ? c->scap * 2 : 8;
    for (uint32_t s = 0; s < c->nslots; s++) {
        int64_t *v = realloc(c->cur[s], cap * sizeof(int64_t));
        if (!v) return -1;
        for (uint32_t i = c->scap; i < cap; i++) v[i] = -1;
        c->cur[s] = v;
    }
    int64_t *h = realloc(c->host, cap * sizeof(int64_t));
    if (!h) return -1;
    for (uint32_t i = c->scap; i < cap; i++) h[i] = -1;
    c->host = h;
    void *p;
    if (!(p = realloc(c->cur, cap * sizeof(int64_t *)))) return -1;
    c->cur = p;
    if (!(p = realloc(c->sidx_of, cap * sizeof(uint32_t)))) return -1;
    c->sidx_of = p;
    if (!(p = realloc(c->created_stack, cap * sizeof(int32_t)))) return -1;
    c->created_stack = p;
    if (!(p = realloc(c->slot_dev, cap * sizeof(i128)))) return -1;
    c->slot_dev = p;
    c->scap = cap;
    return 0;
}

/* *slot: the slot of a stream index below sdensecap already seen (1), else 0 */
static inline int stream_dense(const Core *c, uint64_t v, int32_t *slot) {
    int32_t sl = v < c->sdensecap ? c->sdense[v] : -1;
    if (sl < 0) return 0;
    *slot = sl;
    return 1;
}

/* Python's Engine.stream: the slot of the stream named by field `fi`, created if new. */
static int stream(Core *c, const field_t *f, int fi, int32_t *slot) {
    uint64_t v;
    if (f->t == F_INT && f->v >= 0 && f->v < (i128)c->sdensecap) {
        if (stream_dense(c, (uint64_t)f->v, slot)) return 0;
    } else if (f->t == F_INT && f->v >= DENSE_IDS && f->v < (i128)c->L.max_id && map_get(&c->slot_of, (uint64_t)f->v, &v)) {
        *slot = (int32_t)v;
        return 0;
    }
    uint64_t di;
    if (f->t != F_INT || f->v < 0 || f->v >= (i128)c->L.max_id || !map_get(&c->sdef, (uint64_t)f->v, &di))
        return fail(c, E_STREAM_UNDEFINED, fi);
    if ((long)c->nslots >= c->L.max_streams) return fail(c, E_TOO_MANY_STREAMS, fi);
    if (c->nslots == c->scap && grow_slots(c)) return oom(c);
    uint32_t S = c->nslots;
    c->host[S] = 0;
    int64_t *vec = vec_new(c);
    if (!vec) return oom(c);
    memcpy(vec, c->host, c->scap * sizeof(int64_t));
    c->cur[S] = vec;
    c->sidx_of[S] = (uint32_t)f->v;
    c->created_stack[S] = -1;
    c->slot_dev[S] = c->sdev[di];
    if (map_put(&c->slot_of, (uint64_t)f->v, S)) return oom(c);
    if (f->v < DENSE_IDS) {
        uint32_t id = (uint32_t)f->v;
        if (id >= c->sdensecap) {
            uint32_t cap = c->sdensecap ? c->sdensecap : 64;
            while (cap <= id) cap *= 2;
            int32_t *d = realloc(c->sdense, cap * sizeof(int32_t));
            if (!d) return oom(c);
            for (uint32_t k = c->sdensecap; k < cap; k++) d[k] = -1;
            c->sdense = d; c->sdensecap = cap;
        }
        c->sdense[id] = (int32_t)S;
    }
    c->nslots++;
    *slot = (int32_t)S;
    return 0;
}

static inline void merge(int64_t *dst, const int64_t *src, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) if (dst[i] < src[i]) dst[i] = src[i];
}

static inline int ordered(const int64_t *vec, const acc_t *e) { return vec[e->stream] >= e->seq; }

static int ordered_everywhere(Core *c, const acc_t *e) {
    for (uint32_t s = 0; s < c->nslots; s++) if (c->cur[s][e->stream] < e->seq) return 0;
    return 1;
}

/* An id that names something (a string or a stack), or -1: an int out of range names nothing. */
static inline int32_t id_or_none_i64(const Core *c, int64_t v) { return v >= 0 && (uint64_t)v < c->L.max_id ? (int32_t)v : -1; }
static inline int32_t id_or_none(Core *c, const field_t *f) {
    return f->t == F_INT && f->v >= 0 && f->v < (i128)c->L.max_id ? (int32_t)f->v : -1;
}

/* Whether string id v (0 <= v < max_id) was defined. */
static inline int string_defined(const Core *c, uint64_t v) {
    if (v < STR_BIT_IDS)
        return (v >> 6) < c->strwords && (c->strbits[v >> 6] >> (v & 63)) & 1;
    return map_get(&c->strs, v, NULL);
}
/* Engine.check_op: a kernel's op field is nil or the id of a defined string. */
static inline int op_defined_i64(const Core *c, int64_t v) {
    return v >= 0 && (uint64_t)v < c->L.max_id && string_defined(c, (uint64_t)v);
}
static inline int check_op(Core *c, const field_t *f) {
    if (f->t == F_NIL || (f->t == F_INT && f->v >= 0 && f->v < (i128)c->L.max_id && string_defined(c, (uint64_t)f->v)))
        return 0;
    return fail(c, E_OP, 2);
}

/* ------------------------------------------------------------------ events */

static int event_id(Core *c, const field_t *f, uint64_t *e) {
    if (f->t != F_INT || f->v < 0 || f->v > (i128)UINT64_MAX) return fail(c, E_EVENT, 1);
    *e = (uint64_t)f->v;
    return 0;
}

static snap_t *snapshot(Core *c, uint64_t e) {
    uint64_t i;
    return map_get(&c->evmap, e, &i) ? &c->snaps[i] : NULL;
}

/* recorded[e] = copy of `src` (n entries; NULL: {}) */
static int set_snapshot(Core *c, uint64_t e, const int64_t *src, uint32_t n) {
    snap_t *s = snapshot(c, e);
    if (!s) {
        uint64_t i;
        if (c->nfree_snaps) i = c->free_snaps[--c->nfree_snaps];
        else {
            if (c->nsnaps == c->snapcap) {
                size_t cap = c->snapcap ? c->snapcap * 2 : 16;
                snap_t *p = realloc(c->snaps, cap * sizeof(snap_t));
                if (!p) return oom(c);
                c->snaps = p; c->snapcap = cap;
            }
            i = c->nsnaps++;
        }
        c->snaps[i].v = NULL; c->snaps[i].n = 0;
        if (map_put(&c->evmap, e, i)) return oom(c);
        s = &c->snaps[i];
    }
    if (n > s->n || !s->v) {
        int64_t *v = realloc(s->v, (n ? n : 1) * sizeof(int64_t));
        if (!v) return oom(c);
        s->v = v;
    }
    if (n) memcpy(s->v, src, n * sizeof(int64_t));
    s->n = n;
    return 0;
}

static int event_deleted_(Core *c, uint64_t e) {
    uint64_t i;
    if (!map_get(&c->evmap, e, &i)) return 0;
    map_del(&c->evmap, e);
    free(c->snaps[i].v);
    c->snaps[i].v = NULL; c->snaps[i].n = 0;
    if (c->nfree_snaps == c->free_snapcap) {
        size_t cap = c->free_snapcap ? c->free_snapcap * 2 : 16;
        uint32_t *p = realloc(c->free_snaps, cap * sizeof(uint32_t));
        if (!p) return oom(c);
        c->free_snaps = p; c->free_snapcap = cap;
    }
    c->free_snaps[c->nfree_snaps++] = (uint32_t)i;
    return 0;
}

static void merge_all(Core *c, const int64_t *src, uint32_t n) {
    for (uint32_t s = 0; s < c->nslots; s++) merge(c->cur[s], src, n);
    merge(c->host, src, n);
}

/* ------------------------------------------------------------------ findings */

/* The key of a distinct finding: the Python engine's (kind, both accesses, allocation stack). */
static uint64_t fkey_hash(int kind, const acc_t *a, const acc_t *p, int32_t bstack) {
    uint64_t h = (uint64_t)kind ^ ((uint64_t)(uint32_t)bstack << 16);
    h = mix(h ^ ((uint64_t)(uint32_t)a->stream << 8) ^ ((uint64_t)(uint32_t)a->op << 32));
    h = mix(h ^ (uint64_t)(uint32_t)a->stack ^ ((uint64_t)a->write << 40));
    h = mix(h ^ ((uint64_t)(uint32_t)p->stream << 8) ^ ((uint64_t)(uint32_t)p->op << 32));
    h = mix(h ^ (uint64_t)(uint32_t)p->stack ^ ((uint64_t)p->write << 40));
    return h;
}

static int fkey_eq(const finding_t *f, int kind, const acc_t *a, const acc_t *p, int32_t bstack) {
    return f->kind == kind && f->bstack == bstack && f->acc.stream == a->stream && f->acc.op == a->op && f->acc.stack == a->stack &&
           f->acc.write == a->write && f->prev.stream == p->stream && f->prev.op == p->op &&
           f->prev.stack == p->stack && f->prev.write == p->write;
}

static int occ_add(Core *c, finding_t *f, const acc_t *acc, const acc_t *earlier, const block_t *b) {
    uint64_t addr = b->ptr;
    f->count++;
    /* (a pending free is reported when judged: after later findings, with its own seq) */
    if (acc->seq < f->first) f->first = acc->seq;
    if (acc->seq > f->last) f->last = acc->seq;
    f->merged |= f->kind == K_DATA_RACE && (b->capped || b->hulled);
    if ((long)f->naddr < c->L.max_addresses) {
        int seen = 0;
        for (uint32_t i = 0; i < f->naddr; i++) if (f->addrs[i] == addr) { seen = 1; break; }
        if (!seen) f->addrs[f->naddr++] = addr;
    }
    if ((long)f->nocc < c->L.max_occurrences) {
        if (f->nocc == f->occcap) {
            uint32_t cap = f->occcap ? f->occcap * 2 : 4;
            if ((long)cap > c->L.max_occurrences) cap = (uint32_t)c->L.max_occurrences;
            occ_t *o = realloc(f->occ, cap * sizeof(occ_t));
            if (!o) return oom(c);
            f->occ = o; f->occcap = cap;
        }
        occ_t o = {acc->seq, earlier->seq, addr, acc->off, acc->n, earlier->off, earlier->n,
                   (uint8_t)((acc->ranged ? 1 : 0) | (earlier->ranged ? 2 : 0))};
        f->occ[f->nocc++] = o;
    }
    return 0;
}

static int report(Core *c, int kind, const acc_t *acc, const acc_t *earlier, const block_t *b) {
    size_t mask = c->ftabcap - 1, i = fkey_hash(kind, acc, earlier, b->stack) & mask;
    for (;;) {
        int32_t fi = c->ftab[i];
        if (fi < 0) break;
        if (fkey_eq(&c->found[fi], kind, acc, earlier, b->stack)) return occ_add(c, &c->found[fi], acc, earlier, b);
        i = (i + 1) & mask;
    }
    if ((long)c->nfound >= c->L.max_findings) { c->dropped++; return 0; }
    finding_t *f = &c->found[c->nfound];
    memset(f, 0, sizeof *f);
    f->addrs = malloc(c->L.max_addresses * sizeof(uint64_t) + 1);
    if (!f->addrs) return oom(c);
    f->kind = kind; f->acc = *acc; f->prev = *earlier;
    f->bptr = b->ptr; f->bsize = b->size; f->bsize_known = b->size_known;
    f->bstream = b->stream; f->bstack = b->stack;
    f->first = f->last = acc->seq;
    c->ftab[i] = (int32_t)c->nfound++;
    return occ_add(c, f, acc, earlier, b);
}
