/* The compiled replay core, rules.c: the data-race rules over a block's state: whole-block and byte-range accesses, the segment index, split / coalesce / merge.
 *
 * Part of a unity build: _core.c includes this after overlap.c; it is not compiled on its own. */

/* ------------------------------------------------------------------ data-race rules */

#define FS_MAX 2
#define FS_FULL 255
/* A write over the whole block leaves nothing of other streams in its state (the strided
 * entries it covers, all of them, go next: views_meet): fs_note starts afresh. */
static inline void fs_forget(block_t *b) { if (b->nfs) b->nfs = 0; }

/* Does everything in b's state happen before stream S's access at clock vec, or on S?
 * Sure when S is b's allocation stream and every other stream's access (fs_seq: the latest
 * of each) happens before it. Then no access of S's to b's bytes can race with their state
 * (reuse ghosts and strided entries aside: they are kept and checked apart). */
static inline int all_before(const block_t *b, int32_t S, const int64_t *vec) {
    if (b->stream != S || b->nfs == FS_FULL) return 0;
    for (uint32_t k = 0; k < b->nfs; k++) if (vec[b->fs_stream[k]] < b->fs_seq[k]) return 0;
    return 1;
}

static int whole_access(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc) {
    if (!acc->write) {
        if (b->has_write && b->write.stream != S && !ordered(vec, &b->write))
            if (report(c, K_DATA_RACE, acc, &b->write, b)) return -1;
        if (av_set(&b->reads, acc)) return oom(c);
        return 0;
    }
    if (b->reads.n) {
        acc_t *r = av_items(&b->reads);
        for (uint32_t i = 0; i < b->reads.n; i++)
            if (r[i].stream != S && !ordered(vec, &r[i]))
                if (report(c, K_DATA_RACE, acc, &r[i], b)) return -1;
    } else if (b->has_write && b->write.stream != S && !ordered(vec, &b->write)) {
        if (report(c, K_DATA_RACE, acc, &b->write, b)) return -1;
    }
    b->write = *acc;
    b->has_write = 1;
    av_reset(&b->reads);
    fs_forget(b);
    return 0;
}

#define NARROW_INF ((1ull << 48) - 1)
static inline u128 seg_hi(const block_t *b, uint32_t k) {
    if (!b->keys) return b->ends[k];
    uint64_t e = b->keys[k] >> 16;
    return e == NARROW_INF ? INF128 : e;
}
static inline u128 seg_lo(const block_t *b, uint32_t k) { return k ? seg_hi(b, k - 1) : 0; }
static inline uint32_t seg_slot(const block_t *b, uint32_t k) { return b->keys ? (uint16_t)b->keys[k] : b->ord[k]; }
#define SEG(b, k) (&(b)->segs[seg_slot(b, k)])
/* can the narrow index hold this end? */
static inline int narrow_end(u128 hi) { return hi < NARROW_INF || hi == INF128; }
/* segment k := ends at hi, state in slot (the index holds hi: seg_fit) */
static inline void seg_set(block_t *b, uint32_t k, u128 hi, uint32_t slot) {
    if (b->keys) b->keys[k] = (hi == INF128 ? NARROW_INF : (uint64_t)hi) << 16 | slot;
    else { b->ends[k] = hi; b->ord[k] = (uint16_t)slot; }
}
static inline void seg_sethi(block_t *b, uint32_t k, u128 hi) { seg_set(b, k, hi, seg_slot(b, k)); }
/* a narrow index K: where its segment k starts, and whether that segment holds byte l */
static inline uint64_t key_lo(const uint64_t *K, uint32_t k) { return k ? K[k - 1] >> 16 : 0; }
static inline int key_holds(const uint64_t *K, uint32_t k, uint64_t l) { return key_lo(K, k) <= l && l < K[k] >> 16; }

/* In keys e[base, base + len) (len >= 1), the first above t (base + len: none).
 * Branch-free: on random offsets a branching binary search mispredicts about every
 * other step, which cost more than the search's loads. */
static inline uint32_t first_key_above(const uint64_t *e, uint32_t base, uint32_t len, uint64_t t) {
    while (len > 1) {
        uint32_t half = len / 2;
        base = e[base + half] <= t ? base + half : base;
        len -= half;
    }
    return base + (e[base] <= t);
}

/* The first segment whose end is past byte `lo` (callers pass lo < the last end). */
static inline uint32_t seg_find(const block_t *b, u128 lo) {
    uint32_t base = 0, len = b->nseg;
    if (b->keys) { /* the first key above every key of an end <= lo */
        uint64_t t = (lo < NARROW_INF - 1 ? (uint64_t)lo : NARROW_INF - 1) << 16 | 0xFFFF;
        base = first_key_above(b->keys, 0, len, t);
        return base < b->nseg ? base : b->nseg - 1;
    }
    const u128 *e = b->ends;
    while (len > 1) {
        uint32_t half = len / 2;
        base = e[base + half] <= lo ? base + half : base;
        len -= half;
    }
    base += e[base] <= lo;
    return base < b->nseg ? base : b->nseg - 1; /* as the search it replaced, were lo past the end */
}

/* Where the segment of byte lo would be if the block's segments were all of one size
 * (NO_SEG: no guess): they often are (a buffer cut into equal parts, and any block once all
 * its parts have been touched), and a search near the guess reads a few lines of a large
 * index instead of all of them. Narrow index, known size, at least two lines of keys. */
#define GUESS_WINDOW 16
static inline uint32_t seg_guess(const block_t *b, u128 lo) {
    if (!b->keys || b->nseg <= 2 * GUESS_WINDOW || !b->size_known || lo >= b->size || lo >= NARROW_INF) return NO_SEG;
    return (uint32_t)((uint64_t)lo * b->nseg / b->size); /* (lo < 2^48, nseg < 2^16) */
}

/* seg_find(b, lo), given a guess g: the search reads the keys within GUESS_WINDOW of g when
 * the answer is among them, everything otherwise */
static inline uint32_t seg_find_near(const block_t *b, u128 lo, uint32_t g) {
    if (g == NO_SEG) return seg_find(b, lo);
    const uint64_t *e = b->keys;
    uint32_t n = b->nseg, L = g > GUESS_WINDOW ? g - GUESS_WINDOW : 0, H = g + GUESS_WINDOW < n ? g + GUESS_WINDOW : n;
    uint64_t t = (uint64_t)lo << 16 | 0xFFFF; /* (lo < NARROW_INF - 1: seg_guess) */
    if ((L && e[L - 1] > t) || (H < n && e[H - 1] <= t)) return seg_find(b, lo); /* not in [L, H] */
    uint32_t base = first_key_above(e, L, H - L, t);
    return base < n ? base : n - 1;
}

/* Room for n more segments; done before taking pointers into segs (the pool moves). */
static int seg_room(Core *c, block_t *b, uint32_t n) {
    if (b->nseg + n <= b->segcap) return 0;
    uint32_t cap = b->segcap ? b->segcap * 2 : 4;
    while (cap < b->nseg + n) cap *= 2;
    if (cap > 32768) return oom(c); /* ord holds 16-bit slots (segments are capped far below) */
    seg_t *s = pool_alloc(&c->arena, cap);
    if (!s) return oom(c);
    if (b->keys || !b->ends) { /* narrow: a new block's index starts narrow */
        uint64_t *k = realloc(b->keys, cap * sizeof(uint64_t));
        if (!k) { pool_free(&c->arena, s, cap); return oom(c); }
        b->keys = k;
    } else {
        u128 *e = realloc(b->ends, cap * sizeof(u128) + cap * sizeof(uint16_t));
        if (!e) { pool_free(&c->arena, s, cap); return oom(c); }
        uint16_t *ord = (uint16_t *)(e + cap);
        memmove(ord, (uint16_t *)(e + b->segcap), b->nseg * sizeof(uint16_t));
        b->ends = e; b->ord = ord;
    }
    if (b->nseg) memcpy(s, b->segs, b->nseg * sizeof(seg_t));
    pool_free(&c->arena, b->segs, b->segcap);
    c->poolbytes += (size_t)(cap - b->segcap) * sizeof(seg_t);
    b->segs = s; b->segcap = cap;
    return 0;
}

/* The index in the wide form (it is narrow and an end past its range is coming). */
static int seg_widen(Core *c, block_t *b) {
    uint32_t cap = b->segcap;
    u128 *e = malloc(cap * sizeof(u128) + cap * sizeof(uint16_t));
    if (!e) return oom(c);
    uint16_t *ord = (uint16_t *)(e + cap);
    for (uint32_t k = 0; k < b->nseg; k++) { e[k] = seg_hi(b, k); ord[k] = (uint16_t)seg_slot(b, k); }
    free(b->keys);
    b->keys = NULL; b->ends = e; b->ord = ord;
    return 0;
}

/* An index that can hold the end hi (split and split_one fit both ends of a range: the
 * unbounded end fits the narrow index, a large start before it would not). */
static inline int seg_fit(Core *c, block_t *b, u128 hi) { return b->keys && !narrow_end(hi) ? seg_widen(c, b) : 0; }

/* Entries [at, nseg) of the index move up by n (nseg is not changed). */
static inline void seg_open(block_t *b, uint32_t at, uint32_t n) {
    if (b->keys) { memmove(&b->keys[at + n], &b->keys[at], (b->nseg - at) * sizeof(uint64_t)); return; }
    memmove(&b->ends[at + n], &b->ends[at], (b->nseg - at) * sizeof(u128));
    memmove(&b->ord[at + n], &b->ord[at], (b->nseg - at) * sizeof(uint16_t));
}

/* Entry at leaves the index: the ones after it move down (nseg is not changed). */
static inline void seg_close(block_t *b, uint32_t at) {
    if (b->keys) { memmove(&b->keys[at], &b->keys[at + 1], (b->nseg - at - 1) * sizeof(uint64_t)); return; }
    memmove(&b->ends[at], &b->ends[at + 1], (b->nseg - at - 1) * sizeof(u128));
    memmove(&b->ord[at], &b->ord[at + 1], (b->nseg - at - 1) * sizeof(uint16_t));
}

static inline int seg_reserve(Core *c, block_t *b) { return seg_room(c, b, 1); }

/* Insert a segment ending at hi, with a copy of the state `from` (NULL: empty) (room was
 * reserved: seg_reserve); it starts where the segment before it ends. */
static int seg_insert(Core *c, block_t *b, uint32_t at, u128 hi, seg_t *from) {
    uint32_t slot = b->nseg; /* the pool is dense: slots 0 .. nseg-1 are in use */
    seg_t *s = &b->segs[slot];
    seg_init(s);
    if (from && seg_copy(s, from)) return oom(c);
    if (seg_fit(c, b, hi)) return -1;
    seg_open(b, at, 1);
    seg_set(b, at, hi, slot);
    b->nseg++;
    return 0;
}

static void seg_remove(block_t *b, uint32_t at) {
    uint32_t slot = seg_slot(b, at), last = b->nseg - 1;
    seg_clear(&b->segs[slot]);
    seg_close(b, at);
    b->nseg--;
    if (slot != last) { /* keep the pool dense: the last slot moves into the freed one */
        b->segs[slot] = b->segs[last];
        for (uint32_t k = 0; k < b->nseg; k++) if (seg_slot(b, k) == last) { seg_set(b, k, seg_hi(b, k), slot); break; }
    }
}

/* split(segs, lo, hi) -> [i, j) */
static int split(Core *c, block_t *b, u128 lo, u128 hi, uint32_t *pi, uint32_t *pj) {
    uint32_t i = seg_find(b, lo), top; /* the first segment with hi > lo */
    if (seg_fit(c, b, lo) || seg_fit(c, b, hi) || seg_reserve(c, b)) return -1;
    if (seg_lo(b, i) < lo) {
        if (seg_insert(c, b, i + 1, seg_hi(b, i), SEG(b, i))) return -1;
        seg_sethi(b, i, lo);
        i++;
    }
    uint32_t j = i;
    top = b->nseg - 1;
    while (j < top) { /* the first segment with hi >= hi */
        uint32_t mid = (j + top) / 2;
        if (seg_hi(b, mid) < hi) j = mid + 1; else top = mid;
    }
    if (seg_reserve(c, b)) return -1;
    if (seg_hi(b, j) > hi) {
        if (seg_insert(c, b, j + 1, seg_hi(b, j), SEG(b, j))) return -1;
        seg_sethi(b, j, hi);
    }
    *pi = i; *pj = j + 1;
    return 0;
}

/* split(segs, lo, hi) for a range [lo, hi) inside segment k (and not all of it): its
 * pieces before and after the range keep copies of its state, and the ends move once.
 * *pi: the range's segment. */
static int split_one(Core *c, block_t *b, uint32_t k, u128 lo, u128 hi, uint32_t *pi) {
    u128 slo = seg_lo(b, k), shi = seg_hi(b, k);
    uint32_t before = slo < lo, after = hi < shi, add = before + after;
    if (seg_fit(c, b, lo) || seg_fit(c, b, hi) || seg_room(c, b, add)) return -1;
    seg_t *from = SEG(b, k);
    uint32_t slot = b->nseg;
    for (uint32_t q = 0; q < add; q++) {
        seg_init(&b->segs[slot + q]);
        if (seg_copy(&b->segs[slot + q], from)) return oom(c);
    }
    uint32_t m = k, own = seg_slot(b, k);
    seg_open(b, k + 1, add);
    if (before) { seg_set(b, k, lo, own); m = k + 1; own = slot++; }
    seg_set(b, m, hi, own);
    if (after) seg_set(b, m + 1, shi, slot);
    b->nseg += add;
    *pi = m;
    return 0;
}

/* A summary of a state equal for any two states in the three-access form that same_state
 * finds equal (their counts, and the xor of their entries' first words: seq, stream and idx
 * name an access); 0 for a state in another form (to be compared). */
static inline uint64_t p3_sig(uint32_t hdr, uint64_t keys) { return (hdr * 0x9E3779B97F4A7C15ull ^ keys) | 1; }
static inline uint64_t state_sig(const seg_t *s) {
    if (SEG_FORM(s) != FORM_THREE) return 0;
    uint32_t h = s->hdr, n = (h & 3u) + (h >> 2 & 3u);
    uint64_t x = 0;
    for (uint32_t q = 0; q < n; q++) x ^= p3_key(s, q);
    return p3_sig(h, x);
}

static int same_state_slow(const seg_t *s, const seg_t *t);
/* (inline: the first tests tell most pairs apart, by their counts or first write) */
static inline int same_state(const seg_t *s, const seg_t *t) {
    if (SEG_FORM(s) == FORM_THREE && SEG_FORM(t) == FORM_THREE) {
        if (s->hdr != t->hdr) return 0;
        if ((s->hdr & 3u) && (p3_key(s, 0) ^ p3_key(t, 0)) & (P3_SEQ | 63ull << 56)) return 0; /* seq, idx */
    }
    return same_state_slow(s, t);
}

static int same_state_slow(const seg_t *s, const seg_t *t) {
    uint32_t nw = seg_nw(s), nr = seg_nr(s);
    if (nw != seg_nw(t) || nr != seg_nr(t)) return 0;
    for (uint32_t i = 0; i < nw; i++) {
        acc_t a = seg_get(s, i), x = seg_get(t, i);
        if (!same_acc(&a, &x)) return 0;
    }
    for (uint32_t i = nw; i < nw + nr; i++) {
        acc_t a = seg_get(s, i);
        uint32_t k = nw;
        acc_t o;
        while (k < nw + nr && (o = seg_get(t, k)).stream != a.stream) k++;
        if (k == nw + nr || !same_acc(&o, &a)) return 0;
    }
    return 1;
}

/* The first pair of neighbours (m, m + 1) that spans the fewest bytes (Python's rule: the
 * earliest of the narrowest). When the index is narrow and has no unbounded end (always,
 * but for blocks of unknown size and hand-made traces) the minimum is found first, over
 * four independent lanes so that the comparisons do not wait on each other, then its
 * first position: the same answer as one pass keeping the best so far, in a fraction of
 * the time (this scan runs for every access that splits a block already at its cap). */
static uint32_t narrowest_pair(const block_t *b) {
    const uint64_t *e = b->keys;
    uint32_t n = b->nseg; /* >= 2 */
    if (e && (e[n - 1] >> 16) != NARROW_INF) { /* (the narrow index, no unbounded end) */
#define W(m) ((e[(m) + 1] >> 16) - (e[(m) - 1] >> 16)) /* segments are adjacent from 0 */
        uint64_t w0 = e[1] >> 16, l0 = w0, l1 = UINT64_MAX, l2 = UINT64_MAX, l3 = UINT64_MAX;
        uint32_t m = 1;
        for (; m + 4 < n; m += 4) {
            uint64_t a = W(m), x = W(m + 1), y = W(m + 2), z = W(m + 3);
            l0 = a < l0 ? a : l0; l1 = x < l1 ? x : l1; l2 = y < l2 ? y : l2; l3 = z < l3 ? z : l3;
        }
        for (; m + 1 < n; m++) { uint64_t a = W(m); l0 = a < l0 ? a : l0; }
        l0 = l1 < l0 ? l1 : l0; l2 = l3 < l2 ? l3 : l2; l0 = l2 < l0 ? l2 : l0;
        if (w0 == l0) return 0;
        for (m = 1; m + 1 < n; m++) if (W(m) == l0) return m;
#undef W
        return 0; /* not reached */
    }
    uint32_t best = 0;
    u128 bw = INF128;
    for (uint32_t m = 0; m + 1 < n; m++) {
        u128 w = seg_hi(b, m + 1) - seg_lo(b, m);
        if (w < bw) { bw = w; best = m; }
    }
    return best;
}

/* the stream of the q-th access of a segment's state */
static inline int32_t seg_stream(const seg_t *s, uint32_t q) {
    switch (SEG_FORM(s)) {
    case FORM_THREE: return p3_stream(p3_key(s, q));
    case FORM_TWO: return s->two.in[q].stream;
    default: return s->wide.w->items[q].stream;
    }
}

/* Is the stream of each of x's accesses among y's? */
static int streams_within(const seg_t *x, const seg_t *y) {
    uint32_t nx = seg_nw(x) + seg_nr(x), ny = seg_nw(y) + seg_nr(y);
    for (uint32_t q = 0; q < nx; q++) {
        int32_t P = seg_stream(x, q);
        uint32_t r = 0;
        while (r < ny && seg_stream(y, r) != P) r++;
        if (r == ny) return 0;
    }
    return 1;
}

/* a bit per stream of a segment's accesses (slot mod 64): equal for equal sets of streams */
static inline uint64_t seg_sig(const seg_t *s) {
    uint32_t n = seg_nw(s) + seg_nr(s);
    uint64_t g = 0;
    for (uint32_t q = 0; q < n; q++) g |= 1ull << (seg_stream(s, q) & 63);
    return g;
}

/* Segment.streams() == other.streams() */
static inline int same_streams(const seg_t *s, const seg_t *t) { return streams_within(s, t) && streams_within(t, s); }

/* engine.merge_pair: the narrowest pair of neighbours (the first of the narrowest) among
 * those whose accesses are of the same streams, else among all (narrowest_pair). When the
 * first narrowest of all is such a pair it is the answer, found from the index alone (a
 * block of one stream, the common case, never reads its states here). */
static uint32_t merge_pair(const block_t *b) {
    uint32_t n = b->nseg, best = narrowest_pair(b);
    if (same_streams(SEG(b, best), SEG(b, best + 1))) return best;
    best = UINT32_MAX;
    u128 bw = 0;
    uint64_t next = seg_sig(SEG(b, 0)), sig;
    for (uint32_t m = 0; m + 1 < n; m++) {
        if (m + 8 < n) __builtin_prefetch(SEG(b, m + 8));
        sig = next; next = seg_sig(SEG(b, m + 1));
        if (sig != next || !same_streams(SEG(b, m), SEG(b, m + 1))) continue;
        u128 w = seg_hi(b, m + 1) - seg_lo(b, m);
        if (best == UINT32_MAX || w < bw) { bw = w; best = m; }
    }
    return best != UINT32_MAX ? best : narrowest_pair(b);
}

static int coalesce(Core *c, block_t *b, uint32_t i, uint32_t j) {
    uint32_t n = i;
    while (n + 1 < j && n + 1 < b->nseg) {
        if (same_state(SEG(b, n), SEG(b, n + 1))) {
            seg_sethi(b, n, seg_hi(b, n + 1));
            seg_remove(b, n + 1);
            j--;
        } else {
            n++;
        }
    }
    if ((long)b->nseg > c->L.max_segments && !b->capped) { b->capped = 1; c->capped++; }
    while ((long)b->nseg > c->L.max_segments) {
        uint32_t best = merge_pair(b);
        seg_t *s = SEG(b, best), *t = SEG(b, best + 1);
        /* writes: latest of both; reads: latest of both and of the merged writes */
        uint32_t snw = seg_nw(s), sn = snw + seg_nr(s), tnw = seg_nw(t), tn = tnw + seg_nr(t);
        acc_t *si = seg_scratch(c, 3 * ((size_t)sn + tn)); /* s, t, the merged writes, the merged reads */
        if (!si) return -1;
        acc_t *ti = si + sn, *w = ti + tn, *r = w + sn + tn;
        seg_unpack(s, si); seg_unpack(t, ti);
        uint32_t nw = 0, nr = 0;
        for (uint32_t k = 0; k < snw; k++) acc_latest(w, &nw, &si[k]);
        for (uint32_t k = 0; k < tnw; k++) acc_latest(w, &nw, &ti[k]);
        for (uint32_t k = snw; k < sn; k++) acc_latest(r, &nr, &si[k]);
        for (uint32_t k = tnw; k < tn; k++) acc_latest(r, &nr, &ti[k]);
        for (uint32_t k = 0; k < nw; k++) acc_latest(r, &nr, &w[k]);
        seg_sethi(b, best, seg_hi(b, best + 1));
        if (seg_assign(s, w, nw, r, nr)) return oom(c);
        seg_remove(b, best + 1);
    }
    return 0;
}

static int check_earlier(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const acc_t *e) {
    if (e->stream == S || ordered(vec, e)) return 0;
    for (size_t k = 0; k < c->nrep; k++) if (c->reported[k] == e->seq) return 0;
    if (c->nrep == c->repcap) {
        size_t cap = c->repcap ? c->repcap * 2 : 16;
        int64_t *p = realloc(c->reported, cap * sizeof(int64_t));
        if (!p) return oom(c);
        c->reported = p; c->repcap = cap;
    }
    c->reported[c->nrep++] = e->seq;
    return report(c, K_DATA_RACE, acc, e, b);
}

/* check_earlier against the accesses q in [from, to) of a segment's state */
/* check_seg for a segment in the three-access form */
static inline int p3_check(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const seg_t *s,
                           uint32_t from, uint32_t to) {
    for (uint32_t q = from; q < to; q++) {
        uint64_t w0 = p3_key(s, q);
        int32_t P = p3_stream(w0);
        if (P == S || vec[P] >= p3_seq(w0)) continue;
        acc_t e = unpack3(s, q);
        if (check_earlier(c, b, S, vec, acc, &e)) return -1;
    }
    return 0;
}

static int check_seg(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc, const seg_t *s,
                     uint32_t from, uint32_t to) {
    if (SEG_FORM(s) == FORM_THREE) return p3_check(c, b, S, vec, acc, s, from, to);
    for (uint32_t q = from; q < to; q++) {
        if (SEG_FORM(s) == FORM_TWO) { /* the test of check_earlier first, on the packed fields */
            const pacc_t *p = &s->two.in[q];
            if (p->stream == S || vec[p->stream] >= (int64_t)((uint64_t)p->seq_hi << 32 | p->seq_lo)) continue;
        }
        acc_t e = seg_get(s, q);
        if (check_earlier(c, b, S, vec, acc, &e)) return -1;
    }
    return 0;
}

/* whole mode -> range mode: one segment with the whole state */
static int to_segments(Core *c, block_t *b) {
    u128 end = b->size_known && b->size ? (u128)b->size : INF128;
    if (seg_reserve(c, b) || seg_insert(c, b, 0, end, NULL)) return -1;
    if (seg_assign(SEG(b, 0), &b->write, b->has_write, av_items(&b->reads), b->reads.n)) return oom(c);
    b->has_write = 0;
    av_clear(&b->reads);
    return 0;
}

/* Where [lo, hi) (within the block's segments) lies: 1 exactly on segment *pk, 2 inside
 * segment *pk (not all of it), 0 across more than one. hint: a segment to try first. On a
 * narrow index, with both ends in its range (every real trace), in 64-bit arithmetic. */
static inline int seg_place(const block_t *b, u128 lo, u128 hi, uint32_t hint, uint32_t *pk) {
    uint32_t k = hint;
    if (b->keys && hi < NARROW_INF) {
        const uint64_t *K = b->keys;
        uint64_t l = (uint64_t)lo, h = (uint64_t)hi;
        if (k >= b->nseg || !key_holds(K, k, l)) k = seg_find(b, lo);
        uint64_t klo = key_lo(K, k), khi = K[k] >> 16; /* (NARROW_INF: unbounded, above h) */
        *pk = k;
        return klo == l && khi == h ? 1 : h <= khi ? 2 : 0;
    }
    if (k >= b->nseg || seg_lo(b, k) > lo || seg_hi(b, k) <= lo) k = seg_find(b, lo);
    u128 khi = seg_hi(b, k);
    *pk = k;
    return seg_lo(b, k) == lo && khi == hi ? 1 : hi <= khi ? 2 : 0;
}

/* reads[S] = the access encoded as x, in place in a state in the three-access form (its
 * writes already checked); 0: no room there (the caller then goes through seg_set_read). */
static inline int p3_read_here(seg_t *s, int32_t S, const p3e_t *x) {
    uint32_t nw = s->hdr & 3u, n = nw + (s->hdr >> 2 & 3u), q;
    for (q = nw; q < n && p3_stream(p3_key(s, q)) != S; q++) {}
    if (q == 3) return 0;
    p3_put(s, q, x);
    if (q == n) s->hdr += 1u << 2;
    return 1;
}

/* A read by stream S (encoded as x) of a state in the three-access form, when none of the
 * state's writes can race with it (S's own, or ordered before it by vec) and reads[S] has
 * room here: what seg_access makes of it, without a branch on what the state holds (a
 * whole-block read of a block in the grid form meets hundreds of states in no pattern).
 * Returns the state's state_sig after it; 0: not so, the state unchanged (the caller then
 * goes through seg_access). */
static inline uint64_t p3_read_quiet(seg_t *s, int32_t S, const int64_t *vec, const p3e_t *x) {
    uint32_t h = s->hdr, nw = h & 3u, n = nw + (h >> 2 & 3u);
    uint64_t k[3] = {p3_key(s, 0), p3_key(s, 1), p3_key(s, 2)}, sum = 0;
    uint32_t bad = 0, mine = 0;
    for (uint32_t q = 0; q < 3; q++) { /* (entries from n up hold anything: masked) */
        int32_t P = p3_stream(k[q]);
        int32_t W = q < nw ? P : S; /* a write's stream, else S (nothing to check) */
        bad |= W != S && vec[W] < p3_seq(k[q]);
        mine |= (uint32_t)(P == S) << q;
        sum ^= k[q] & -(uint64_t)(q < n);
    }
    mine &= ((1u << n) - 1) >> nw << nw; /* reads[S] among the reads */
    uint32_t q = mine ? (uint32_t)__builtin_ctz(mine) : n;
    if (bad | (q == 3)) return 0;
    p3_put(s, q, x);
    h += (uint32_t)(q == n) << 2;
    s->hdr = (uint8_t)h;
    return p3_sig(h, sum ^ (q < n ? k[q] : 0) ^ x->w0);
}

/* One access against one segment's state: the race checks, then the state change.
 * fast/x: the access packs in the three-access form, and its encoding (range_access). */
__attribute__((always_inline)) static inline int seg_access(Core *c, block_t *b, int32_t S, const int64_t *vec,
                                                           const acc_t *acc, seg_t *s, int fast, const p3e_t *x) {
    if (!acc->write) {
        if (fast && SEG_FORM(s) == FORM_THREE) {
            if (p3_check(c, b, S, vec, acc, s, 0, s->hdr & 3u)) return -1;
            if (p3_read_here(s, S, x)) return 0;
        } else if (check_seg(c, b, S, vec, acc, s, 0, seg_nw(s))) return -1;
        return seg_set_read(c, s, acc);
    }
    if (fast && SEG_FORM(s) == FORM_THREE) {
        uint32_t nw = s->hdr & 3u, nr = s->hdr >> 2 & 3u;
        if (p3_check(c, b, S, vec, acc, s, nr ? nw : 0, nr ? nw + nr : nw)) return -1;
        p3_put(s, 0, x);
        seg_counts(s, FORM_THREE, 1, 0);
        return 0;
    }
    uint32_t nw = seg_nw(s), nr = seg_nr(s);
    if (check_seg(c, b, S, vec, acc, s, nr ? nw : 0, nr ? nw + nr : nw)) return -1; /* the reads, else the writes */
    return seg_write(s, acc) ? oom(c) : 0;
}

/* Back to whole mode, the block's bytes all written by acc (their segments checked). */
static void to_whole(Core *c, block_t *b, const acc_t *acc) {
    if (b->gbits) grid_clear(b);
    else for (uint32_t k = 0; k < b->nseg; k++) seg_clear(&b->segs[k]);
    b->nseg = 0;
    b->gbits = 0;
    if (!b->keys) { /* a wide index: the next range mode starts narrow */
        c->poolbytes -= (size_t)b->segcap * sizeof(seg_t);
        pool_free(&c->arena, b->segs, b->segcap); free(b->ends);
        b->segs = NULL; b->ends = NULL; b->ord = NULL; b->segcap = 0;
    }
    b->write = *acc; b->has_write = 1;
    av_clear(&b->reads);
    fs_forget(b);
}

/* The range access of range_access, on the index (hint: as there). */
__attribute__((noinline)) static int range_index(Core *c, block_t *b, int32_t S, const int64_t *vec, const acc_t *acc,
                                                 uint32_t hint) {
    if (!b->nseg && to_segments(c, b)) return -1;
    u128 lo, hi;
    if (!acc->ranged) { lo = 0; hi = seg_hi(b, b->nseg - 1); }
    else { /* (the segments of a block of known size cover it: its last end is not read, another line) */
        lo = acc->off; hi = (u128)acc->off + acc->n;
        if ((!b->size_known || hi > b->size) && hi > seg_hi(b, b->nseg - 1) &&
            (seg_reserve(c, b) || seg_insert(c, b, b->nseg, hi, NULL))) return -1;
    }
    uint32_t i, j;
    /* exactly one segment (the common case once a block's sub-ranges have all been
     * touched): no split; inside one: split in one move; across several: split() */
    uint32_t k;
    int exact = seg_place(b, lo, hi, hint, &k);
    if (exact == 1) { i = k; j = k + 1; }
    else if (exact == 2) { /* inside one segment: split it in one move */
        if (split_one(c, b, k, lo, hi, &i)) return -1;
        j = i + 1;
    } else if (split(c, b, lo, hi, &i, &j)) return -1;
    c->nrep = 0;
    /* The same access goes into every segment: in the three-access form it is encoded once. */
    int fast = packs3(acc);
    p3e_t x = p3_encode(acc);
    for (uint32_t k = i; k < j; k++) {
        if (k + 8 < j) __builtin_prefetch(SEG(b, k + 8));
        if (seg_access(c, b, S, vec, acc, SEG(b, k), fast, &x)) return -1;
    }
    if (acc->write && i == 0 && j == b->nseg) { /* the whole block was written */
        to_whole(c, b, acc);
        return 0;
    }
    /* One segment changed, by an access none of its neighbours holds: no two neighbours can
     * be joined, so only the cap can leave something to merge. */
    if (exact && (long)b->nseg <= c->L.max_segments) return 0;
    return coalesce(c, b, i > 0 ? i - 1 : 0, j + 1 < b->nseg ? j + 1 : b->nseg);
}
