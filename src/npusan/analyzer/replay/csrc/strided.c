/* The compiled replay core, strided.c: strided accesses (Engine.strided_access) and VIEWS records.
 *
 * Part of a unity build: _core.c includes this after queue.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ strided accesses (Engine.strided_access ...) */

/* the race rules of one piece of contiguous state, which a strided access does not change:
 * a whole block's (one_write: its write or NULL) */
static int check_piece(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc,
                       const acc_t *one_write, accv_t *reads) {
    if (acc->write && reads->n) {
        acc_t *r = av_items(reads);
        for (uint32_t q = 0; q < reads->n; q++) if (check_earlier(c, b, S, vec, acc, &r[q])) return -1;
        return 0;
    }
    if (one_write) return check_earlier(c, b, S, vec, acc, one_write);
    return 0;
}

/* ... and a segment's */
static int check_piece_seg(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, seg_t *sg) {
    uint32_t nw = seg_nw(sg), nr = seg_nr(sg);
    if (acc->write && nr) return check_seg(c, b, S, vec, acc, sg, nw, nw + nr);
    return check_seg(c, b, S, vec, acc, sg, 0, nw);
}

/* any access against the block's strided entries: report, then drop the redundant ones */
static int views_meet(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const shape_t *shape) {
    for (uint32_t k = 0; k < b->nviews; k++) {
        vent_t *e = &b->views[k];
        if (e->acc.stream == S || ordered(vec, &e->acc)) continue;
        if (!acc->write && !e->acc.write) continue; /* read after read */
        if (!shape || voverlaps(c, shape, &e->shape))
            if (check_earlier(c, b, S, vec, acc, &e->acc)) return -1;
    }
    uint32_t keep = 0;
    for (uint32_t k = 0; k < b->nviews; k++) {
        vent_t *e = &b->views[k];
        if ((acc->write || (e->acc.stream == S && !e->acc.write)) && vcovers(c, shape, &e->shape)) continue;
        if (keep != k) b->views[keep] = *e;
        keep++;
    }
    b->nviews = keep;
    return 0;
}

/* latest(reads, a.stream, a): a becomes the segment's read of its stream unless that read
 * is newer */
static int seg_read_latest(Core *c, seg_t *s, const acc_t *a) {
    uint32_t nw = seg_nw(s), nr = seg_nr(s);
    for (uint32_t q = nw; q < nw + nr; q++) {
        acc_t o = seg_get(s, q);
        if (o.stream == a->stream) return o.seq < a->seq ? seg_set_read(c, s, a) : 0;
    }
    return seg_set_read(c, s, a);
}

/* merge a strided entry into the segments over its hull, conservatively */
static int demote(Core *c, block_t *b, const vent_t *e) {
    int32_t P = e->acc.stream;
    if (!b->hulled) { b->hulled = 1; c->hulled++; }
    if (b->gbits && ungrid(c, b)) return -1;
    if (!b->nseg && to_segments(c, b)) return -1;
    u128 end = seg_hi(b, b->nseg - 1), lo = (u128)e->shape.lo, hi = (u128)shape_hi(&e->shape);
    if (hi > end && (seg_reserve(c, b) || seg_insert(c, b, b->nseg, hi, NULL))) return -1;
    uint32_t i, j;
    if (split(c, b, lo, hi, &i, &j)) return -1;
    for (uint32_t k = i; k < j; k++) {
        seg_t *sg = SEG(b, k);
        uint32_t nw = seg_nw(sg), nr = seg_nr(sg);
        acc_t *t = seg_scratch(c, 2 * ((size_t)nw + nr + 1)); /* the state, then its new writes */
        if (!t) return -1;
        seg_unpack(sg, t);
        if (e->acc.write) {
            int newer = 0;
            for (uint32_t q = 0; q < nw; q++) if (t[q].stream == P && t[q].seq >= e->acc.seq) newer = 1;
            if (!newer) { /* writes = {the others..., P: e} */
                acc_t *w = t + nw + nr;
                uint32_t n = 0;
                for (uint32_t q = 0; q < nw; q++) if (t[q].stream != P) w[n++] = t[q];
                w[n++] = e->acc;
                memcpy(w + n, t + nw, nr * sizeof(acc_t));
                if (seg_assign(sg, w, n, w + n, nr)) return oom(c);
            }
        }
        if (seg_read_latest(c, sg, &e->acc)) return -1;
        /* the writes join the reads too (engine.py's demote: the entry must not hide them) */
        nw = seg_nw(sg);
        for (uint32_t w = 0; w < nw; w++) {
            acc_t a = seg_get(sg, w);
            if (seg_read_latest(c, sg, &a)) return -1;
        }
    }
    return coalesce(c, b, i > 0 ? i - 1 : 0, j + 1 < b->nseg ? j + 1 : b->nseg);
}

static int strided_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const shape_t *shape) {
    c->nrep = 0;
    if (b->gbits && ungrid(c, b)) return -1; /* (strided entries make a block leave the grid form) */
    if (!b->nseg) {
        if (check_piece(c, b, S, vec, acc, b->has_write ? &b->write : NULL, &b->reads)) return -1;
    } else {
        u128 lo = (u128)shape->lo, hi = (u128)shape_hi(shape);
        for (uint32_t k = 0; k < b->nseg; k++) {
            seg_t *sg = SEG(b, k);
            u128 slo = seg_lo(b, k), shi = seg_hi(b, k);
            if (shi <= lo) continue;
            if (slo >= hi) break;
            if (voverlaps_range(c, shape, slo, shi) &&
                check_piece_seg(c, b, S, vec, acc, sg)) return -1;
        }
    }
    if (b->nviews && views_meet(c, b, S, vec, acc, shape)) return -1;
    vent_t *v = realloc(b->views, (b->nviews + 1) * sizeof(vent_t));
    if (!v) return oom(c);
    b->views = v;
    b->views[b->nviews].acc = *acc;
    b->views[b->nviews].shape = *shape;
    b->nviews++;
    if ((long)b->nviews > c->max_views) {
        vent_t oldest = b->views[0];
        memmove(&b->views[0], &b->views[1], (b->nviews - 1) * sizeof(vent_t));
        b->nviews--;
        if (demote(c, b, &oldest)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ VIEWS records */

static uint64_t pv_hash(i128 a, uint64_t off, uint64_t nb) {
    return mix((uint64_t)a ^ mix(off ^ mix(nb ^ (uint64_t)((u128)a >> 64))));
}

static pview_t *pv_find(Core *c, i128 a, uint64_t off, uint64_t nb) {
    const pvset_t *ps = &c->pv[c->pvcur];
    if (!ps->tabcap) return NULL;
    size_t mask = ps->tabcap - 1, i = pv_hash(a, off, nb) & mask;
    for (;;) {
        int32_t k = ps->tab[i];
        if (k < 0) return NULL;
        pview_t *p = &ps->v[k];
        if (p->a == a && p->off == off && p->nb == nb) return p;
        i = (i + 1) & mask;
    }
}

/* parse_entry's checks; 0 valid, -1 malformed */
static int view_entry(const field_t *f, uint64_t n, pview_t *pv) {
    if (n < 3 || f[0].t != F_INT || f[1].t != F_INT || f[2].t != F_INT) return -1;
    if (f[1].v < 0 || f[1].v > (i128)UINT64_MAX || f[2].v < 1 || f[2].v > (i128)UINT64_MAX) return -1;
    pv->a = f[0].v; pv->off = (uint64_t)f[1].v; pv->nb = (uint64_t)f[2].v; pv->has_shape = 0;
    if (n == 3) return 0;
    uint64_t k = n - 4;
    if (k % 2 || k < 2 || k > 2 * MAX_DIMS) return -1;
    if (f[3].t != F_INT || f[3].v < 1 || f[3].v > (i128)pv->nb) return -1;
    u128 span = (u128)f[3].v;
    shape_t *sh = &pv->shape;
    sh->lo = (i128)pv->off; sh->run = f[3].v; sh->nd = 0;
    for (uint64_t i = 4; i < n; i += 2) {
        const field_t *fn = &f[i], *fs = &f[i + 1];
        if (fn->t != F_INT || fs->t != F_INT || fn->v < 2 || fn->v > (i128)UINT64_MAX || fs->v < 1 ||
            fs->v > (i128)UINT64_MAX) return -1;
        u128 m = (u128)(fn->v - 1), st = (u128)fs->v;
        if (m > ((u128)pv->nb) / st) return -1; /* the span passes nbytes */
        span += m * st;
        if (span > pv->nb) return -1;
        sh->n[sh->nd] = fn->v; sh->s[sh->nd] = fs->v; sh->nd++;
    }
    if (span != pv->nb) return -1;
    pv->has_shape = 1;
    return 0;
}

/* a VIEWS record's entries, read at *pp (n of them) into the spare table; it becomes the
 * pending one (for the next kernel) only once the whole record is read and valid */
static int read_views(Core *c, const limits_t *L, const uint8_t **pp, const uint8_t *end, uint64_t n, int *bad) {
    field_t f[4 + 2 * MAX_DIMS];
    pvset_t *ps = &c->pv[1 - c->pvcur];
    ps->n = 0;
    *bad = 0;
    for (uint64_t e = 0; e < n; e++) {
        obj_t o;
        int r = read_obj(L, pp, end, &o);
        if (r) return r;
        if (o.t != O_ARR) { *bad = 1; if ((r = skip_rest(L, pp, end, &o, 2))) return r; continue; }
        uint64_t m = o.n < 4 + 2 * MAX_DIMS ? o.n : 4 + 2 * MAX_DIMS;
        for (uint64_t i = 0; i < m; i++) if ((r = read_field(L, pp, end, &f[i], 2))) return r;
        if ((r = skip_objs(L, pp, end, o.n - m, 0, 2))) return r;
        if (*bad) continue;
        if (o.n > 4 + 2 * MAX_DIMS) { *bad = 1; continue; }
        if (ps->n == ps->cap) { /* grown as entries arrive, never to a length field's claim */
            size_t cap = ps->cap ? ps->cap * 2 : 16;
            pview_t *p = realloc(ps->v, cap * sizeof(pview_t));
            if (!p) return -2;
            ps->v = p; ps->cap = cap;
        }
        if (view_entry(f, o.n, &ps->v[ps->n])) { *bad = 1; continue; }
        ps->n++;
    }
    return MP_OK;
}

/* index the spare table's entries (a triple given twice makes the record malformed: E_VIEWS);
 * on success it becomes the pending table */
static int index_views(Core *c) {
    pvset_t *ps = &c->pv[1 - c->pvcur];
    size_t cap = 16;
    while (cap < ps->n * 2) cap *= 2;
    if (cap > ps->tabcap) {
        int32_t *t = realloc(ps->tab, cap * sizeof(int32_t));
        if (!t) return oom(c);
        ps->tab = t; ps->tabcap = cap;
    }
    for (size_t i = 0; i < ps->tabcap; i++) ps->tab[i] = -1;
    size_t mask = ps->tabcap - 1;
    for (size_t k = 0; k < ps->n; k++) {
        pview_t *p = &ps->v[k];
        size_t i = pv_hash(p->a, p->off, p->nb) & mask;
        while (ps->tab[i] >= 0) {
            pview_t *q = &ps->v[ps->tab[i]];
            if (q->a == p->a && q->off == p->off && q->nb == p->nb) return fail(c, E_VIEWS, 0);
            i = (i + 1) & mask;
        }
        ps->tab[i] = (int32_t)k;
    }
    c->pvcur = 1 - c->pvcur;
    return 0;
}
