/* The compiled replay core's shared declarations: limits, the state's types and the Core
 * struct. The tables copied from Python (record types, minimum lengths, stack fields,
 * error codes) are in _tables.h, which csrc/gen_tables.py writes at build time. */
#ifndef NPUSAN_CORE_H
#define NPUSAN_CORE_H

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
/* String ids below this are kept one bit each (at most 2 MiB, grown only as far as the ids
 * a trace defines): a hash map of a hostile trace's 1.3 million string ids took 17 bytes
 * an id, 107 MB at its peak (while it rehashed); the ids above, if any, in the map. */
#define STR_BIT_IDS (1u << 24)

enum { ST_NEED = 0, ST_SLOW = 1, ST_BAD = 2, ST_ERROR = 3 };
enum { K_DATA_RACE = 0, K_MISSING = 1, K_REUSE = 2 };
#define OP_NONE (-1)
#define OP_FREE (-2)
#define OP_LEAK (-3)

#include "_tables.h"
/* The rules assume the event records are the types T_STREAM_CREATED .. T_KERNEL and
 * T_HOST_ACCESS (format 1.2), each with a
 * stack field: a stack id or nil; any other type (a map, a string ...) makes the record
 * malformed (E_STACK), as in engine.STACK_FIELD (docs/trace-format.md section 5.2). */
_Static_assert(sizeof STACK_FIELD / sizeof *STACK_FIELD == T_HOST_ACCESS + 1, "STACK_FIELD ends at T_HOST_ACCESS");
_Static_assert(T_STREAM_CREATED < T_KERNEL && T_VIEWS < N_RECORD_TYPES, "record type layout");

#include "map.h"

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

/* engine.PendingFree: a free whose use by another stream was not yet ordered before the
 * allocation stream, judged when that stream next allocates (or at the end of the trace);
 * the freed block's ptr, size, stream and stack, as a finding names them, and the order
 * in which pending frees were found. */
typedef struct { acc_t free, use; uint64_t ptr, size, order; uint8_t size_known; int32_t stream, stack; } pfree_t;
typedef struct { pfree_t *v; uint32_t n, cap; } pflist_t; /* the pending frees of one allocation stream */

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
    map_t strs;      /* the string ids defined (STR) from STR_BIT_IDS up: a kernel's op names one (check_op) */
    uint64_t *strbits; size_t strwords; /* the same below STR_BIT_IDS, one bit per id */
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
    /* pending frees by allocation stream slot (pfl[slot], npfl entries allocated) */
    pflist_t *pfl; uint32_t npfl; uint64_t pfcount; size_t pfpending;
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
    /* a graph capture is open (format 1.3): every record goes back to Python (set_capturing) */
    int slow_all;
    /* record types of no known kind that Python has already warned about (skip_type): the
     * core skips their records itself, counting them by type, at a kernel's cost or less */
    map_t skip;
    /* error */
    int err, err_field;
} Core;

static int fail(Core *c, int code, int field) { c->err = code; c->err_field = field; return -1; }
static int oom(Core *c) { return fail(c, E_NOMEM, 0); }

#endif
