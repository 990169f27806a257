/* The compiled replay core, queue.c: the access queue: accesses that cannot race, made in batches (defer, flush).
 *
 * Part of a unity build: _core.c includes this after grid.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ queued accesses
 *
 * An access by a block's allocation stream reports nothing when every access in the
 * block's state from another stream happens before it (its own stream's never race with
 * it) and the block has no reuse ghosts or strided entries. It still changes the state,
 * but that change is the same whenever it is made, as long as the block's accesses are
 * made in trace order. Such accesses wait in a queue and are made in batches: the batch's
 * index lines, then its segment lines, are requested all at once, so that the cache
 * misses overlap instead of each access waiting on its own (where a trace with many
 * byte ranges per block spent most of its time). Anything else that touches a block
 * with queued accesses, or frees it, makes the queue's accesses first; so does the end
 * of every replay call. Reports cannot change: none of the queued accesses has any. */

#define PEND_MAX 256
/* hint: GRID_HINT for an access of one part of a block in the grid form in the three-access
 * form (grid_apply; its lines were requested when it was queued), else as range_access's */
struct pend {
    block_t *b;
    uint32_t hint, x; /* x: the part, for GRID_HINT */
    union { acc_t acc; p3e_t e; }; /* e: the part access's encoding, for GRID_HINT */
};
#define GRID_HINT (NO_SEG - 1)

/* After an access from another stream than b's allocation stream (the summary is emptied
 * where a write leaves nothing else in the block's state: fs_forget). */
static inline void fs_note(block_t *b, const acc_t *a) {
    if (b->nfs == FS_FULL) return;
    for (uint32_t k = 0; k < b->nfs; k++)
        if (b->fs_stream[k] == a->stream) { if (b->fs_seq[k] < a->seq) b->fs_seq[k] = a->seq; return; }
    if (b->nfs == FS_MAX) { b->nfs = FS_FULL; return; }
    b->fs_stream[b->nfs] = a->stream; b->fs_seq[b->nfs++] = a->seq;
}

/* Can stream S's ranged access (at clock vec) to b wait in the queue? Only while the
 * segments of all blocks take queue_from bytes or more: below that they mostly stay in the
 * cache, the loads wait little, and the queue cost more than it saved. (A kernel record
 * whose accesses are all single parts of blocks in the grid form is queued whatever the
 * size, by kernel_grid: read straight into the queue, it costs fewer instructions than
 * the accesses made at once, about half as many in the ranged16 benchmark.) */
static inline int can_defer(const Core *c, const block_t *b, int32_t S, const int64_t *vec) {
    return c->poolbytes >= c->queue_from && !b->ng && !b->nviews && all_before(b, S, vec);
}

/* The index lines around where the segment of byte `off` is guessed to be, if `guess` (or
 * the index's first lines, without a guess); returns the guess (NO_SEG: none). */
static inline uint32_t prefetch_index(const block_t *b, uint64_t off, int guess) {
    if (b->gbits) { /* the cell's state, whether it has one, and the base it may copy */
        if (off < b->size) {
            uint32_t x = grid_cell(b, off);
            __builtin_prefetch(&b->own[x >> 6]);
            __builtin_prefetch(&b->segs[x], 1);
            __builtin_prefetch(grid_base(b));
        }
        return NO_SEG;
    }
    if (!b->keys) {
        size_t span = (size_t)b->nseg * sizeof(u128);
        if (span > 1024) span = 1024;
        for (size_t o = 0; o < span; o += 64) __builtin_prefetch((const char *)b->ends + o);
        for (size_t o = 0; o < (size_t)b->nseg * sizeof(uint16_t); o += 64) __builtin_prefetch((const char *)b->ord + o);
        return NO_SEG;
    }
    uint32_t g = guess ? seg_guess(b, (u128)off) : NO_SEG;
    if (g != NO_SEG) { /* the keys around the guess, and the two that bound them */
        uint32_t L = g > GUESS_WINDOW ? g - GUESS_WINDOW - 1 : 0;
        uint32_t H = g + GUESS_WINDOW < b->nseg ? g + GUESS_WINDOW : b->nseg;
        for (uintptr_t p = (uintptr_t)&b->keys[L] & ~(uintptr_t)63; p <= (uintptr_t)&b->keys[H - 1]; p += 64)
            __builtin_prefetch((const void *)p);
    } else {
        size_t span = (size_t)b->nseg * sizeof(uint64_t);
        if (span > 2048) span = 2048;
        for (size_t o = 0; o < span; o += 64) __builtin_prefetch((const char *)b->keys + o);
    }
    return g;
}

/* The segment of byte `off` (a hint for range_access; NO_SEG: none), its line requested. */
static inline uint32_t prefetch_segment(const block_t *b, uint64_t off, uint32_t guess) {
    if (b->gbits) return NO_SEG; /* (prefetch_index requested its lines: grid_access needs no hint) */
    if (!b->nseg || ((!b->size_known || off >= b->size) && (u128)off >= seg_hi(b, b->nseg - 1))) return NO_SEG;
    uint32_t k = guess;
    if (k == NO_SEG || !key_holds(b->keys, k, off)) k = seg_find_near(b, (u128)off, guess);
    __builtin_prefetch(SEG(b, k)); /* one line (seg_t) */
    return k;
}

/* The access a three-access entry encodes (p3_encode's inverse). */
static inline acc_t p3_decode(const p3e_t *x) {
    acc_t a = {p3_seq(x->w0), p3_stream(x->w0), (int32_t)(x->w1 & 0xFFFFFF) - 4, (int32_t)(x->w1 >> 24 & 0xFFFFFF) - 1,
               (uint32_t)(x->w0 >> 56 & 63), (uint8_t)(x->w0 >> 62 & 1), (uint8_t)(x->w0 >> 63),
               x->w1 >> 48 | (x->w2 & 0xFFF) << 16, x->w2 >> 12 & ((1ull << 28) - 1)};
    return a;
}

/* A queued access of exactly one part (x) of a block in the grid form, in the three-access
 * form (e): grid_access without its checks, which could not report (flush makes queued
 * accesses at a clock after everything) and so only read lines. A write leaves the part its
 * own state whatever it held; a read needs what the part holds. */
static inline int grid_apply(Core *c, block_t *b, uint32_t x, const p3e_t *e) {
    uint64_t *w = &b->own[x >> 6], bit = 1ull << (x & 63);
    seg_t *s = &b->segs[x];
    if (e->w0 >> 62 & 1) { /* a write */
        if (*w & bit) seg_clear(s); else { seg_init(s); *w |= bit; }
        p3_put(s, 0, e);
        seg_counts(s, FORM_THREE, 1, 0);
        return 0;
    }
    if (!(*w & bit)) {
        if (seg_copy(s, grid_base(b))) return oom(c);
        *w |= bit;
    }
    if (SEG_FORM(s) == FORM_THREE && p3_read_here(s, p3_stream(e->w0), e)) return 0;
    acc_t acc = p3_decode(e);
    int r = seg_set_read(c, s, &acc);
    b->gwide |= SEG_FORM(s) == FORM_WIDE;
    return r;
}

/* Make the queued accesses, in order. */
static int flush(Core *c) {
    uint32_t n = c->npend;
    if (!n) return 0;
    if (c->allcap < c->nslots) {
        int64_t *v = realloc(c->allvec, c->scap * sizeof(int64_t));
        if (!v) return oom(c);
        for (uint32_t i = 0; i < c->scap; i++) v[i] = INT64_MAX;
        c->allvec = v; c->allcap = c->scap;
    }
    struct pend *q = c->pend;
    for (uint32_t i = 0; c->npend_index && i < n; i++) { /* the keys of the guess and the one before it (or the index's first lines) */
        const block_t *b = q[i].b;
        if (q[i].hint == GRID_HINT) continue;
        uint32_t g = q[i].hint = seg_guess(b, (u128)q[i].acc.off);
        if (g == NO_SEG) { if (b->nseg) prefetch_index(b, q[i].acc.off, 0); }
        else { __builtin_prefetch(&b->keys[g]); if (g) __builtin_prefetch(&b->keys[g - 1]); }
    }
    for (uint32_t i = 0; c->npend_index && i < n; i++) {
        const block_t *b = q[i].b;
        if (q[i].hint == GRID_HINT) continue;
        uint32_t k = q[i].hint = prefetch_segment(b, q[i].acc.off, q[i].hint);
        if (k == NO_SEG || !b->keys) continue;
        uint64_t lo = q[i].acc.off, hi = lo + q[i].acc.n;
        if (key_lo(b->keys, k) == lo && b->keys[k] >> 16 == hi) continue;
        /* a split: the lines it writes (its new states, the index entries it moves) */
        if (b->nseg + 2 <= b->segcap) { __builtin_prefetch(&b->segs[b->nseg], 1); __builtin_prefetch(&b->segs[b->nseg + 1], 1); }
        for (uintptr_t p = (uintptr_t)&b->keys[k] & ~(uintptr_t)63; p <= (uintptr_t)&b->keys[b->nseg - 1] + 16; p += 64)
            __builtin_prefetch((const void *)p, 1);
    }
    c->npend = c->npend_index = 0;
    for (uint32_t i = 0; i < n; i++) {
        block_t *b = q[i].b;
        const acc_t *a = &q[i].acc;
        b->pending = 0;
        if (q[i].hint == GRID_HINT) { if (grid_apply(c, b, q[i].x, &q[i].e)) return -1; }
        else if (range_access(c, b, a->stream, c->allvec, a, q[i].hint)) return -1;
    }
    return 0;
}

/* A slot at the queue's end, for an access of b (the queue made first when full); NULL: out
 * of memory. */
static inline struct pend *pend_slot(Core *c, block_t *b) {
    if (!c->pend && !(c->pend = malloc(PEND_MAX * sizeof(struct pend)))) { oom(c); return NULL; }
    if (c->npend == PEND_MAX && flush(c)) return NULL;
    struct pend *q = &c->pend[c->npend++];
    q->b = b;
    b->pending++;
    return q;
}

/* The words of the three-access form (p3_encode's) that a kernel's fields give to all its
 * accesses: the rest is each access's index, kind and range (grid_queue). 0: its accesses
 * do not pack3. */
static inline int p3_kernel_words(int64_t seq, int32_t S, uint32_t nacc, int32_t op, int32_t stack, uint64_t *w0k,
                                  uint64_t *w1k) {
    *w0k = (uint64_t)seq | (uint64_t)S << 44 | 1ull << 63;
    *w1k = ((uint32_t)op + 4u) | (uint64_t)((uint32_t)stack + 1u) << 24;
    return (uint64_t)seq <= P3_SEQ && (uint32_t)S < (1u << 12) && nacc <= 64 && (uint32_t)op + 4u < (1u << 24) &&
           (uint32_t)stack + 1u < (1u << 24);
}

/* Is [off, off + n) of b (in the grid form) one part whose access grid_queue can encode? */
static inline int grid_queues(const block_t *b, uint64_t off, uint64_t n) {
    return grid_fits_range(b, off, n) && (off | n) < (1ull << 28);
}

/* Fill q (pend_slot's, for b) with the kernel's access i of one part of b (grid_queues),
 * encoded once, here (kernel words from p3_kernel_words), and request its lines: a block
 * in the grid form stays in it while it has queued accesses (only an access made at once
 * changes its form, and that empties the queue first), so grid_apply can make them. */
__attribute__((always_inline)) static inline void grid_queue(struct pend *q, const block_t *b, uint32_t i, int write,
                                                             uint64_t off, uint64_t n, uint64_t w0k, uint64_t w1k) {
    prefetch_index(b, off, 0);
    q->hint = GRID_HINT;
    q->x = grid_cell(b, off);
    q->e.w0 = w0k | (uint64_t)i << 56 | (uint64_t)write << 62;
    q->e.w1 = w1k | (off & 0xFFFF) << 48;
    q->e.w2 = off >> 16 | n << 12;
}

/* Queue acc (can_defer) for a block that is not in the grid form (kernel_run queues the
 * accesses of one part of a block in the grid form itself). */
static int defer(Core *c, block_t *b, const acc_t *acc) {
    struct pend *q = pend_slot(c, b);
    if (!q) return -1;
    q->hint = NO_SEG;
    q->acc = *acc;
    c->npend_index++;
    return 0;
}

static int one_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const shape_t *shape,
                      uint32_t hint) {
    if (b->ng && check_ghosts(c, b, S, vec, acc)) return -1;
    if (shape) {
        if (strided_access(c, b, S, vec, acc, shape)) return -1;
    } else {
        if (!acc->ranged && !b->nseg) { if (whole_access(c, b, S, vec, acc)) return -1; }
        else if (range_access(c, b, S, vec, acc, hint)) return -1;
        if (b->nviews) {
            shape_t r = {(i128)acc->off, (i128)acc->n, 0, {0}, {0}};
            c->nrep = 0;
            if (views_meet(c, b, S, vec, acc, acc->ranged ? &r : NULL)) return -1;
        }
    }
    if (b->stream >= 0 && S != b->stream && av_set(&b->uses, acc)) return oom(c);
    if (S != b->stream) fs_note(b, acc);
    return 0;
}
