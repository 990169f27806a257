/* The compiled replay core, state.c: segment states (the packed forms P3/P2 and the wide list), blocks (dense and hashed, spare structs, pools) and reuse ghosts.
 *
 * Part of a unity build: _core.c includes this after streams.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ segment states (see seg_t) */

static inline int packs(const acc_t *a) {
    return (uint64_t)a->seq < (1ull << 48) && (uint32_t)a->stream <= UINT16_MAX && a->idx <= UINT16_MAX &&
           a->off <= UINT32_MAX && a->n <= UINT32_MAX;
}

static inline void pack(pacc_t *p, const acc_t *a) {
    p->seq_lo = (uint32_t)a->seq; p->seq_hi = (uint16_t)((uint64_t)a->seq >> 32); p->stream = (uint16_t)a->stream;
    p->op = a->op; p->stack = a->stack; p->idx = (uint16_t)a->idx; p->write = a->write; p->ranged = a->ranged;
    p->off = (uint32_t)a->off; p->n = (uint32_t)a->n;
}

static inline acc_t unpack(const pacc_t *p) {
    acc_t a = {(int64_t)((uint64_t)p->seq_hi << 32 | p->seq_lo), p->stream, p->op, p->stack, p->idx, p->write,
               p->ranged, p->off, p->n};
    return a;
}

/* The three-access form's entries: 168 bits in three words read and written unaligned,
 *   w0: seq (44 bits) | stream << 44 (12) | idx << 56 (6) | write << 62 | ranged << 63
 *   w1: op + 4 (24) | stack + 1 << 24 (24) | off << 48 (its low 16 bits)
 *   w2 (40 bits: bytes 16-20 of the entry): off >> 16 (12) | n << 12 (28)
 * (op >= OP_LEAK and stack >= -1: the offsets make both non-negative) */
#define P3_SEQ ((1ull << 44) - 1)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline int packs3(const acc_t *a) {
    return (uint64_t)a->seq <= P3_SEQ && (uint32_t)a->stream < (1u << 12) && a->idx < 64 &&
           (uint32_t)a->op + 4u < (1u << 24) && (uint32_t)a->stack + 1u < (1u << 24) &&
           a->off < (1ull << 28) && a->n < (1ull << 28);
}
#else
static inline int packs3(const acc_t *a) { (void)a; return 0; } /* (the layout assumes little-endian words) */
#endif
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline const uint8_t *p3(const seg_t *s, uint32_t q) { return s->raw + 1 + P3_SIZE * q; }
/* the first word of entry q: seq and stream, all a race check needs */
static inline uint64_t p3_key(const seg_t *s, uint32_t q) { return ld64(p3(s, q)); }
static inline int32_t p3_stream(uint64_t w0) { return (int32_t)(w0 >> 44 & 0xFFF); }
static inline int64_t p3_seq(uint64_t w0) { return (int64_t)(w0 & P3_SEQ); }

/* an entry of the three-access form, its first P3_SIZE bytes meant (a packs3 access) */
typedef struct { uint64_t w0, w1, w2; } p3e_t;
static inline p3e_t p3_encode(const acc_t *a) {
    p3e_t x = {(uint64_t)a->seq | (uint64_t)a->stream << 44 | (uint64_t)a->idx << 56 | (uint64_t)a->write << 62 |
                   (uint64_t)a->ranged << 63,
               (uint64_t)((uint32_t)a->op + 4u) | (uint64_t)((uint32_t)a->stack + 1u) << 24 | (a->off & 0xFFFF) << 48,
               a->off >> 16 | a->n << 12};
    return x;
}
/* Word by word: one copy of the encoding's 21 bytes read it back through loads that span two
 * of the words it was stored as, and such a load waits until every store before it has
 * reached the cache, stores into segment lines that miss it included. */
static inline void p3_put(seg_t *s, uint32_t q, const p3e_t *x) {
    uint8_t *d = s->raw + 1 + P3_SIZE * q;
    uint32_t lo = (uint32_t)x->w2;
    memcpy(d, &x->w0, 8); memcpy(d + 8, &x->w1, 8); memcpy(d + 16, &lo, 4);
    d[20] = (uint8_t)(x->w2 >> 32);
}
static inline void pack3(seg_t *s, uint32_t q, const acc_t *a) { p3e_t x = p3_encode(a); p3_put(s, q, &x); }

static inline acc_t unpack3(const seg_t *s, uint32_t q) {
    const uint8_t *e = p3(s, q);
    uint64_t w0 = ld64(e), w1 = ld64(e + 8), w2 = 0;
    memcpy(&w2, e + 16, 5);
    acc_t a = {p3_seq(w0), p3_stream(w0), (int32_t)(w1 & 0xFFFFFF) - 4, (int32_t)(w1 >> 24 & 0xFFFFFF) - 1,
               (uint32_t)(w0 >> 56 & 63), (uint8_t)(w0 >> 62 & 1), (uint8_t)(w0 >> 63), w1 >> 48 | (w2 & 0xFFF) << 16,
               w2 >> 12};
    return a;
}

static inline void seg_init(seg_t *s) { s->hdr = FORM_THREE << 4; }
/* Wide storage of 4, 8 or 16 accesses comes from and goes back to spare lists: in a trace
 * whose parts are read by many streams between writes, states of those parts went wide and
 * back at every access, a malloc and a free each time. (Process-wide, at most about 1.5 MiB
 * kept: the core runs under the GIL.) */
#define WIDE_SPARE_CLASSES 3
#define WIDE_SPARE_MAX 1024
static wide_t *wide_spare[WIDE_SPARE_CLASSES][WIDE_SPARE_MAX];
static uint32_t nwide_spare[WIDE_SPARE_CLASSES];
static inline uint32_t wide_class(size_t cap) { return cap == 4 ? 0 : cap == 8 ? 1 : cap == 16 ? 2 : WIDE_SPARE_CLASSES; }
static wide_t *wide_alloc(size_t cap) {
    uint32_t k = wide_class(cap);
    if (k < WIDE_SPARE_CLASSES && nwide_spare[k]) return wide_spare[k][--nwide_spare[k]];
    wide_t *x = malloc(sizeof(wide_t) + cap * sizeof(acc_t));
    if (x) x->cap = (uint32_t)cap;
    return x;
}
static void wide_free(wide_t *x) {
#ifdef __SANITIZE_ADDRESS__
    free(x); /* (so that AddressSanitizer sees every use after a free) */
    return;
#endif
    uint32_t k = wide_class(x->cap);
    if (k < WIDE_SPARE_CLASSES && nwide_spare[k] < WIDE_SPARE_MAX) wide_spare[k][nwide_spare[k]++] = x;
    else free(x);
}
static inline void seg_clear(seg_t *s) { if (SEG_FORM(s) == FORM_WIDE) wide_free(s->wide.w); seg_init(s); }
static inline uint32_t seg_nw(const seg_t *s) { return SEG_FORM(s) == FORM_WIDE ? s->wide.w->nw : s->hdr & 3u; }
static inline uint32_t seg_nr(const seg_t *s) { return SEG_FORM(s) == FORM_WIDE ? s->wide.w->nr : s->hdr >> 2 & 3u; }
static inline void seg_counts(seg_t *s, int form, uint32_t nw, uint32_t nr) { s->hdr = (uint8_t)(form << 4 | nr << 2 | nw); }

/* the q-th access of the state (writes first, then reads) */
static inline acc_t seg_get(const seg_t *s, uint32_t q) {
    switch (SEG_FORM(s)) {
    case FORM_THREE: return unpack3(s, q);
    case FORM_TWO: return unpack(&s->two.in[q]);
    default: return s->wide.w->items[q];
    }
}

/* the inline form that holds these accesses (FORM_WIDE: none) */
static int inline_form(const acc_t *w, uint32_t nw, const acc_t *r, uint32_t nr) {
    size_t n = (size_t)nw + nr;
    if (n > 3) return FORM_WIDE;
    int three = 1, two = n <= 2;
    for (uint32_t q = 0; q < nw; q++) { three &= packs3(&w[q]); two &= packs(&w[q]); }
    for (uint32_t q = 0; q < nr; q++) { three &= packs3(&r[q]); two &= packs(&r[q]); }
    return three ? FORM_THREE : two ? FORM_TWO : FORM_WIDE;
}

/* s's state := writes w[0, nw), reads r[0, nr) (neither in s's own storage) */
static int seg_assign(seg_t *s, const acc_t *w, uint32_t nw, const acc_t *r, uint32_t nr) {
    int form = inline_form(w, nw, r, nr);
    if (form != FORM_WIDE) {
        seg_clear(s);
        for (uint32_t q = 0; q < nw + nr; q++) {
            const acc_t *a = q < nw ? &w[q] : &r[q - nw];
            if (form == FORM_THREE) pack3(s, q, a); else pack(&s->two.in[q], a);
        }
        seg_counts(s, form, nw, nr);
        return 0;
    }
    size_t n = (size_t)nw + nr;
    int wide = SEG_FORM(s) == FORM_WIDE;
    if (!wide || s->wide.w->cap < n) { /* wide storage, grown by doubling */
        size_t cap = wide ? s->wide.w->cap : 4;
        while (cap < n) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        wide_t *x = wide_alloc(cap);
        if (!x) return -1;
        seg_clear(s);
        s->hdr = FORM_WIDE << 4; s->wide.w = x;
    }
    wide_t *x = s->wide.w;
    if (nw) memcpy(x->items, w, nw * sizeof(acc_t));
    if (nr) memcpy(x->items + nw, r, nr * sizeof(acc_t));
    x->nw = nw; x->nr = nr;
    return 0;
}

/* room for n accesses in the core's scratch list (never NULL on success, even for n == 0) */
static acc_t *seg_scratch(Core *c, size_t n) {
    if (n > c->ascap || !c->ascr) {
        size_t cap = c->ascap ? c->ascap : 16;
        while (cap < n) cap *= 2;
        acc_t *p = realloc(c->ascr, cap * sizeof(acc_t));
        if (!p) { oom(c); return NULL; }
        c->ascr = p; c->ascap = cap;
    }
    return c->ascr;
}

/* the state whole, in to[0, nw + nr) */
static void seg_unpack(const seg_t *s, acc_t *to) {
    uint32_t n = seg_nw(s) + seg_nr(s);
    if (SEG_FORM(s) == FORM_WIDE) memcpy(to, s->wide.w->items, (size_t)n * sizeof(acc_t));
    else for (uint32_t q = 0; q < n; q++) to[q] = seg_get(s, q);
}

/* a copy of `from` into the empty dst */
static int seg_copy(seg_t *dst, const seg_t *from) {
    if (SEG_FORM(from) != FORM_WIDE) { *dst = *from; return 0; }
    const wide_t *x = from->wide.w;
    seg_init(dst);
    return seg_assign(dst, x->items, x->nw, x->items + x->nw, x->nr);
}

/* writes = {a.stream: a}, reads = {} */
static int seg_write(seg_t *s, const acc_t *a) {
    seg_clear(s);
    if (packs3(a)) { pack3(s, 0, a); seg_counts(s, FORM_THREE, 1, 0); return 0; }
    if (packs(a)) { pack(&s->two.in[0], a); seg_counts(s, FORM_TWO, 1, 0); return 0; }
    return seg_assign(s, a, 1, NULL, 0);
}

/* latest(table, key, a) on a list: keep the newer by seq */
static inline void acc_latest(acc_t *v, uint32_t *n, const acc_t *a) {
    for (uint32_t q = 0; q < *n; q++)
        if (v[q].stream == a->stream) { if (v[q].seq < a->seq) v[q] = *a; return; }
    v[(*n)++] = *a;
}

/* reads[a.stream] = a (in place when the form allows it, else through the scratch list) */
static int seg_set_read(Core *c, seg_t *s, const acc_t *a) {
    uint32_t nw = seg_nw(s), nr = seg_nr(s);
    switch (SEG_FORM(s)) {
    case FORM_THREE:
        if (!packs3(a)) break;
        for (uint32_t q = nw; q < nw + nr; q++)
            if (p3_stream(p3_key(s, q)) == a->stream) { pack3(s, q, a); return 0; }
        if (nw + nr < 3) { pack3(s, nw + nr, a); seg_counts(s, FORM_THREE, nw, nr + 1); return 0; }
        break;
    case FORM_TWO:
        if (!packs(a)) break;
        for (uint32_t q = nw; q < nw + nr; q++)
            if (s->two.in[q].stream == a->stream) { pack(&s->two.in[q], a); return 0; }
        if (nw + nr < 2) { pack(&s->two.in[nw + nr], a); seg_counts(s, FORM_TWO, nw, nr + 1); return 0; }
        break;
    default: {
        wide_t *x = s->wide.w;
        for (uint32_t q = nw; q < nw + nr; q++) if (x->items[q].stream == a->stream) { x->items[q] = *a; return 0; }
        if (nw + nr < x->cap) { x->items[nw + nr] = *a; x->nr++; return 0; }
    }
    }
    acc_t *t = seg_scratch(c, (size_t)nw + nr + 1);
    if (!t) return -1;
    seg_unpack(s, t);
    uint32_t q = nw;
    while (q < nw + nr && t[q].stream != a->stream) q++;
    t[q] = *a;
    if (q == nw + nr) nr++;
    if (seg_assign(s, t, nw, t + nw, nr)) return oom(c);
    return 0;
}

/* ------------------------------------------------------------------ blocks */

static void grid_clear(block_t *b);

/* the block's own allocations (not the struct) */
static void block_clear(Core *c, block_t *b) {
    av_clear(&b->reads);
    av_clear(&b->uses);
    if (b->gbits) grid_clear(b);
    else for (uint32_t i = 0; i < b->nseg; i++) seg_clear(&b->segs[i]);
    pool_free(&c->arena, b->segs, b->segcap);
    free(b->keys); free(b->ends); /* and ord */
    if (b->own) free(grid_base(b));
    free(b->recorded);
    free(b->ghosts);
    free(b->views);
}

static void block_free(Core *c, block_t *b) { block_clear(c, b); free(b); }

/* Freed block structs kept for the next allocations (a trace allocates and frees all the
 * time): at most this many, so memory stays bounded by the live blocks plus a constant. */
#define SPARE_BLOCKS 1024

static void block_release(Core *c, block_t *b) {
    c->poolbytes -= (size_t)b->segcap * sizeof(seg_t);
    block_clear(c, b);
    if (c->nspare < SPARE_BLOCKS) { *(block_t **)b = c->spare; c->spare = b; c->nspare++; }
    else free(b);
}

/* Live blocks: ids below DENSE_IDS are in bdense only, the others in the blocks map only. */
static void drop_block(Core *c, block_t *b) {
    if (b->bid < DENSE_IDS) c->bdense[b->bid] = NULL;
    else map_del(&c->blocks, b->bid);
    c->nlive--;
    uint64_t v;
    if (map_get(&c->live_ptr, b->ptr, &v) && v == b->bid) map_del(&c->live_ptr, b->ptr);
    if (b->from_def) map_put(&c->stale, b->bid, b->defn_gen);
    block_release(c, b);
}

static block_t *find_block(Core *c, uint64_t bid) {
    uint64_t v;
    if (bid < DENSE_IDS) return bid < c->bdensecap ? c->bdense[bid] : NULL;
    return map_get(&c->blocks, bid, &v) ? (block_t *)(uintptr_t)v : NULL;
}

static int flush(Core *c);

static block_t *new_block(Core *c, uint32_t bid, uint64_t ptr, uint64_t size, int size_known, int32_t stream,
                          int32_t stack, int from_def, uint64_t gen) {
    block_t *old = find_block(c, bid);
    uint64_t other;
    if (c->npend) { /* a block about to go has its queued accesses applied first */
        block_t *o = map_get(&c->live_ptr, ptr, &other) ? find_block(c, other) : NULL;
        if (((old && old->pending) || (o && o->pending)) && flush(c)) return NULL;
    }
    if (old) drop_block(c, old);
    if (map_get(&c->live_ptr, ptr, &other)) {
        block_t *o = find_block(c, other);
        if (o) drop_block(c, o);
    }
    block_t *b = c->spare;
    if (b) { c->spare = *(block_t **)b; c->nspare--; }
    else if (!(b = aligned_alloc(64, (sizeof(block_t) + 63) & ~(size_t)63))) return NULL; /* (its lines: see block_t) */
    /* every field, but not the storage of empty lists (a calloc's memset is a cost per allocation) */
    b->bid = bid; b->ptr = ptr; b->size = size; b->size_known = (uint8_t)size_known;
    b->stream = stream; b->stack = stack; b->from_def = (uint8_t)from_def; b->defn_gen = gen;
    b->has_write = 0; b->capped = b->hulled = 0; b->nfs = 0; b->pending = 0;
    av_init(&b->reads); av_init(&b->uses);
    b->segs = NULL; b->nseg = b->segcap = 0; b->keys = NULL; b->ends = NULL; b->ord = NULL;
    b->own = NULL; b->ncells = 0; b->gbits = 0;
    b->recorded = NULL; b->nrec = b->reccap = 0;
    b->ghosts = NULL; b->ng = 0;
    b->views = NULL; b->nviews = 0;
    if ((bid >= DENSE_IDS && map_put(&c->blocks, bid, (uint64_t)(uintptr_t)b)) || map_put(&c->live_ptr, ptr, bid)) {
        if (bid >= DENSE_IDS) map_del(&c->blocks, bid);
        block_free(c, b);
        return NULL;
    }
    if (bid < DENSE_IDS) {
        if (bid >= c->bdensecap) {
            uint32_t cap = c->bdensecap ? c->bdensecap : 64;
            while (cap <= bid) cap *= 2;
            block_t **d = realloc(c->bdense, cap * sizeof(block_t *));
            if (!d) { map_del(&c->live_ptr, ptr); block_free(c, b); return NULL; }
            for (uint32_t k = c->bdensecap; k < cap; k++) d[k] = NULL;
            c->bdense = d; c->bdensecap = cap;
        }
        c->bdense[bid] = b;
    }
    c->nlive++;
    return b;
}

/* Python's Engine.block: the live block `bid` (from field fi), made from its BLOCK_DEF if needed. */
static block_t *block_slow(Core *c, i128 bid, int fi);
/* the live block of a non-negative id below DENSE_IDS, or NULL (then block_slow decides) */
static inline block_t *block_dense(const Core *c, uint64_t id) {
    return id < c->bdensecap && id < c->L.max_id ? c->bdense[id] : NULL;
}
static inline block_t *block(Core *c, i128 bid, int fi) {
    block_t *b = bid >= 0 && bid < (i128)c->bdensecap ? block_dense(c, (uint64_t)bid) : NULL;
    return b ? b : block_slow(c, bid, fi);
}

static block_t *block_slow(Core *c, i128 bid, int fi) {
    if (bid < 0 || bid >= (i128)c->L.max_id) { fail(c, E_BLOCK_UNDEFINED, fi); return NULL; }
    block_t *b = find_block(c, (uint64_t)bid);
    if (b) return b;
    uint64_t di, sg;
    if (!map_get(&c->defs, (uint64_t)bid, &di)) { fail(c, E_BLOCK_UNDEFINED, fi); return NULL; }
    bdef_t *d = &c->bdefs[di];
    if (map_get(&c->stale, (uint64_t)bid, &sg) && sg == d->gen) { fail(c, E_BLOCK_UNDEFINED, fi); return NULL; }
    if (!d->valid) { fail(c, E_MALFORMED_BLOCK, fi); return NULL; }
    b = new_block(c, (uint32_t)bid, d->ptr, d->size, d->size_known, -1, -1, 1, d->gen);
    if (!b) oom(c);
    return b;
}

static inline int overlaps(uint64_t p1, uint64_t n1, int k1, uint64_t p2, uint64_t n2, int k2) {
    if (!k1 && !k2) return p1 == p2;
    if (!k1) return p2 <= p1 && (u128)p1 < (u128)p2 + n2;
    if (!k2) return p1 <= p2 && (u128)p2 < (u128)p1 + n1;
    return (u128)p1 < (u128)p2 + n2 && (u128)p2 < (u128)p1 + n1;
}

/* ------------------------------------------------------------------ reuse ghosts */

static ghost_t *ring_at(Core *c, long i) { return &c->ring[(c->ghead + i) % c->L.max_ghosts]; }

static void prune_ghosts(Core *c) {
    long keep = 0;
    for (long i = 0; i < c->gcount; i++) {
        ghost_t g = *ring_at(c, i);
        if (!ordered_everywhere(c, &g.use)) *ring_at(c, keep++) = g;
    }
    c->gcount = keep;
    c->gsince = 0;
}

static void add_ghost(Core *c, const block_t *b, const acc_t *use) {
    if (c->gcount >= c->L.max_ghosts) {
        if (c->gsince >= c->L.max_ghosts / 2) prune_ghosts(c);
        if (c->gcount >= c->L.max_ghosts) { c->ghead = (c->ghead + 1) % c->L.max_ghosts; c->gcount--; }
    }
    ghost_t *g = ring_at(c, c->gcount++);
    g->ptr = b->ptr; g->size = b->size; g->size_known = b->size_known; g->use = *use;
    c->gsince++;
}

static int attach_ghosts(Core *c, block_t *b) {
    long n = 0;
    for (long i = 0; i < c->gcount; i++) {
        ghost_t *g = ring_at(c, i);
        if (overlaps(g->ptr, g->size, g->size_known, b->ptr, b->size, b->size_known) && !ordered_everywhere(c, &g->use))
            c->gscratch[n++] = *g;
    }
    if (!n) return 0;
    long from = n > c->L.max_block_ghosts ? n - c->L.max_block_ghosts : 0;
    b->ghosts = malloc((n - from) * sizeof(ghost_t));
    if (!b->ghosts) return oom(c);
    memcpy(b->ghosts, c->gscratch + from, (n - from) * sizeof(ghost_t));
    b->ng = (uint32_t)(n - from);
    return 0;
}

/* engine._touched: the bytes [*lo, *hi) an access touched of a block at ptr (INF128: a
 * whole-block access to a block of unknown size, any byte from its base up); in 128 bits,
 * as a range of a hand-made trace can pass 2^64 */
static void touched(uint64_t ptr, uint64_t size, int size_known, const acc_t *a, u128 *lo, u128 *hi) {
    if (a->ranged) { *lo = (u128)ptr + a->off; *hi = *lo + a->n; return; }
    *lo = ptr; *hi = size_known ? (u128)ptr + size : INF128;
}

/* engine.ghost_meets: do the old use's bytes and the access's share one? */
static int ghost_meets(const ghost_t *g, const block_t *b, const acc_t *acc) {
    u128 lo1, hi1, lo2, hi2;
    touched(g->ptr, g->size, g->size_known, &g->use, &lo1, &hi1);
    touched(b->ptr, b->size, b->size_known, acc, &lo2, &hi2);
    return lo1 < hi2 && lo2 < hi1;
}

static int check_ghosts(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc) {
    uint32_t keep = 0;
    for (uint32_t i = 0; i < b->ng; i++) {
        ghost_t g = b->ghosts[i];
        if (g.use.stream != S && !ordered(vec, &g.use) && ghost_meets(&g, b, acc)) {
            if (report(c, K_REUSE, acc, &g.use, b)) return -1;
        } else if (!ordered_everywhere(c, &g.use)) {
            b->ghosts[keep++] = g;
        }
    }
    b->ng = keep;
    return 0;
}

/* engine.Engine.check_free: pending (a free) leaves each use not ordered pending and a
 * reuse ghost; otherwise (the leak check at the end) it is reported at once. */
static int check_free(Core *c, block_t *b, const acc_t *free_acc, int pending) {
    const int64_t *avec = c->cur[b->stream];
    acc_t *uses = av_items(&b->uses);
    for (uint32_t i = 0; i < b->uses.n; i++) {
        acc_t *use = &uses[i];
        int rec = 0;
        for (uint32_t k = 0; k < b->nrec; k++) if (b->recorded[k] == use->stream) { rec = 1; break; }
        if (rec || ordered(avec, use)) continue;
        if (!pending) {
            if (report(c, K_MISSING, free_acc, use, b)) return -1;
            continue;
        }
        if ((uint32_t)b->stream >= c->npfl) { /* (a list per slot, grown with the slots) */
            uint32_t n = c->scap;
            pflist_t *l = realloc(c->pfl, n * sizeof(pflist_t));
            if (!l) return oom(c);
            memset(l + c->npfl, 0, (n - c->npfl) * sizeof(pflist_t));
            c->pfl = l; c->npfl = n;
        }
        pflist_t *L = &c->pfl[b->stream];
        if (L->n == L->cap) {
            uint32_t cap = L->cap ? L->cap * 2 : 4;
            pfree_t *v = realloc(L->v, cap * sizeof(pfree_t));
            if (!v) return oom(c);
            L->v = v; L->cap = cap;
        }
        pfree_t *p = &L->v[L->n++];
        p->free = *free_acc; p->use = *use; p->order = c->pfcount++;
        p->ptr = b->ptr; p->size = b->size; p->size_known = b->size_known; p->stream = b->stream; p->stack = b->stack;
        c->pfpending++;
        add_ghost(c, b, use);
    }
    return 0;
}

/* engine.Engine.judge, for one pending free: a missing record_stream unless the allocation
 * stream (its state vec) has waited for the use by now */
static int judge_one(Core *c, const pfree_t *p, const int64_t *vec) {
    if (ordered(vec, &p->use)) return 0;
    block_t t; /* what report reads of a block */
    memset(&t, 0, sizeof t);
    t.ptr = p->ptr; t.size = p->size; t.size_known = p->size_known; t.stream = p->stream; t.stack = p->stack;
    return report(c, K_MISSING, &p->free, &p->use, &t);
}

/* The allocation stream S allocates: its pending frees are judged and forgotten. */
static int judge_stream(Core *c, int32_t S) {
    if ((uint32_t)S >= c->npfl || !c->pfl[S].n) return 0;
    pflist_t *L = &c->pfl[S];
    uint32_t n = L->n;
    L->n = 0;
    c->pfpending -= n;
    for (uint32_t i = 0; i < n; i++) if (judge_one(c, &L->v[i], c->cur[S])) return -1;
    return 0;
}

static int cmp_order(const void *a, const void *b) {
    uint64_t x = (*(pfree_t *const *)a)->order, y = (*(pfree_t *const *)b)->order;
    return x < y ? -1 : x > y;
}

/* engine.Engine.judge_at_end: every pending free, in the order found, against its
 * allocation stream's state at the end of the trace. */
static int judge_at_end(Core *c) {
    if (!c->pfpending) return 0;
    pfree_t **all = malloc(c->pfpending * sizeof(pfree_t *));
    if (!all) return oom(c);
    size_t k = 0;
    for (uint32_t s = 0; s < c->npfl; s++)
        for (uint32_t i = 0; i < c->pfl[s].n; i++) all[k++] = &c->pfl[s].v[i];
    qsort(all, k, sizeof(pfree_t *), cmp_order);
    int rc = 0;
    for (size_t i = 0; i < k && !rc; i++) rc = judge_one(c, all[i], c->cur[all[i]->stream]);
    free(all);
    for (uint32_t s = 0; s < c->npfl; s++) c->pfl[s].n = 0;
    c->pfpending = 0;
    return rc;
}
