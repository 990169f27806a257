/* The compiled replay core: npusan's rules (src/npusan/analyzer/replay/engine.py) over msgpack records.
 *
 * engine.py is the specification; every function here mirrors the Python function of the
 * same name, and tests/analyzer/replay/test_native_differential.py checks that both give the same
 * findings and the same errors.  This file adds only what C needs: a msgpack reader for
 * the records the engine replays, hash tables keyed by id, and small ordered arrays where
 * Python uses dicts (insertion order is kept, because the order of findings depends on it).
 *
 * Core.replay(buffer, pos, end) replays complete records from buffer[pos:end] and returns
 * when it needs the caller:
 *   (0, pos)                   NEED: the record at pos is incomplete (or pos == end);
 *   (1, pos, length)           SLOW: a record the engine does not replay (definitions, notes,
 *                              END, unknown types, anything that is not a well-formed event
 *                              record): the caller decodes and handles it, then resumes;
 *   (2, pos, -1)               BAD: the msgpack at pos is invalid or over a limit: the
 *                              caller lets msgpack itself name the problem;
 *   (3, pos, length, code, field)  ERROR: the engine rejects the record (engine.py's
 *                              messages, built by the caller from code and field).
 * Nothing is allocated in proportion to a length field before the data is there; ids are
 * hashed, never used as array indexes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

typedef __int128 i128;
typedef unsigned __int128 u128;
#define INF128 (~(u128)0)

/* ------------------------------------------------------------------ limits (set by Python) */

typedef struct {
    long max_segments, max_streams, max_findings, max_occurrences, max_addresses;
    long max_ghosts, max_block_ghosts;
    uint64_t max_id;
    uint64_t max_str, max_bin, max_array, max_map, max_ext;
} limits_t;

#define MAX_DEPTH 1024 /* msgpack-python's nesting limit */
/* Ids below this are also kept in arrays indexed by id (at most 512 KiB each, grown only as
 * far as the ids a trace uses): lookups without hashing for the dense ids writers hand out. */
#define DENSE_IDS 65536u

enum { ST_NEED = 0, ST_SLOW = 1, ST_BAD = 2, ST_ERROR = 3 };
enum { E_NONE = 0, E_STREAM_UNDEFINED, E_TOO_MANY_STREAMS, E_EVENT, E_DEVICE, E_BID_RANGE,
       E_MALFORMED_BLOCK, E_BLOCK_UNDEFINED, E_ACCESS_SHAPE, E_ACCESS_MALFORMED, E_VIEWS, E_STACK, E_NOMEM };
enum { K_DATA_RACE = 0, K_MISSING = 1, K_REUSE = 2 };
#define OP_NONE (-1)
#define OP_FREE (-2)
#define OP_LEAK (-3)

/* record types (trace_format/records.py) */
enum { T_STREAM_CREATED = 5, T_EVENT_CREATED, T_EVENT_DELETED, T_EVENT_RECORD, T_EVENT_WAIT,
       T_EVENT_SYNC, T_STREAM_SYNC, T_DEVICE_SYNC, T_ALLOC, T_FREE, T_RECORD_STREAM,
       T_ERASE_STREAM, T_KERNEL, T_VIEWS = 21 };
static const int MIN_LENGTH[22] = {0, 0, 0, 0, 0, 3, 3, 3, 4, 4, 3, 3, 3, 6, 3, 4, 4, 4, 0, 0, 0, 2};
/* The stack field of each event record (docs/trace-format.md section 5.2): a stack id or
 * nil; any other type (a map, a string ...) makes the record malformed (E_STACK), as in
 * engine.STACK_FIELD. */
static const int STACK_FIELD[T_KERNEL + 1] = {0, 0, 0, 0, 0, 2, 2, 2, 3, 3, 2, 2, 2, 5, 2, 3, 3, 3};

/* ------------------------------------------------------------------ hash map u64 -> u64 */

typedef struct {
    uint64_t *keys, *vals;
    uint8_t *state; /* 0 empty, 1 full, 2 deleted */
    size_t cap, n, used;
} map_t;

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static void map_free(map_t *m) {
    free(m->keys); free(m->vals); free(m->state);
    memset(m, 0, sizeof *m);
}

static int map_get(const map_t *m, uint64_t k, uint64_t *v) {
    if (!m->cap) return 0;
    size_t mask = m->cap - 1, i = mix(k) & mask;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) return 0;
        if (s == 1 && m->keys[i] == k) { if (v) *v = m->vals[i]; return 1; }
        i = (i + 1) & mask;
    }
}

static int map_put(map_t *m, uint64_t k, uint64_t v);

static int map_rehash(map_t *m, size_t cap) {
    map_t o = *m;
    m->keys = malloc(cap * sizeof(uint64_t));
    m->vals = malloc(cap * sizeof(uint64_t));
    m->state = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->state) {
        free(m->keys); free(m->vals); free(m->state);
        *m = o;
        return -1;
    }
    m->cap = cap; m->n = m->used = 0;
    for (size_t i = 0; i < o.cap; i++)
        if (o.state[i] == 1) map_put(m, o.keys[i], o.vals[i]);
    free(o.keys); free(o.vals); free(o.state);
    return 0;
}

static int map_put(map_t *m, uint64_t k, uint64_t v) {
    if ((m->used + 1) * 10 >= m->cap * 7) {
        size_t cap = m->cap ? m->cap : 16;
        while ((m->n + 1) * 10 >= cap * 5) cap *= 2;
        if (map_rehash(m, cap)) return -1;
    }
    size_t mask = m->cap - 1, i = mix(k) & mask, tomb = (size_t)-1;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) break;
        if (s == 2) { if (tomb == (size_t)-1) tomb = i; }
        else if (m->keys[i] == k) { m->vals[i] = v; return 0; }
        i = (i + 1) & mask;
    }
    if (tomb != (size_t)-1) i = tomb; else m->used++;
    m->state[i] = 1; m->keys[i] = k; m->vals[i] = v; m->n++;
    return 0;
}

static void map_del(map_t *m, uint64_t k) {
    if (!m->cap) return;
    size_t mask = m->cap - 1, i = mix(k) & mask;
    for (;;) {
        uint8_t s = m->state[i];
        if (s == 0) return;
        if (s == 1 && m->keys[i] == k) { m->state[i] = 2; m->n--; return; }
        i = (i + 1) & mask;
    }
}

/* ------------------------------------------------------------------ accesses and small ordered maps */

typedef struct {
    int64_t seq;
    int32_t stream; /* stream slot (order of first use), not the trace's index */
    int32_t op;     /* string id, OP_NONE, OP_FREE, OP_LEAK */
    int32_t stack;  /* stack id or -1 */
    uint32_t idx;   /* position among the kernel's accesses: with seq, the access's identity */
    uint8_t write, ranged;
    uint64_t off, n;
} acc_t;

static inline int same_acc(const acc_t *a, const acc_t *b) { return a->seq == b->seq && a->idx == b->idx && a->op == b->op; }

/* An ordered list of accesses; keyed by stream where Python uses a dict (insertion order).
 * `at` says where the entry of each stream slot below 16 is (4 bits a slot: its index + 1,
 * 0 for none), for the entries among the first 15: finding a stream's entry reads that
 * entry only, not the ones before it (a block's readers are usually few streams, but a
 * scan of their 48-byte entries touched a cache line each). */
typedef struct {
    uint32_t n, cap;
    uint64_t at;
    acc_t *heap;
    acc_t one; /* storage while cap <= 1 (the common case) */
} accv_t;

#define AV_MAPPED 15 /* entries (and stream slots below 16) that `at` places */

static inline acc_t *av_items(accv_t *v) { return v->cap > 1 ? v->heap : &v->one; }
static inline void av_init(accv_t *v) { v->n = 0; v->cap = 1; v->heap = NULL; v->at = 0; }
static inline void av_clear(accv_t *v) { if (v->cap > 1) free(v->heap); av_init(v); }
static inline void av_reset(accv_t *v) { v->n = 0; v->at = 0; } /* emptied, its storage kept for reuse */

static int av_grow(accv_t *v) {
    uint32_t cap = v->cap * 2;
    acc_t *h = malloc(cap * sizeof(acc_t));
    if (!h) return -1;
    memcpy(h, av_items(v), v->n * sizeof(acc_t));
    if (v->cap > 1) free(v->heap);
    v->heap = h; v->cap = cap;
    return 0;
}

/* append a's entry (a->stream has none yet) */
static inline int av_push(accv_t *v, const acc_t *a) {
    if (v->n == v->cap && av_grow(v)) return -1;
    if ((uint32_t)a->stream < 16 && v->n < AV_MAPPED) v->at |= (uint64_t)(v->n + 1) << (4 * a->stream);
    av_items(v)[v->n++] = *a;
    return 0;
}

static inline acc_t *av_find(accv_t *v, int32_t stream) {
    acc_t *it = av_items(v);
    if ((uint32_t)stream < 16) {
        uint32_t q = (uint32_t)(v->at >> (4 * stream)) & 15;
        if (q) return &it[q - 1];
        if (v->n <= AV_MAPPED) return NULL;
    }
    for (uint32_t i = 0; i < v->n; i++) if (it[i].stream == stream) return &it[i];
    return NULL;
}

/* table[stream] = a */
static inline int av_set(accv_t *v, const acc_t *a) {
    acc_t *cur = av_find(v, a->stream);
    if (cur) { *cur = *a; return 0; }
    return av_push(v, a);
}

/* ------------------------------------------------------------------ blocks */

/* A segment's state; its bytes are [ends[k-1] (0 for k == 0), ends[k]) where k is its place.
 *
 * Its writes and reads (a dict by stream each, writes first) are kept in one of three forms,
 * named by the header byte (SEG_FORM) with, for the two inline forms, the counts:
 *  - three: at most three accesses in 21 bytes each (seq below 2^44, stream slot below
 *    2^12, idx below 2^6, op and stack ids below 2^24, off and n below 2^28), bit-packed
 *    after the header byte (p3_*), little-endian hosts only;
 *  - two: at most two accesses, packed (pacc_t, 28 bytes: a seq below 2^48, a stream slot
 *    and an idx below 2^16, off and n below 2^32), for fields too large for the first form;
 *  - wide: any number of whole accesses, on the heap (wide_t).
 * All three keep the state in one 64-byte line but the last. Which one is a matter of space
 * only: every operation reads the accesses back whole (seg_get) and the form is chosen again
 * whenever the state is written (seg_assign). The inline forms hold the common states
 * (nothing, a write, a write and a read, two reads, and a write with reads from two streams:
 * a block read by a second stream, as a hand-off between streams does). With two lines per
 * segment (two lists of 48-byte accesses) the segments of the ranged16 benchmark were twice
 * the L2 cache, and replaying range blocks waits on memory; in the wide form a segment's
 * state is a second, dependent load and an allocation. */
typedef struct {
    uint32_t seq_lo; uint16_t seq_hi; uint16_t stream;
    int32_t op, stack;
    uint16_t idx; uint8_t write, ranged;
    uint32_t off, n;
} pacc_t;

typedef struct { uint32_t nw, nr, cap; acc_t items[]; } wide_t; /* writes: items[0, nw), reads after */

enum { FORM_THREE, FORM_TWO, FORM_WIDE };
#define SEG_FORM(s) ((s)->hdr >> 4)
#define P3_SIZE 21
typedef union {
    uint8_t hdr; /* form << 4 | nr << 2 | nw (the counts: inline forms only) */
    struct { uint8_t hdr, pad[3]; pacc_t in[2]; } two;
    struct { uint8_t hdr, pad[7]; wide_t *w; } wide;
    uint8_t raw[64]; /* three: entry q at raw + 1 + 21q */
} seg_t; /* (a pool of them is aligned on a line by hand: seg_reserve) */
_Static_assert(sizeof(seg_t) == 64, "a segment's state is one cache line");

typedef struct { uint64_t ptr, size; uint8_t size_known; acc_t use; } ghost_t;

#define MAX_DIMS 8
typedef struct { i128 lo, run; uint8_t nd; i128 n[MAX_DIMS], s[MAX_DIMS]; } shape_t; /* values < 2^64 */
typedef struct { acc_t acc; shape_t shape; } vent_t; /* a strided access kept beside a block's state */
typedef struct { i128 a; uint64_t off, nb; uint8_t has_shape; shape_t shape; } pview_t; /* a VIEWS entry */

/* the entries of one VIEWS record and their hash index (slots: entry index or -1) */
typedef struct { pview_t *v; size_t n, cap; int32_t *tab; size_t tabcap; } pvset_t;

typedef struct {
    /* (what an access reads first, in the first cache line; with the next line, all that a
     * queued access to a part of a block in the grid form reads of the block) */
    uint32_t bid;
    int32_t stream, stack; /* allocation stream slot / stack, -1: none */
    uint32_t nseg, segcap; /* range mode: see segs */
    uint32_t ng, nviews;   /* reuse ghosts, strided entries */
    uint16_t pending;      /* its accesses in the queue (defer) */
    uint8_t nfs;           /* entries of fs_stream and fs_seq, FS_FULL: too many streams to say */
    uint8_t size_known, from_def, has_write;
    uint8_t capped; /* its segments were merged past the cap (counted once: Core.capped) */
    uint8_t hulled; /* a strided entry was merged into its segments (demote; counted once: Core.hulled) */
    uint8_t gbits;  /* range mode in the grid form (see own): 1 + log2 of its cell width; 0: not */
    uint8_t gwide;  /* in the grid form: a cell's state may be in the wide form (grid_clear must look) */
    uint64_t size;
    seg_t *segs;
    uint64_t *own; /* the grid form: see below */
    /* Accesses of this block from other streams than its allocation stream, in its state
     * now or once: the latest seq of each such stream (or FS_FULL). An access by the
     * allocation stream that all of them happen before cannot race with anything here,
     * and can wait in the queue (defer). */
    int32_t fs_stream[2];
    int64_t fs_seq[2];
    uint64_t *keys;
    uint64_t ptr, defn_gen;
    acc_t write;
    accv_t reads;
    /* Range mode (nseg > 0): the k-th segment in byte order is segs[slot] and ends at
     * byte hi (seg_hi, seg_slot). The states sit in a dense pool in no order, so that
     * splitting and merging move only the index of ends and slots: a search touches a few
     * cache lines, not every segment. The index has two forms:
     *  - narrow (keys != NULL): keys[k] = hi << 16 | slot, one word per segment, for ends
     *    below NARROW_INF (NARROW_INF itself: the unbounded end of a block of unknown
     *    size). The search finds the slot with the end: one array, half the bytes;
     *  - wide (keys == NULL): ends[k] and ord[k] (ord after segcap ends, in the same
     *    allocation), for a block with an end from 2^48 - 1 up (hand-made traces only).
     * A block whose range mode ends (its whole block written) keeps a narrow index and
     * its pool, empty, for the next time its bytes are split: in a training step the same
     * buffers go through both modes over and over. */
    /* The grid form of range mode, for a block whose ranged accesses each cover exactly one
     * of its G equal parts, its cells (a buffer cut into 2^k-byte slices, each touched alone):
     * cell x is bytes [x << (gbits - 1), (x + 1) << (gbits - 1)). Slot x of the pool holds the
     * state of cell x once an access has touched that cell alone (bit x of own), and the
     * base (grid_base) the state of every other cell: what the whole block had, and the
     * whole-block accesses since. A cell's state is found without a search and never split: its slot is
     * where it is. nseg is 1 (range mode) and the index unused while gbits is set; ungrid
     * makes the segments the index form holds for anything but such an access or a
     * whole-block one (the block then keeps the index until it returns to whole mode). */
    uint32_t ncells; /* (own is allocated for ncells cells, and kept across range modes) */
    u128 *ends;
    uint16_t *ord;
    accv_t uses;
    int32_t *recorded; uint32_t nrec, reccap;
    ghost_t *ghosts;
    vent_t *views; /* strided entries, oldest first */
} block_t;

/* The grid form's base state (see own): in the line before own's words, in their allocation
 * (not in the pool, so that a grid of 2^k parts fills a pool of 2^k states instead of half
 * of one twice as large; not in block_t, which every access reads). */
static inline seg_t *grid_base(const block_t *b) { return (seg_t *)b->own - 1; }

/* Where the segment pools come from (pool_alloc). A pool of 2^k states, k from 2 up to
 * POOL_CLASSES + 1, is cut from a chunk of ARENA_CHUNK bytes allocated on a 2 MiB boundary
 * with a request for huge pages, and goes back to the list of its size when freed (the
 * chunks stay until the core goes): a trace whose states outgrow the caches touches one
 * state's line per access in no order, and over 4 KiB pages most of those accesses also
 * missed the TLB. Larger pools (blocks of thousands of segments, from hand-made traces) are
 * plain allocations. */
#define ARENA_CHUNK ((size_t)4 << 20)
#define POOL_CLASSES 12 /* 2^2 .. 2^13 states: 256 B .. 512 KiB */
typedef struct {
    void *free[POOL_CLASSES + 2]; /* by k: freed pools, each holding the next one's address */
    char *cur, *end;              /* what is left of the newest chunk */
    void **chunks; size_t nchunks, chunkcap;
} arena_t;

/* A pool of cap states (a power of two from 4), on a cache line (see arena_t). */
static seg_t *pool_alloc(arena_t *A, uint32_t cap) {
    unsigned k = (unsigned)__builtin_ctz(cap);
    size_t bytes = (size_t)cap * sizeof(seg_t);
    if (k > POOL_CLASSES + 1) return aligned_alloc(64, bytes);
    if (A->free[k]) {
        void *p = A->free[k];
        A->free[k] = *(void **)p;
        return p;
    }
    if ((size_t)(A->end - A->cur) < bytes) {
        if (A->nchunks == A->chunkcap) {
            size_t cc = A->chunkcap ? A->chunkcap * 2 : 16;
            void **ch = realloc(A->chunks, cc * sizeof(void *));
            if (!ch) return NULL;
            A->chunks = ch; A->chunkcap = cc;
        }
        char *m = aligned_alloc((size_t)2 << 20, ARENA_CHUNK); /* (on a huge page's boundary) */
        if (!m) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(m, ARENA_CHUNK, MADV_HUGEPAGE); /* (a hint: without it, 4 KiB pages) */
#endif
        A->chunks[A->nchunks++] = m;
        A->cur = m; A->end = m + ARENA_CHUNK;
    }
    void *p = A->cur;
    A->cur += bytes;
    return p;
}

static void pool_free(arena_t *A, seg_t *p, uint32_t cap) {
    if (!p) return;
    unsigned k = (unsigned)__builtin_ctz(cap);
    if (k > POOL_CLASSES + 1) { free(p); return; }
    *(void **)p = A->free[k];
    A->free[k] = p;
}

static void arena_free(arena_t *A) {
    for (size_t i = 0; i < A->nchunks; i++) free(A->chunks[i]);
    free(A->chunks);
    memset(A, 0, sizeof *A);
}

typedef struct { uint64_t ptr, size; uint8_t size_known, valid; uint64_t gen; } bdef_t;

typedef struct { int64_t *v; uint32_t n; } snap_t; /* an event snapshot: entries past n are -1 */

/* one occurrence: the two accesses' seqs, the block, and the byte ranges of both accesses
 * (ranged bit 0: the later access's, bit 1: the earlier's; no bit: a whole-block access) */
typedef struct { int64_t seq, pseq; uint64_t addr, off, n, poff, pn; uint8_t ranged; } occ_t;

typedef struct {
    int kind;
    acc_t acc, prev;
    uint64_t bptr, bsize; uint8_t bsize_known; int32_t bstream, bstack;
    int64_t count, first, last;
    uint64_t *addrs; uint32_t naddr;
    occ_t *occ; uint32_t nocc, occcap;
    uint8_t merged; /* a data race on a block merged past the cap (Finding.merged_ranges) */
} finding_t;

/* one access of the kernel being replayed; seg: the segment its first byte was found in by
 * the prefetch pass (NO_SEG: not looked up), a hint range_access checks before it trusts it */
typedef struct {
    uint32_t bi, seg; uint8_t write, ranged; uint64_t off, n; block_t *b; const shape_t *shape;
    int64_t a; /* the access's block field: the id, or ~id for a write */
} target_t;
#define NO_SEG UINT32_MAX

/* one parsed field of a record */
enum { F_NIL, F_INT, F_OTHER };
typedef struct { uint8_t t; i128 v; } field_t;
enum { A_INT, A_TRIPLE, A_SHAPE };
typedef struct { uint8_t t; field_t f[3]; } afield_t;

typedef struct {
    PyObject_HEAD
    limits_t L;
    PyObject *free_op, *leak_op;
    int refs; /* free_op and leak_op are owned */
    int check_leaks_done;
    int64_t seq, events, records, dropped;
    /* streams */
    map_t sdef;      /* sidx -> index into sdev */
    i128 *sdev; size_t nsdef, sdefcap;
    map_t slot_of;   /* sidx -> slot */
    int32_t *sdense; uint32_t sdensecap; /* the same for indexes below DENSE_IDS (-1: none) */
    uint32_t nslots, scap;
    int64_t **cur;   /* cur[slot][slot'] */
    int64_t *host;
    uint32_t *sidx_of; int32_t *created_stack; i128 *slot_dev;
    /* events */
    map_t evmap;     /* handle -> index into snaps */
    snap_t *snaps; size_t nsnaps, snapcap;
    uint32_t *free_snaps; size_t nfree_snaps, free_snapcap;
    /* blocks */
    map_t blocks;    /* bid -> block_t* (live blocks with ids from DENSE_IDS up) */
    size_t nlive;    /* live blocks */
    block_t *spare; size_t nspare; /* freed block structs for reuse (a list through their first bytes) */
    block_t **bdense; uint32_t bdensecap; /* the same for ids below DENSE_IDS, looked up without hashing */
    map_t live_ptr;  /* ptr -> bid */
    map_t defs;      /* bid -> index into bdefs */
    bdef_t *bdefs; size_t nbdefs, bdefcap;
    map_t stale;     /* bid -> gen of the BLOCK_DEF whose block was freed */
    uint64_t gen;
    /* ghosts: a ring */
    ghost_t *ring; long ghead, gcount, gsince;
    /* findings */
    finding_t *found; size_t nfound;
    int32_t *ftab; size_t ftabcap;
    /* scratch */
    target_t *targets; size_t tcap;
    afield_t *afields; size_t acap;
    int64_t *reported; size_t nrep, repcap;
    uint64_t *sigs; uint32_t sigcap; /* grid_whole's */
    ghost_t *gscratch; size_t gscap;
    /* strided views: the VIEWS record for the next kernel, and the overlap tests' budget */
    int64_t views_seq; /* the kernel the pending entries belong to (0: none) */
    pvset_t pv[2]; int pvcur; /* pv[pvcur]: the pending table; the other one: a VIEWS record being read */
    int64_t vbudget_left, vgave_up;
    int64_t capped;  /* blocks whose segments were merged past the cap (Engine.capped) */
    int64_t hulled;  /* blocks with a strided entry merged over its hull (Engine.hulled) */
    long max_views;
    int views_on; /* the trace format this core replays has VIEWS records */
    acc_t *ascr; size_t ascap; /* scratch for segments' states (seg_scratch) */
    /* accesses that cannot race, queued to be applied in a batch (defer) */
    struct pend *pend; uint32_t npend, npend_index; /* (npend_index: those not GRID_HINT) */
    int64_t *allvec; uint32_t allcap; /* a clock every access happens before: the queue's checks find nothing */
    size_t poolbytes;  /* the segment pools of all blocks */
    arena_t arena;     /* where they come from (pool_alloc) */
    size_t queue_from; /* can_defer queues while poolbytes is at least this (native.QUEUE_FROM) */
    /* error */
    int err, err_field;
} Core;

static int fail(Core *c, int code, int field) { c->err = code; c->err_field = field; return -1; }
static int oom(Core *c) { return fail(c, E_NOMEM, 0); }

/* ------------------------------------------------------------------ msgpack reading */

enum { MP_OK = 0, MP_NEED = 1, MP_BAD = 2 };
enum { O_NIL, O_BOOL, O_INT, O_FLOAT, O_STR, O_BIN, O_EXT, O_ARR, O_MAP };
typedef struct { uint8_t t; i128 v; uint64_t n; } obj_t;

static inline uint64_t be(const uint8_t *p, int w) {
    uint64_t x = 0;
    for (int i = 0; i < w; i++) x = (x << 8) | p[i];
    return x;
}

static int utf8_ok(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t ch = s[i];
        if (ch < 0x80) { i++; continue; }
        if (ch >= 0xc2 && ch <= 0xdf) {
            if (i + 1 >= n || (s[i + 1] & 0xc0) != 0x80) return 0;
            i += 2; continue;
        }
        if (ch >= 0xe0 && ch <= 0xef) {
            if (i + 2 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xc0) != 0x80 || (c2 & 0xc0) != 0x80) return 0;
            if (ch == 0xe0 && c1 < 0xa0) return 0;
            if (ch == 0xed && c1 >= 0xa0) return 0; /* surrogates */
            i += 3; continue;
        }
        if (ch >= 0xf0 && ch <= 0xf4) {
            if (i + 3 >= n) return 0;
            uint8_t c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xc0) != 0x80 || (c2 & 0xc0) != 0x80 || (c3 & 0xc0) != 0x80) return 0;
            if (ch == 0xf0 && c1 < 0x90) return 0;
            if (ch == 0xf4 && c1 >= 0x90) return 0;
            i += 4; continue;
        }
        return 0;
    }
    return 1;
}

/* One object's header (and the payload of str/bin/ext); arrays and maps: their length. */
static int read_obj(const limits_t *L, const uint8_t **pp, const uint8_t *end, obj_t *o) {
    const uint8_t *p = *pp;
    uint64_t len = 0;
    int w;
    if (p >= end) return MP_NEED;
    uint8_t b = *p++;
    if (b <= 0x7f) { o->t = O_INT; o->v = b; goto done; }
    if (b >= 0xe0) { o->t = O_INT; o->v = (int8_t)b; goto done; }
    if (b <= 0x8f) { len = b & 0x0f; goto map; }
    if (b <= 0x9f) { len = b & 0x0f; goto arr; }
    if (b <= 0xbf) { len = b & 0x1f; goto str; }
    switch (b) {
    case 0xc0: o->t = O_NIL; goto done;
    case 0xc1: return MP_BAD;
    case 0xc2: case 0xc3: o->t = O_BOOL; o->v = b & 1; goto done;
    case 0xc4: case 0xc5: case 0xc6:
        w = 1 << (b - 0xc4);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        if ((uint64_t)(end - p) < len) return MP_NEED;
        if (len > L->max_bin) return MP_BAD;
        o->t = O_BIN; p += len; goto done;
    case 0xc7: case 0xc8: case 0xc9:
        w = 1 << (b - 0xc7);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto ext;
    case 0xca: if (end - p < 4) return MP_NEED; p += 4; o->t = O_FLOAT; goto done;
    case 0xcb: if (end - p < 8) return MP_NEED; p += 8; o->t = O_FLOAT; goto done;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        w = 1 << (b - 0xcc);
        if (end - p < w) return MP_NEED;
        o->t = O_INT; o->v = (i128)be(p, w); p += w; goto done;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        w = 1 << (b - 0xd0);
        if (end - p < w) return MP_NEED;
        uint64_t u = be(p, w);
        int64_t s;
        if (w == 1) s = (int8_t)u; else if (w == 2) s = (int16_t)u; else if (w == 4) s = (int32_t)u; else s = (int64_t)u;
        o->t = O_INT; o->v = s; p += w; goto done;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        len = (uint64_t)1 << (b - 0xd4);
        goto ext;
    case 0xd9: case 0xda: case 0xdb:
        w = 1 << (b - 0xd9);
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto str;
    case 0xdc: case 0xdd:
        w = b == 0xdc ? 2 : 4;
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto arr;
    case 0xde: case 0xdf:
        w = b == 0xde ? 2 : 4;
        if (end - p < w) return MP_NEED;
        len = be(p, w); p += w;
        goto map;
    }
    return MP_BAD;
str:
    if ((uint64_t)(end - p) < len) return MP_NEED;
    if (len > L->max_str || !utf8_ok(p, len)) return MP_BAD;
    o->t = O_STR; p += len; goto done;
ext: {
    if (end - p < 1) return MP_NEED;
    int8_t type = (int8_t)*p++;
    if ((uint64_t)(end - p) < len) return MP_NEED;
    if (len > L->max_ext) return MP_BAD;
    if (type < -1) return MP_BAD; /* msgpack refuses the other negative types ("code must be 0~127") */
    if (type == -1) { /* a timestamp: msgpack checks it */
        if (len == 8) { if ((be(p, 8) >> 34) > 999999999u) return MP_BAD; }
        else if (len == 12) { if (be(p, 4) > 999999999u) return MP_BAD; }
        else if (len != 4) return MP_BAD;
    }
    o->t = O_EXT; p += len; goto done;
}
arr:
    if (len > L->max_array) return MP_BAD;
    o->t = O_ARR; o->n = len; goto done;
map:
    if (len > L->max_map) return MP_BAD;
    o->t = O_MAP; o->n = len; goto done;
done:
    *pp = p;
    return MP_OK;
}

/* Skip `count` objects inside a container at nesting depth `depth` (the record is depth 1). */
static int skip_objs(const limits_t *L, const uint8_t **pp, const uint8_t *end, uint64_t count, uint8_t in_map,
                     int depth) {
    struct { uint64_t rem; uint8_t map; } st[MAX_DEPTH + 2];
    int sp = 0;
    st[0].rem = count; st[0].map = in_map;
    while (sp >= 0) {
        if (st[sp].rem == 0) { sp--; continue; }
        st[sp].rem--;
        int is_key = st[sp].map && (st[sp].rem & 1);
        obj_t o;
        int r = read_obj(L, pp, end, &o);
        if (r) return r;
        if (o.t == O_ARR || o.t == O_MAP) {
            if (is_key) return MP_BAD; /* an unhashable map key */
            if (depth + sp + 1 > MAX_DEPTH) return MP_BAD;
            sp++;
            st[sp].rem = o.t == O_MAP ? 2 * o.n : o.n;
            st[sp].map = o.t == O_MAP;
        }
    }
    return MP_OK;
}

/* Skip the rest of an object whose header is `o` (its elements, for a container). */
static int skip_rest(const limits_t *L, const uint8_t **pp, const uint8_t *end, const obj_t *o, int depth) {
    if (o->t == O_ARR) return skip_objs(L, pp, end, o->n, 0, depth);
    if (o->t == O_MAP) return skip_objs(L, pp, end, 2 * o->n, 1, depth);
    return MP_OK;
}

/* The encodings of an int that writers use for ids and offsets (fixints, 8 to 32 bits), decoded
 * in line: 1 and *v set, *pp moved; 0 for anything else (read_obj decides). */
#define QUICK_INT_MAX 5 /* the most bytes quick_i64 reads */
/* checked = 0: the caller knows that QUICK_INT_MAX bytes are there (no test of end) */
__attribute__((always_inline)) static inline int quick_i64_at(const uint8_t **pp, const uint8_t *end, int64_t *v,
                                                              int checked) {
    const uint8_t *p = *pp;
    if (checked && p >= end) return 0;
    uint8_t b = *p;
    if (b <= 0x7f) { *v = b; *pp = p + 1; return 1; }
    if (b == 0xcd) { /* (before the switch: offsets, sizes and ids of range traces) */
        if (checked && end - p < 3) return 0;
        *v = (uint16_t)(p[1] << 8 | p[2]); *pp = p + 3; return 1;
    }
    if (b >= 0xe0) { *v = (int8_t)b; *pp = p + 1; return 1; }
    switch (b) {
    case 0xcc: if (checked && end - p < 2) return 0; *v = p[1]; *pp = p + 2; return 1;
    case 0xce: if (checked && end - p < 5) return 0; *v = (uint32_t)be(p + 1, 4); *pp = p + 5; return 1;
    case 0xd0: if (checked && end - p < 2) return 0; *v = (int8_t)p[1]; *pp = p + 2; return 1;
    case 0xd1: if (checked && end - p < 3) return 0; *v = (int16_t)(uint16_t)(p[1] << 8 | p[2]); *pp = p + 3; return 1;
    case 0xd2: if (checked && end - p < 5) return 0; *v = (int32_t)(uint32_t)be(p + 1, 4); *pp = p + 5; return 1;
    }
    return 0;
}
__attribute__((always_inline)) static inline int quick_i64(const uint8_t **pp, const uint8_t *end, int64_t *v) {
    return quick_i64_at(pp, end, v, 1);
}

static inline int quick_int(const uint8_t **pp, const uint8_t *end, i128 *v) {
    int64_t x;
    if (!quick_i64(pp, end, &x)) return 0;
    *v = x;
    return 1;
}

/* A field at depth `depth`: an int, nil, or anything else (skipped). */
static inline int read_field(const limits_t *L, const uint8_t **pp, const uint8_t *end, field_t *f, int depth) {
    if (quick_int(pp, end, &f->v)) { f->t = F_INT; return MP_OK; }
    if (*pp < end && **pp == 0xc0) { f->t = F_NIL; ++*pp; return MP_OK; }
    obj_t o;
    int r = read_obj(L, pp, end, &o);
    if (r) return r;
    if (o.t == O_INT) { f->t = F_INT; f->v = o.v; return MP_OK; }
    f->t = o.t == O_NIL ? F_NIL : F_OTHER;
    if (o.t == O_ARR || o.t == O_MAP) {
        if (depth + 1 > MAX_DEPTH) return MP_BAD;
        return skip_rest(L, pp, end, &o, depth + 1);
    }
    return MP_OK;
}

static inline int read_access(const limits_t *L, const uint8_t **pp, const uint8_t *end, afield_t *a) {
    if (quick_int(pp, end, &a->f[0].v)) { a->t = A_INT; a->f[0].t = F_INT; return MP_OK; }
    if (*pp < end && **pp == 0x93) { /* [bid, offset, length] */
        const uint8_t *p = *pp + 1;
        if (quick_int(&p, end, &a->f[0].v) && quick_int(&p, end, &a->f[1].v) && quick_int(&p, end, &a->f[2].v)) {
            a->t = A_TRIPLE; a->f[0].t = a->f[1].t = a->f[2].t = F_INT;
            *pp = p;
            return MP_OK;
        }
    }
    obj_t o;
    int r = read_obj(L, pp, end, &o);
    if (r) return r;
    if (o.t == O_INT) { a->t = A_INT; a->f[0].t = F_INT; a->f[0].v = o.v; return MP_OK; }
    a->t = A_SHAPE;
    if (o.t == O_ARR && o.n == 3) {
        a->t = A_TRIPLE;
        for (int i = 0; i < 3; i++)
            if ((r = read_field(L, pp, end, &a->f[i], 2))) return r;
        return MP_OK;
    }
    if (o.t == O_ARR || o.t == O_MAP) return skip_rest(L, pp, end, &o, 2);
    return MP_OK;
}

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
    f->last = acc->seq;
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

static int check_free(Core *c, block_t *b, const acc_t *free_acc, int ghosts) {
    const int64_t *avec = c->cur[b->stream];
    acc_t *uses = av_items(&b->uses);
    for (uint32_t i = 0; i < b->uses.n; i++) {
        acc_t *use = &uses[i];
        int rec = 0;
        for (uint32_t k = 0; k < b->nrec; k++) if (b->recorded[k] == use->stream) { rec = 1; break; }
        if (rec || ordered(avec, use)) continue;
        if (report(c, K_MISSING, free_acc, use, b)) return -1;
        if (ghosts) add_ghost(c, b, use);
    }
    return 0;
}

/* ------------------------------------------------------------------ strided views (analyzer/overlap.py) */

#define VIEW_BUDGET 2000          /* overlap.BUDGET: steps one test may take */


static inline i128 shape_hi(const shape_t *x) {
    i128 h = x->lo + x->run;
    for (int k = 0; k < x->nd; k++) h += (x->n[k] - 1) * x->s[k];
    return h;
}

static inline i128 floordiv(i128 a, i128 b) { /* Python's a // b, b > 0 */
    i128 q = a / b;
    if ((a % b != 0) && (a < 0)) q--;
    return q;
}
static inline i128 imax(i128 a, i128 b) { return a > b ? a : b; }
static inline i128 imin(i128 a, i128 b) { return a < b ? a : b; }
static i128 igcd(i128 a, i128 b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) { i128 t = a % b; a = b; b = t; }
    return a;
}

typedef struct { i128 d, lo, hi; } term_t;
typedef struct { term_t t[2 * MAX_DIMS]; int m; i128 rmin[2 * MAX_DIMS + 1], rmax[2 * MAX_DIMS + 1], g[2 * MAX_DIMS + 1]; } terms_t;

/* overlap._search: 1 found, 0 not, -1 budget exhausted */
static int vsearch(const terms_t *T, int i, i128 c, i128 lo, i128 hi, long *budget) {
    i128 a = lo - c, b = hi - c;
    if (T->rmin[i] > b || T->rmax[i] < a) return 0;
    i128 gi = T->g[i];
    if (-floordiv(-a, gi) * gi > b) return 0;
    const term_t *t = &T->t[i];
    i128 t_lo = imax(t->lo, -floordiv(T->rmax[i + 1] - a, t->d));
    i128 t_hi = imin(t->hi, floordiv(b - T->rmin[i + 1], t->d));
    if (i == T->m - 1) return t_lo <= t_hi;
    for (i128 v = t_lo; v <= t_hi; v++) {
        if (--*budget < 0) return -1;
        int r = vsearch(T, i + 1, c + v * t->d, lo, hi, budget);
        if (r) return r;
    }
    return 0;
}

/* overlap._intersect: 1, 0, or -1 (no answer within the budget) */
static int vintersect(Core *c, const shape_t *x, const shape_t *y) {
    if (x->lo >= shape_hi(y) || y->lo >= shape_hi(x)) return 0;
    if (!x->nd && !y->nd) return 1;
    i128 cc = y->lo - x->lo;
    if (x->nd + y->nd == 1 || (x->nd == 1 && y->nd == 1 && x->s[0] == y->s[0])) {
        i128 d = x->nd ? x->s[0] : y->s[0];
        i128 tmin = x->nd ? 1 - x->n[0] : 0, tmax = y->nd ? y->n[0] - 1 : 0;
        return imax(tmin, -floordiv(cc + y->run - 1, d)) <= imin(tmax, floordiv(x->run - 1 - cc, d));
    }
    terms_t T;
    T.m = 0;
    for (int pass = 0; pass < 2; pass++) {
        const shape_t *v = pass ? y : x;
        for (int k = 0; k < v->nd; k++) {
            int j;
            for (j = 0; j < T.m && T.t[j].d != v->s[k]; j++) {}
            if (j == T.m) { T.t[j].d = v->s[k]; T.t[j].lo = T.t[j].hi = 0; T.m++; }
            if (pass) T.t[j].hi += v->n[k] - 1; else T.t[j].lo -= v->n[k] - 1;
        }
    }
    /* sorted by (hi - lo, -d), insertion order kept for ties (Python's sort is stable) */
    for (int i = 1; i < T.m; i++) {
        term_t key = T.t[i];
        int j = i - 1;
        while (j >= 0 && (T.t[j].hi - T.t[j].lo > key.hi - key.lo ||
                          (T.t[j].hi - T.t[j].lo == key.hi - key.lo && -T.t[j].d > -key.d))) {
            T.t[j + 1] = T.t[j];
            j--;
        }
        T.t[j + 1] = key;
    }
    T.rmin[T.m] = T.rmax[T.m] = T.g[T.m] = 0;
    for (int i = T.m - 1; i >= 0; i--) {
        T.rmin[i] = T.rmin[i + 1] + T.t[i].lo * T.t[i].d;
        T.rmax[i] = T.rmax[i + 1] + T.t[i].hi * T.t[i].d;
        T.g[i] = igcd(T.t[i].d, T.g[i + 1]);
    }
    long allowed = c->vbudget_left < VIEW_BUDGET ? (long)c->vbudget_left : VIEW_BUDGET;
    long budget = allowed;
    int r = vsearch(&T, 0, cc, 1 - y->run, x->run - 1, &budget);
    if (r < 0) c->vgave_up++;
    c->vbudget_left -= allowed - (budget > 0 ? budget : 0);
    return r;
}

static int voverlaps(Core *c, const shape_t *x, const shape_t *y) { return vintersect(c, x, y) != 0; }

/* overlap.overlaps_range: x against [lo, hi) */
static int voverlaps_range(Core *c, const shape_t *x, u128 lo_u, u128 hi_u) {
    i128 xhi = shape_hi(x);
    i128 hi = hi_u > (u128)xhi ? xhi : (i128)hi_u;
    i128 lo = lo_u < (u128)x->lo ? x->lo : (i128)lo_u;
    if (lo >= hi) return 0;
    if (!x->nd) return 1;
    if (x->nd == 1) {
        i128 n = x->n[0], d = x->s[0];
        return imax(0, floordiv(lo - x->run - x->lo, d) + 1) <= imin(n - 1, -floordiv(x->lo - hi, d) - 1);
    }
    shape_t r = {lo, hi - lo, 0, {0}, {0}};
    return voverlaps(c, x, &r);
}

/* overlap.covers: every byte of small in big (big NULL: the whole block) */
static int vcovers(Core *c, const shape_t *big, const shape_t *small) {
    if (!big) return 1;
    if (small->lo < big->lo || shape_hi(small) > shape_hi(big)) return 0;
    if (!big->nd) return 1;
    i128 delta = small->lo - big->lo;
    int same = small->nd == big->nd;
    for (int k = 0; same && k < big->nd; k++) same = small->n[k] == big->n[k] && small->s[k] == big->s[k];
    if (same) return delta + small->run <= big->run;
    if (small->nd) return 0;
    i128 first = shape_hi(small) - big->run;
    if (first > small->lo) return 0;
    shape_t starts = *big;
    starts.run = 1;
    shape_t r = {first, small->lo - first + 1, 0, {0}, {0}};
    return vintersect(c, &starts, &r) == 1;
}

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
    if (t <= T_KERNEL && f[STACK_FIELD[t]].t == F_OTHER) return fail(c, E_STACK, STACK_FIELD[t]);
    switch (t) {
    case T_KERNEL:
        return kernel(c, f, nacc);
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
                    if (ot.t == O_INT && ((ot.v >= T_STREAM_CREATED && ot.v <= T_KERNEL) || (ot.v == T_VIEWS && c->views_on)) &&
                        o.n >= (uint64_t)MIN_LENGTH[(int)ot.v])
                        t = (int)ot.v;
                    else if ((r = skip_rest(L, &p, end, &ot, 2)) == MP_OK)
                        r = skip_objs(L, &p, end, o.n - 1, 0, 1);
                }
            } else {
                r = skip_rest(L, &p, end, &o, 1);
            }
        }
        if (r == MP_NEED) break;
        if (r == MP_BAD) { status = ST_BAD; len = -1; break; }
        if (t < 0) { status = ST_SLOW; len = p - (base + pos); break; }
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
    map_free(&c->sdef); map_free(&c->slot_of); map_free(&c->evmap);
    for (uint32_t s = 0; s < c->nslots; s++) free(c->cur[s]);
    free(c->cur); free(c->host); free(c->sidx_of); free(c->created_stack); free(c->slot_dev); free(c->sdev);
    for (size_t i = 0; i < c->nsnaps; i++) free(c->snaps[i].v);
    free(c->snaps); free(c->free_snaps); free(c->bdefs);
    for (size_t i = 0; i < c->nfound; i++) { free(c->found[i].addrs); free(c->found[i].occ); }
    free(c->found); free(c->ftab); free(c->ring); free(c->gscratch);
    free(c->targets); free(c->afields); free(c->sigs); free(c->reported); for (int k = 0; k < 2; k++) { free(c->pv[k].v); free(c->pv[k].tab); }
    free(c->bdense); free(c->sdense); free(c->ascr); free(c->pend); free(c->allvec);
    arena_free(&c->arena); /* (after the blocks: they give their pools back to it) */
    if (c->refs) { Py_XDECREF(c->free_op); Py_XDECREF(c->leak_op); }
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Core_methods[] = {
    {"replay", (PyCFunction)Core_replay, METH_VARARGS, "replay(buffer, pos, end) -> (status, pos, ...)"},
    {"define_stream", (PyCFunction)Core_define_stream, METH_VARARGS, "define_stream(sidx, device)"},
    {"define_block", (PyCFunction)Core_define_block, METH_VARARGS, "define_block(bid, ptr, size, forget)"},
    {"findings", (PyCFunction)Core_findings, METH_VARARGS, "findings(start) -> list of tuples"},
    {"check_leaks", (PyCFunction)Core_check_leaks, METH_NOARGS, "the end-of-trace leak check (once)"},
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

PyMODINIT_FUNC PyInit__core(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) { Py_DECREF(&CoreType); Py_DECREF(m); return NULL; }
    return m;
}
