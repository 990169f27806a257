/* The compiled replay core, grid.c: the grid form of a block cut into equal power-of-two parts (block_t.own).
 *
 * Part of a unity build: _core.c includes this after rules.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ the grid form (block_t.own) */

static inline uint32_t grid_cells(const block_t *b) { return (uint32_t)(b->size >> (b->gbits - 1)); }
static inline int grid_owns(const block_t *b, uint32_t x) { return (int)(b->own[x >> 6] >> (x & 63) & 1); }
static inline uint32_t grid_cell(const block_t *b, uint64_t off) { return (uint32_t)(off >> (b->gbits - 1)); }

/* seg_access on one of a grid block's states, gwide kept (after an error too: block_clear
 * frees what the state holds) */
static inline int grid_seg(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, seg_t *s, int fast,
                           const p3e_t *x) {
    int r = seg_access(c, b, S, vec, acc, s, fast, x);
    b->gwide |= SEG_FORM(s) == FORM_WIDE;
    return r;
}

/* Is the range [off, off + n) exactly one cell of b's grid? */
static inline int grid_fits_range(const block_t *b, uint64_t off, uint64_t n) {
    uint64_t w = 1ull << (b->gbits - 1);
    return n == w && !(off & (w - 1)) && off < b->size;
}
/* Is acc exactly one cell of b's grid? */
static inline int grid_fits(const block_t *b, const acc_t *acc) { return acc->ranged && grid_fits_range(b, acc->off, acc->n); }

/* The states of a block in the grid form emptied (its cells' and its base's), own cleared. */
static void grid_clear(block_t *b) {
    uint32_t G = grid_cells(b), words = (G + 63) >> 6;
    if (!b->gwide) { /* (no state to free: the cells' lines are not read) */
        memset(b->own, 0, words * sizeof(uint64_t));
        seg_init(grid_base(b));
        return;
    }
    for (uint32_t i = 0; i < words; i++) {
        for (uint64_t m = b->own[i]; m; m &= m - 1) seg_clear(&b->segs[i * 64 + (uint32_t)__builtin_ctzll(m)]);
        b->own[i] = 0;
    }
    seg_clear(grid_base(b));
}

/* Is the first unpacked state's list of accesses the second's, in the same order? */
static int same_order(const seg_t *s, const seg_t *t) {
    uint32_t n = seg_nw(s) + seg_nr(s);
    if (seg_nw(s) != seg_nw(t) || n != seg_nw(t) + seg_nr(t)) return 0;
    for (uint32_t q = 0; q < n; q++) {
        acc_t a = seg_get(s, q), x = seg_get(t, q);
        if (!same_acc(&a, &x)) return 0;
    }
    return 1;
}

/* Leaving the grid form: the segments of the index form from the cells, each run of cells
 * with the same state one segment (the state of its first cell: as coalesce keeps). The
 * k-th segment goes into slot k <= its first cell, whose state has then been moved or
 * dropped; the base is copied where its cells start a segment. */
static int ungrid(Core *c, block_t *b) {
    uint32_t G = grid_cells(b), shift = b->gbits - 1, k = 0;
    seg_t *base = grid_base(b);
    int prev_base = 0; /* segment k - 1 is a copy of the base */
    for (uint32_t x = 0; x < G; x++) {
        int own = grid_owns(b, x);
        seg_t *s = own ? &b->segs[x] : base;
        if (k && ((!own && prev_base) || same_state(&b->segs[k - 1], s))) { /* the run goes on */
            if (own) seg_clear(s);
        } else {
            if (own) { if (k != x) b->segs[k] = *s; }
            else if (seg_copy(&b->segs[k], base)) { /* (out of memory: what was made stays, in the index form) */
                seg_clear(base);
                b->nseg = k;
                b->gbits = 0;
                return oom(c);
            }
            prev_base = !own;
            k++;
        }
        b->keys[k - 1] = ((uint64_t)(x + 1) << shift) << 16 | (k - 1);
    }
    seg_clear(base);
    memset(b->own, 0, ((G + 63) >> 6) * sizeof(uint64_t));
    b->nseg = k;
    b->gbits = 0;
    return 0;
}

/* A block leaving whole mode for acc: in the grid form when acc is one of at least two
 * equal 2^k-byte parts of a block of known size, at most the cap of segments of them (so
 * that the cap never merges in this form). 1: not in that form. */
static int grid_start(Core *c, block_t *b, const acc_t *acc) {
    uint64_t n = acc->n;
    if (!acc->ranged || !b->size_known || b->size >= NARROW_INF || !n || (n & (n - 1)) || (acc->off & (n - 1)) ||
        (b->size & (n - 1)) || acc->off >= b->size) return 1;
    uint64_t G = b->size / n, words = (G + 63) / 64;
    if (G < 2 || G >= UINT16_MAX || (long)G > c->L.max_segments) return 1;
    if (G > b->ncells) { /* (the base's line, then the words, on a line) */
        seg_t *mem = aligned_alloc(64, sizeof(seg_t) + ((words * sizeof(uint64_t) + 63) & ~(size_t)63));
        if (!mem) return oom(c);
        if (b->own) free(grid_base(b));
        b->own = (uint64_t *)(mem + 1); b->ncells = (uint32_t)(words * 64);
    }
    if (seg_room(c, b, (uint32_t)G)) return -1; /* (the cells; a narrow index for ungrid) */
    memset(b->own, 0, words * sizeof(uint64_t));
    seg_t *base = grid_base(b);
    seg_init(base);
    if (seg_assign(base, &b->write, b->has_write, av_items(&b->reads), b->reads.n)) return oom(c);
    b->has_write = 0;
    av_clear(&b->reads);
    b->gwide = SEG_FORM(base) == FORM_WIDE;
    b->nseg = 1;
    b->gbits = (uint8_t)(__builtin_ctzll(n) + 1);
    return 0;
}

/* range_index for an access of exactly one cell, in the grid form: the cell's own state
 * (a copy of the base the first time), then the access. No two neighbours can then be
 * joined (the access is in this cell's state alone) and the cap is not reached. */
static inline int grid_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc) {
    uint32_t x = grid_cell(b, acc->off);
    uint64_t *w = &b->own[x >> 6], bit = 1ull << (x & 63);
    seg_t *s = &b->segs[x];
    if (!(*w & bit)) {
        if (seg_copy(s, grid_base(b))) return oom(c);
        *w |= bit;
    }
    c->nrep = 0;
    p3e_t e = p3_encode(acc);
    return grid_seg(c, b, S, vec, acc, s, packs3(acc), &e);
}

/* After a whole-block read in the grid form (sig: each own cell's state_sig, or 0): could
 * the pass that gives equal neighbours one order change anything? Only where two
 * neighbouring cells, at least one of them with a state of its own (two cells of the base
 * share one state), have signatures that are equal or unknown (0). */
static int grid_may_reorder(const block_t *b, uint32_t G, const uint64_t *sig, uint64_t bsig) {
    for (uint32_t i = 0, words = (G + 63) >> 6; i < words; i++)
        for (uint64_t m = b->own[i]; m; m &= m - 1) {
            uint32_t x = i * 64 + (uint32_t)__builtin_ctzll(m);
            uint64_t v = sig[x], l = x && grid_owns(b, x - 1) ? sig[x - 1] : bsig; /* the left neighbour's */
            int base_right = x + 1 < G && !grid_owns(b, x + 1);
            if (!v || (x && (v == l || !l)) || (base_right && (v == bsig || !bsig))) return 1;
        }
    return 0;
}

/* range_index for a whole-block access in the grid form: every state in byte order (the
 * base once, at its first cell: the checks of its other cells could only repeat those
 * reports); a write then returns the block to whole mode. After a read, where a cell's
 * state equals the one before it (the index form joins such neighbours, keeping the
 * first's order of accesses) but lists its accesses in another order, it takes that order:
 * the checks of later accesses then meet the accesses in the same order in both forms. */
static int grid_whole(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc) {
    uint32_t G = grid_cells(b), words = (G + 63) >> 6, fb = G; /* fb: the base's first cell (G: none) */
    seg_t *base = grid_base(b);
    for (uint32_t i = 0; i < words; i++) /* (the bits from G up are clear: G itself when no cell is the base's) */
        if (~b->own[i]) { fb = i * 64 + (uint32_t)__builtin_ctzll(~b->own[i]); break; }
    int fast = packs3(acc), based = fb == G, quiet = fast && !acc->write;
    uint64_t *sig = NULL; /* (a read: each cell's state_sig after it, or 0, for the pass below) */
    if (!acc->write) {
        if (c->sigcap < G) {
            uint64_t *m = realloc(c->sigs, (size_t)G * sizeof(uint64_t));
            if (!m) return oom(c);
            c->sigs = m; c->sigcap = G;
        }
        sig = c->sigs;
    }
    p3e_t e = p3_encode(acc);
    c->nrep = 0;
    for (uint32_t x = 0; x < G && x < 16; x++) __builtin_prefetch(&b->segs[x]); /* (then 16 parts ahead) */
    for (uint32_t i = 0; i < words; i++)
        for (uint64_t m = b->own[i]; m; m &= m - 1) {
            uint32_t x = i * 64 + (uint32_t)__builtin_ctzll(m);
            if (x + 16 < G) __builtin_prefetch(&b->segs[x + 16]);
            if (b->gwide && x + 8 < G && grid_owns(b, x + 8)) { /* (its line requested 8 parts ago) */
                const seg_t *t = &b->segs[x + 8];
                if (SEG_FORM(t) == FORM_WIDE) __builtin_prefetch(t->wide.w);
            }
            if (!based && fb < x) {
                based = 1;
                if (grid_seg(c, b, S, vec, acc, base, fast, &e)) return -1;
            }
            seg_t *s = &b->segs[x];
            if (quiet && SEG_FORM(s) == FORM_THREE && (sig[x] = p3_read_quiet(s, S, vec, &e))) continue;
            if (grid_seg(c, b, S, vec, acc, s, fast, &e)) return -1;
            if (sig) sig[x] = 0;
        }
    if (!based && grid_seg(c, b, S, vec, acc, base, fast, &e)) return -1;
    if (acc->write) { to_whole(c, b, acc); return 0; }
    uint64_t bsig = state_sig(base);
    if (!grid_may_reorder(b, G, sig, bsig)) return 0;
    const seg_t *prev = grid_owns(b, 0) ? &b->segs[0] : base;
    uint64_t psig = prev == base ? bsig : sig[0];
    for (uint32_t x = 1; x < G; x++) { /* (no branch on what the states hold, until two may be equal) */
        int own = grid_owns(b, x);
        seg_t *s = own ? &b->segs[x] : base;
        uint64_t xsig = own ? sig[x] : bsig;
        if (s != prev && (xsig == psig || !xsig || !psig) && same_state(prev, s) && !same_order(prev, s)) {
            if (own) seg_clear(s);
            if (prev == base) { b->own[x >> 6] &= ~(1ull << (x & 63)); s = base; }
            else {
                s = &b->segs[x];
                if (seg_copy(s, prev)) { if (own) b->own[x >> 6] &= ~(1ull << (x & 63)); return oom(c); }
                b->own[x >> 6] |= 1ull << (x & 63); /* (prev's form: gwide already says if it is wide) */
            }
        }
        prev = s;
        psig = xsig; /* (a state made equal to prev has prev's) */
    }
    return 0;
}

/* hint: the segment the kernel's prefetch pass found for acc's first byte (NO_SEG: none),
 * checked before it is trusted (an earlier access of the same kernel may have split it).
 * (Kept out of line: inlined into kernel, it cost the whole-block path of every kernel about
 * 3% more instructions, through register pressure.) */
__attribute__((noinline)) static int range_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc,
                                                  uint32_t hint) {
    if (acc->write && !acc->ranged && b->nseg && all_before(b, S, vec)) { /* nothing to check: whole again */
        to_whole(c, b, acc);
        return 0;
    }
    if (b->gbits) {
        if (grid_fits(b, acc)) return grid_access(c, b, S, vec, acc);
        if (!acc->ranged) return grid_whole(c, b, S, vec, acc);
        if (ungrid(c, b)) return -1; /* a range off the grid: this range mode keeps the index */
    } else if (!b->nseg) {
        int r = grid_start(c, b, acc);
        if (r <= 0) return r ? r : grid_access(c, b, S, vec, acc);
    }
    return range_index(c, b, S, vec, acc, hint);
}

static int strided_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const shape_t *shape);
static int views_meet(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const shape_t *shape);
