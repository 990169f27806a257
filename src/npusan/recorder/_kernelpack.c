/* The kill-safe recorder's KERNEL record, packed in one C call.
 *
 * Why: with a durable trace the recorder encodes every kernel before the op returns, in
 * the middle of torch's dispatch, where the Python encoder runs with cold caches (about
 * twice as slow as the same code in a batch: docs/benchmarks.md). For the common kernel
 * -- its op name, stream and stack already interned, every access to a block already
 * defined, no strided view -- this returns the msgpack bytes of exactly the record
 * Recorder._kernel_record builds (and the writer's msgpack.Packer would produce). For
 * anything else it returns None and the Python encoder does the work (definitions first,
 * VIEWS records): that path stays the reference, and the tests hold the
 * two to the same bytes.
 *
 * pack(op_sids, sidx, stack_ids, blocks, name, device, handle, spans, key) -> bytes | None
 *   op_sids: {name: string id}; sidx: {(device, handle): stream index};
 *   stack_ids: {key: stack id or None}; blocks: {base: [bid, size or None, extent]};
 *   spans: list of (base, offset, extent, storage nbytes, is_write, view).
 * It changes one thing, as the Python encoder does: the extent of a block of unknown size
 * grows to cover the bytes accessed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* attribute names, interned at import */
static PyObject *str_map, *str_pos, *str_limit, *str_commit, *str_commit_slow, *str_next_bid, *str_popleft;

#define KERNEL_TYPE 17 /* records.KERNEL, checked at import by the Python side */

typedef struct {
    unsigned char *p;
} out_t;

static inline void put_u8(out_t *o, unsigned v) { *o->p++ = (unsigned char)v; }

static inline void put_be(out_t *o, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        *o->p++ = (unsigned char)(v >> (8 * i));
}

/* msgpack's smallest form, as msgpack-python packs a Python int (unsigned forms for
 * values >= 0). At most 9 bytes. */
static __attribute__((noinline)) void put_int(out_t *o, int64_t d)
{
    if (d < -(1LL << 5)) {
        if (d < -(1LL << 15)) {
            if (d < -(1LL << 31)) {
                put_u8(o, 0xd3);
                put_be(o, (uint64_t)d, 8);
            } else {
                put_u8(o, 0xd2);
                put_be(o, (uint64_t)(uint32_t)(int32_t)d, 4);
            }
        } else if (d < -(1 << 7)) {
            put_u8(o, 0xd1);
            put_be(o, (uint64_t)(uint16_t)(int16_t)d, 2);
        } else {
            put_u8(o, 0xd0);
            put_u8(o, (unsigned char)(int8_t)d);
        }
    } else if (d < (1 << 7)) {
        put_u8(o, (unsigned char)(int8_t)d); /* positive or negative fixint */
    } else if (d < (1LL << 16)) {
        if (d < (1 << 8)) {
            put_u8(o, 0xcc);
            put_u8(o, (unsigned char)d);
        } else {
            put_u8(o, 0xcd);
            put_be(o, (uint64_t)d, 2);
        }
    } else if (d < (1LL << 32)) {
        put_u8(o, 0xce);
        put_be(o, (uint64_t)d, 4);
    } else {
        put_u8(o, 0xcf);
        put_be(o, (uint64_t)d, 8);
    }
}

static inline void put_array(out_t *o, Py_ssize_t n)
{
    if (n < 16) {
        put_u8(o, 0x90 | (unsigned)n);
    } else if (n < 0x10000) {
        put_u8(o, 0xdc);
        put_be(o, (uint64_t)n, 2);
    } else {
        put_u8(o, 0xdd);
        put_be(o, (uint64_t)n, 4);
    }
}

/* A Python int as int64, or 0 with *ok cleared (not an int, or out of range). */
static inline int64_t as_i64(PyObject *v, int *ok)
{
    if (!PyLong_CheckExact(v)) {
        *ok = 0;
        return 0;
    }
    int overflow = 0;
    long long d = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (d == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        *ok = 0;
        return 0;
    }
    return (int64_t)d;
}

/* A dict value, borrowed; NULL (no error set) when missing or when the lookup raised. */
static inline PyObject *lookup(PyObject *d, PyObject *k)
{
    PyObject *v = PyDict_GetItemWithError(d, k);
    if (v == NULL)
        PyErr_Clear();
    return v;
}

/* A growable output buffer. */
typedef struct {
    unsigned char *base, *end;
    out_t o;
    uint32_t counts[32]; /* records encoded, by type: added to the encoder's counts at the end */
} obuf_t;

static int ob_reserve(obuf_t *b, size_t n)
{
    if ((size_t)(b->end - b->o.p) >= n)
        return 0;
    size_t used = (size_t)(b->o.p - b->base), cap = (size_t)(b->end - b->base);
    size_t want = cap ? cap : 1024;
    while (want - used < n)
        want *= 2;
    unsigned char *nb = PyMem_Realloc(b->base, want);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->base = nb;
    b->o.p = nb + used;
    b->end = nb + want;
    return 0;
}

static int ob_bytes(obuf_t *b, PyObject *bytes)
{
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    if (ob_reserve(b, (size_t)n) < 0)
        return -1;
    memcpy(b->o.p, PyBytes_AS_STRING(bytes), (size_t)n);
    b->o.p += n;
    return 0;
}

#define SPAN_MAX 28 /* one access: array header + 3 ints of 9 bytes */
#define HEAD_MAX 41 /* the record's array header + 4 ints */

/* The KERNEL record of (op_sids, sidx, stack_ids, blocks, name, device, handle, spans, key)
 * appended to b: 1, or 0 with b unchanged when the Python encoder must build it, -1 on an
 * error (out of memory). */
static int pack_kernel(PyObject *const *args, obuf_t *b)
{
    PyObject *op_sids = args[0], *sidx_map = args[1], *stack_ids = args[2], *blocks = args[3];
    PyObject *name = args[4], *device = args[5], *handle = args[6], *spans = args[7], *key = args[8];
    if (!PyDict_CheckExact(op_sids) || !PyDict_CheckExact(sidx_map) || !PyDict_CheckExact(stack_ids) ||
        !PyDict_CheckExact(blocks) || !PyList_CheckExact(spans))
        return 0;
    int ok = 1;
    PyObject *op = lookup(op_sids, name);
    if (op == NULL)
        return 0;
    int64_t op_id = as_i64(op, &ok);
    PyObject *skey = PyTuple_Pack(2, device, handle);
    if (skey == NULL)
        return -1;
    PyObject *sv = lookup(sidx_map, skey);
    Py_DECREF(skey);
    if (sv == NULL)
        return 0;
    int64_t sidx = as_i64(sv, &ok);
    int64_t stack = 0;
    int has_stack = 0;
    if (key != Py_None) {
        PyObject *st = lookup(stack_ids, key);
        if (st == NULL)
            return 0;
        if (st != Py_None) {
            stack = as_i64(st, &ok);
            has_stack = 1;
        }
    }
    if (!ok)
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(spans);
    if (ob_reserve(b, HEAD_MAX + (size_t)n * SPAN_MAX) < 0)
        return -1;
    unsigned char *start = b->o.p;
    out_t *o = &b->o;
    put_array(o, 4 + n);
    put_int(o, KERNEL_TYPE);
    put_int(o, sidx);
    put_int(o, op_id);
    if (has_stack)
        put_int(o, stack);
    else
        put_u8(o, 0xc0);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *sp = PyList_GET_ITEM(spans, i);
        if (!PyTuple_CheckExact(sp) || PyTuple_GET_SIZE(sp) != 6 || PyTuple_GET_ITEM(sp, 5) != Py_None)
            goto fallback; /* a strided view (a VIEWS record) or an odd span */
        PyObject *entry = lookup(blocks, PyTuple_GET_ITEM(sp, 0));
        if (entry == NULL || !PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 3)
            goto fallback; /* first seen here: a BLOCK_DEF comes first */
        int64_t bid = as_i64(PyList_GET_ITEM(entry, 0), &ok);
        int64_t off = as_i64(PyTuple_GET_ITEM(sp, 1), &ok);
        int64_t ext = as_i64(PyTuple_GET_ITEM(sp, 2), &ok);
        int64_t total = as_i64(PyTuple_GET_ITEM(sp, 3), &ok);
        PyObject *w = PyTuple_GET_ITEM(sp, 4);
        if (!ok || (w != Py_True && w != Py_False) || off < 0 || ext < 0 || off > INT64_MAX - ext)
            goto fallback;
        if (PyList_GET_ITEM(entry, 1) == Py_None) {
            /* a block of unknown size (from before recording): its extent grows to cover
             * what is accessed, as the Python encoder does (a fallback later redoes it: the
             * same maximum) */
            int64_t extent = as_i64(PyList_GET_ITEM(entry, 2), &ok);
            if (!ok)
                goto fallback;
            if (off + ext > extent) {
                PyObject *grown = PyLong_FromLongLong(off + ext);
                if (grown == NULL) {
                    PyErr_Clear();
                    goto fallback;
                }
                PyList_SetItem(entry, 2, grown); /* steals grown, drops the old extent */
            }
        }
        int64_t a = w == Py_True ? ~bid : bid;
        if (off == 0 && ext >= total) {
            put_int(o, a);
        } else {
            put_u8(o, 0x93);
            put_int(o, a);
            put_int(o, off);
            put_int(o, ext);
        }
    }
    return 1;

fallback:
    o->p = start;
    return 0;
}

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "pack() takes 9 arguments");
        return NULL;
    }
    obuf_t b = {NULL, NULL, {NULL}, {0}};
    int r = pack_kernel(args, &b);
    PyObject *out = r < 0 ? NULL : r == 0 ? Py_NewRef(Py_None)
                                         : PyBytes_FromStringAndSize((const char *)b.base, b.o.p - b.base);
    PyMem_Free(b.base);
    return out;
}

/* The fields of the spec tuple Recorder builds at start (event_queue.py, _compiled_drain_spec). */
enum {
    S_ENC, S_EV_CREATED, S_EV_DELETED, S_EV_RECORDED, S_EV_WAITED, S_REC, S_ALLOC, S_FREE,
    S_STREAMS, S_STACK_IDS, S_BLOCKS, S_BASES, S_FREE_BIDS, S_COUNTS, S_HEAPPUSH, S_HEAPPOP,
    S_RECS, S_PACK, S_BUF, S_KERNEL, S_KERNEL_RECORD, S_OP_SIDS, S_SIDX, S_SINK, S_LEN
};

#define T_EVENT_CREATED 6
#define T_EVENT_DELETED 7
#define T_EVENT_RECORD 8
#define T_EVENT_WAIT 9
#define T_ALLOC 13
#define T_FREE 14

/* The records b holds, added to the encoder's counts (a dict by record type); an
 * exception already pending is kept. */
static int flush_counts(PyObject *const *sp, obuf_t *b)
{
    PyObject *counts = sp[S_COUNTS];
    PyObject *exc, *val, *tb;
    PyErr_Fetch(&exc, &val, &tb);
    int r = 0;
    for (int t = 0; t < 32; t++) {
        if (!b->counts[t])
            continue;
        PyObject *k = PyLong_FromLong(t);
        PyObject *v = k == NULL ? NULL : PyDict_GetItemWithError(counts, k);
        long n = v == NULL ? 0 : PyLong_AsLong(v);
        PyObject *nv = PyErr_Occurred() ? NULL : PyLong_FromLong(n + (long)b->counts[t]);
        if (nv == NULL || PyDict_SetItem(counts, k, nv) < 0)
            r = -1;
        Py_XDECREF(nv);
        Py_XDECREF(k);
        b->counts[t] = 0;
        if (r < 0)
            break;
    }
    if (exc != NULL) {
        PyErr_Clear();
        PyErr_Restore(exc, val, tb);
        return -1;
    }
    return r;
}

/* The stream index of (device, handle) in the encoder, or -1 when not defined yet. */
static int64_t stream_of(PyObject *streams, PyObject *handle, PyObject *device)
{
    PyObject *k = PyTuple_Pack(2, device, handle);
    if (k == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *v = lookup(streams, k);
    Py_DECREF(k);
    int ok = 1;
    int64_t s = v == NULL ? -1 : as_i64(v, &ok);
    return ok ? s : -1;
}

/* The stack id of a stack key: 1 with *has set (or cleared for no stack), 0 when the
 * Python side must resolve it (a key not seen yet). */
static int stack_of(PyObject *stack_ids, PyObject *key, int64_t *sid, int *has)
{
    *has = 0;
    if (key == Py_None)
        return 1;
    PyObject *v = lookup(stack_ids, key);
    if (v == NULL || v == Py_None)
        return 0;
    int ok = 1;
    *sid = as_i64(v, &ok);
    *has = 1;
    return ok;
}

static inline void put_stack(out_t *o, int has, int64_t sid)
{
    if (has)
        put_int(o, sid);
    else
        put_u8(o, 0xc0);
}

/* bisect.bisect_left / bisect_right over a list of ints; -1 when an item is not an int. */
static Py_ssize_t bisect(PyObject *list, int64_t x, int right)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(list);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        int ok = 1;
        int64_t v = as_i64(PyList_GET_ITEM(list, mid), &ok);
        if (!ok)
            return -1;
        if (right ? x < v : !(v < x))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* One queued allocation, as Recorder._alloc -> RecordEncoder.memory_allocated encodes it,
 * when nothing unusual is due: 1 done, 0 for the Python side (nothing changed), -1 error. */
static int enc_alloc(PyObject *const *sp, PyObject *args, obuf_t *b)
{
    if (PyTuple_GET_SIZE(args) != 5)
        return 0;
    PyObject *ptr = PyTuple_GET_ITEM(args, 0), *handle = PyTuple_GET_ITEM(args, 1);
    PyObject *device = PyTuple_GET_ITEM(args, 2), *size = PyTuple_GET_ITEM(args, 3);
    int64_t sid = 0;
    int has = 0, ok = 1;
    if (!stack_of(sp[S_STACK_IDS], PyTuple_GET_ITEM(args, 4), &sid, &has))
        return 0;
    PyObject *blocks = sp[S_BLOCKS], *bases = sp[S_BASES];
    int64_t p = as_i64(ptr, &ok);
    int64_t n = size == Py_None ? 0 : as_i64(size, &ok);
    if (!ok || p < 0 || n < 0 || p > INT64_MAX - n)
        return 0;
    PyObject *live = lookup(blocks, ptr);
    if (live != NULL)
        return 0; /* an allocation at a live base: the free was not seen */
    Py_ssize_t i = bisect(bases, p, 0);
    if (i < 0)
        return 0;
    if (n && i < PyList_GET_SIZE(bases)) {
        int64_t nx = as_i64(PyList_GET_ITEM(bases, i), &ok);
        if (!ok || nx < p + n)
            return 0; /* known bases inside: the Python side forgets them */
    }
    int64_t sidx = stream_of(sp[S_STREAMS], handle, device);
    if (sidx < 0)
        return 0;
    /* nothing can send it back to Python from here on */
    PyObject *bid;
    if (PyList_GET_SIZE(sp[S_FREE_BIDS])) {
        bid = PyObject_CallOneArg(sp[S_HEAPPOP], sp[S_FREE_BIDS]);
    } else {
        bid = PyObject_GetAttr(sp[S_ENC], str_next_bid);
        if (bid != NULL) {
            int64_t v = as_i64(bid, &ok);
            PyObject *next = ok && v < INT64_MAX ? PyLong_FromLongLong(v + 1) : NULL;
            if (next == NULL && !PyErr_Occurred())
                PyErr_SetString(PyExc_OverflowError, "block id out of range");
            if (next == NULL || PyObject_SetAttr(sp[S_ENC], str_next_bid, next) < 0) {
                Py_XDECREF(next);
                Py_CLEAR(bid);
            } else {
                Py_DECREF(next);
            }
        }
    }
    if (bid == NULL)
        return -1;
    int64_t bidv = as_i64(bid, &ok);
    PyObject *entry = PyList_New(3);
    if (entry == NULL || !ok) {
        Py_XDECREF(entry);
        Py_DECREF(bid);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_OverflowError, "block id out of range");
        return -1;
    }
    Py_INCREF(size);
    PyList_SET_ITEM(entry, 0, bid); /* steals bid */
    PyList_SET_ITEM(entry, 1, size);
    PyList_SET_ITEM(entry, 2, PyLong_FromLong(1));
    if (PyList_GET_ITEM(entry, 2) == NULL || PyDict_SetItem(blocks, ptr, entry) < 0) {
        Py_DECREF(entry);
        return -1;
    }
    Py_DECREF(entry);
    Py_ssize_t at = bisect(bases, p, 1);
    if (at < 0 || PyList_Insert(bases, at, ptr) < 0)
        return -1;
    if (ob_reserve(b, 1 + 6 * 9) < 0)
        return -1;
    b->counts[T_ALLOC]++;
    put_u8(&b->o, 0x96);
    put_int(&b->o, T_ALLOC);
    put_int(&b->o, bidv);
    put_int(&b->o, p);
    if (size == Py_None)
        put_u8(&b->o, 0xc0);
    else
        put_int(&b->o, n);
    put_int(&b->o, sidx);
    put_stack(&b->o, has, sid);
    return 1;
}

/* One queued free, as Recorder._free -> RecordEncoder.memory_freed encodes it. */
static int enc_free(PyObject *const *sp, PyObject *args, obuf_t *b)
{
    if (PyTuple_GET_SIZE(args) != 2)
        return 0;
    PyObject *ptr = PyTuple_GET_ITEM(args, 0);
    int64_t sid = 0;
    int has = 0, ok = 1;
    if (!stack_of(sp[S_STACK_IDS], PyTuple_GET_ITEM(args, 1), &sid, &has))
        return 0;
    PyObject *entry = lookup(sp[S_BLOCKS], ptr);
    if (entry == NULL)
        return 0; /* not a live block (allocated before recording): nothing to write */
    int64_t p = as_i64(ptr, &ok);
    if (!ok || !PyList_CheckExact(entry) || PyList_GET_SIZE(entry) != 3)
        return 0;
    PyObject *bid = PyList_GET_ITEM(entry, 0);
    int64_t bidv = as_i64(bid, &ok);
    PyObject *bases = sp[S_BASES];
    Py_ssize_t i = bisect(bases, p, 0);
    if (!ok || i < 0 || i >= PyList_GET_SIZE(bases))
        return 0;
    Py_INCREF(bid);
    int r = PyDict_DelItem(sp[S_BLOCKS], ptr);
    if (r == 0)
        r = PySequence_DelItem(bases, i);
    if (r == 0) {
        PyObject *res = PyObject_CallFunctionObjArgs(sp[S_HEAPPUSH], sp[S_FREE_BIDS], bid, NULL);
        r = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(bid);
    if (r < 0 || ob_reserve(b, 1 + 3 * 9) < 0)
        return -1;
    b->counts[T_FREE]++;
    put_u8(&b->o, 0x93);
    put_int(&b->o, T_FREE);
    put_int(&b->o, bidv);
    put_stack(&b->o, has, sid);
    return 1;
}

/* One queued event hook (created, deleted, recorded, waited: no stack). */
static int enc_event(PyObject *const *sp, int t, PyObject *args, obuf_t *b)
{
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    int with_stream = t == T_EVENT_RECORD || t == T_EVENT_WAIT;
    if (na != (with_stream ? 3 : 1))
        return 0;
    int ok = 1;
    int64_t ev = as_i64(PyTuple_GET_ITEM(args, 0), &ok);
    if (!ok)
        return 0;
    int64_t sidx = 0;
    if (with_stream) {
        sidx = stream_of(sp[S_STREAMS], PyTuple_GET_ITEM(args, 1), PyTuple_GET_ITEM(args, 2));
        if (sidx < 0)
            return 0;
    }
    if (ob_reserve(b, 1 + 4 * 9) < 0)
        return -1;
    b->counts[t]++;
    put_u8(&b->o, with_stream ? 0x94 : 0x93);
    put_int(&b->o, t);
    put_int(&b->o, ev);
    if (with_stream)
        put_int(&b->o, sidx);
    put_u8(&b->o, 0xc0);
    return 1;
}

static int take_recs(PyObject *const *sp, obuf_t *b);

/* A kernel queued by another thread (Recorder._drain's kernel path): packed here when no
 * definition is due, else Recorder._kernel_record builds it. */
static int enc_kernel(PyObject *const *sp, PyObject *args, obuf_t *b)
{
    if (PyTuple_GET_SIZE(args) != 5)
        return 0;
    PyObject *pa[9] = {sp[S_OP_SIDS], sp[S_SIDX], sp[S_STACK_IDS], sp[S_BLOCKS], PyTuple_GET_ITEM(args, 0),
                       PyTuple_GET_ITEM(args, 1), PyTuple_GET_ITEM(args, 2), PyTuple_GET_ITEM(args, 3),
                       PyTuple_GET_ITEM(args, 4)};
    int r = pack_kernel(pa, b);
    if (r == 0) { /* the definitions it hands the sink, then the record, packed in order */
        PyObject *rec = PyObject_Call(sp[S_KERNEL_RECORD], args, NULL);
        r = rec == NULL || PyList_Append(sp[S_RECS], rec) < 0 ? -1 : take_recs(sp, b);
        Py_XDECREF(rec);
    }
    if (r < 0)
        return -1;
    b->counts[KERNEL_TYPE]++;
    return 1;
}

/* Pack what the Python side handed to the sink (its deferred list) into the output. */
static int take_recs(PyObject *const *sp, obuf_t *b)
{
    /* as MappedFileSink._packed_deferred: a record that does not pack raises, with the
     * records before it packed and the rest dropped */
    PyObject *recs = sp[S_RECS];
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(recs); i++) {
        PyObject *rec = Py_NewRef(PyList_GET_ITEM(recs, i));
        PyObject *data = PyObject_CallOneArg(sp[S_PACK], rec);
        Py_DECREF(rec);
        r = data == NULL ? -1 : PyBytes_Check(data) ? ob_bytes(b, data) : -1;
        if (r < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "pack() returned no bytes");
        Py_XDECREF(data);
    }
    if (PyList_SetSlice(recs, 0, PyList_GET_SIZE(recs), NULL) < 0)
        r = -1;
    return r;
}

/* The fields of a call's spec (its first argument), checked; NULL with an error. */
static PyObject *const *spec_of(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *usage)
{
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    PyObject *spec = args[0];
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != S_LEN) {
        PyErr_SetString(PyExc_TypeError, "a malformed spec");
        return NULL;
    }
    PyObject *const *sp = &PyTuple_GET_ITEM(spec, 0);
    if (!PyList_CheckExact(sp[S_RECS]) || !PyByteArray_Check(sp[S_BUF]) || !PyDict_CheckExact(sp[S_BLOCKS]) ||
        !PyList_CheckExact(sp[S_BASES]) || !PyList_CheckExact(sp[S_FREE_BIDS]) || !PyDict_CheckExact(sp[S_STREAMS]) ||
        !PyDict_CheckExact(sp[S_STACK_IDS]) || !PyDict_CheckExact(sp[S_COUNTS]) || !PyDict_CheckExact(sp[S_OP_SIDS]) ||
        !PyDict_CheckExact(sp[S_SIDX])) {
        PyErr_SetString(PyExc_TypeError, "a malformed spec");
        return NULL;
    }
    return sp;
}

/* Every (fn, args) of the queue, in order, encoded into b as Recorder._drain would encode
 * it: allocations, frees, event hooks and kernels that need no new definition here,
 * anything else called (fn(*args)) and what it handed the sink packed in its place.
 * 0, or -1 on an error (what was encoded before it stays in b). */
static int drain_into(PyObject *const *sp, PyObject *q, obuf_t *b)
{
    if (PyList_GET_SIZE(sp[S_RECS]) && take_recs(sp, b) < 0)
        return -1;
    if (PyObject_Length(q) <= 0)
        return 0;
    int r = 0;
    while (r >= 0 && PyObject_Length(q) > 0) {
        PyObject *item = PyObject_CallMethodNoArgs(q, str_popleft);
        if (item == NULL) {
            r = -1;
            break;
        }
        r = 0;
        if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2 && PyTuple_CheckExact(PyTuple_GET_ITEM(item, 1))) {
            PyObject *fn = PyTuple_GET_ITEM(item, 0), *fa = PyTuple_GET_ITEM(item, 1);
            if (PyMethod_Check(fn)) {
                PyObject *f = PyMethod_GET_FUNCTION(fn), *me = PyMethod_GET_SELF(fn);
                if (me == sp[S_ENC]) {
                    if (f == sp[S_EV_CREATED])
                        r = enc_event(sp, T_EVENT_CREATED, fa, b);
                    else if (f == sp[S_EV_DELETED])
                        r = enc_event(sp, T_EVENT_DELETED, fa, b);
                    else if (f == sp[S_EV_RECORDED])
                        r = enc_event(sp, T_EVENT_RECORD, fa, b);
                    else if (f == sp[S_EV_WAITED])
                        r = enc_event(sp, T_EVENT_WAIT, fa, b);
                } else if (me == sp[S_REC]) {
                    if (f == sp[S_ALLOC])
                        r = enc_alloc(sp, fa, b);
                    else if (f == sp[S_FREE])
                        r = enc_free(sp, fa, b);
                    else if (f == sp[S_KERNEL])
                        r = enc_kernel(sp, fa, b);
                }
            }
            if (r == 0) { /* the Python side: fn(*args), then what it handed the sink */
                PyObject *res = PyObject_Call(fn, fa, NULL);
                r = res == NULL ? -1 : take_recs(sp, b);
                Py_XDECREF(res);
            }
        } else {
            PyErr_SetString(PyExc_TypeError, "a malformed queue entry");
            r = -1;
        }
        Py_DECREF(item);
    }
    return r < 0 ? -1 : 0;
}

/* b's bytes appended to the sink's buffer (where the Python side commits them from),
 * keeping any pending exception. */
static int to_sink_buffer(PyObject *const *sp, obuf_t *b)
{
    size_t used = (size_t)(b->o.p - b->base);
    if (!used)
        return 0;
    PyObject *exc, *val, *tb;
    PyErr_Fetch(&exc, &val, &tb);
    PyObject *buf = sp[S_BUF];
    Py_ssize_t old = PyByteArray_GET_SIZE(buf);
    int r = PyByteArray_Resize(buf, old + (Py_ssize_t)used);
    if (r == 0)
        memcpy(PyByteArray_AS_STRING(buf) + old, b->base, used);
    if (exc != NULL) {
        PyErr_Clear();
        PyErr_Restore(exc, val, tb);
    }
    b->o.p = b->base;
    return r;
}

/* drain(spec, queue) -> bytes: the queue encoded (see drain_into). On an error the records
 * encoded before it go to the sink's buffer, as the Python drain would leave them. */
static PyObject *drain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    PyObject *const *sp = spec_of(args, nargs, 2, "drain(spec, queue)");
    if (sp == NULL)
        return NULL;
    obuf_t b = {NULL, NULL, {NULL}, {0}};
    PyObject *out = NULL;
    if (drain_into(sp, args[1], &b) < 0 || flush_counts(sp, &b) < 0) {
        flush_counts(sp, &b);
        to_sink_buffer(sp, &b);
    } else {
        out = PyBytes_FromStringAndSize((const char *)b.base, b.o.p - b.base);
    }
    PyMem_Free(b.base);
    return out;
}

/* b committed by the sink (MappedFileSink): copied into its mapping when nothing else is
 * waiting and it fits, else handed to its buffer and its own commit. */
static int commit(PyObject *const *sp, obuf_t *b)
{
    PyObject *sink = sp[S_SINK];
    PyObject *how = NULL;
    Py_ssize_t n = b->o.p - b->base;
    if (PyByteArray_GET_SIZE(sp[S_BUF]) || PyList_GET_SIZE(sp[S_RECS])) {
        how = str_commit;
    } else {
        PyObject *pos_o = PyObject_GetAttr(sink, str_pos);
        PyObject *limit_o = pos_o == NULL ? NULL : PyObject_GetAttr(sink, str_limit);
        Py_ssize_t pos = pos_o == NULL ? -1 : PyLong_AsSsize_t(pos_o);
        Py_ssize_t limit = limit_o == NULL ? -1 : PyLong_AsSsize_t(limit_o);
        Py_XDECREF(pos_o);
        Py_XDECREF(limit_o);
        if (PyErr_Occurred())
            return -1;
        if (pos < 0 || limit < 0 || n > limit - pos) {
            how = str_commit_slow; /* grow, or refuse (error, closed, forked child) */
        } else {
            PyObject *map = PyObject_GetAttr(sink, str_map);
            if (map == NULL)
                return -1;
            Py_buffer view;
            int r = PyObject_GetBuffer(map, &view, PyBUF_WRITABLE);
            Py_DECREF(map);
            if (r < 0)
                return -1;
            if (pos + n > view.len) {
                PyBuffer_Release(&view);
                how = str_commit_slow;
            } else {
                memcpy((char *)view.buf + pos, b->base, (size_t)n);
                PyBuffer_Release(&view);
                b->o.p = b->base;
                PyObject *np = PyLong_FromSsize_t(pos + n);
                r = np == NULL ? -1 : PyObject_SetAttr(sink, str_pos, np);
                Py_XDECREF(np);
                return r;
            }
        }
    }
    if (to_sink_buffer(sp, b) < 0)
        return -1;
    PyObject *res = PyObject_CallMethodNoArgs(sink, how);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* op(spec, queue, name, device, handle, spans, key) -> bool
 *
 * One op of the kill-safe recorder: its queue encoded (drain_into), then its kernel packed,
 * all committed into the trace's mapping: True. False when the kernel needs the Python
 * encoder: the queue's records are then in the sink's buffer, and Recorder._kernel_record
 * and the sink's put() do the rest. */
static PyObject *op(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    PyObject *const *sp = spec_of(args, nargs, 7, "op(spec, queue, name, device, handle, spans, key)");
    if (sp == NULL)
        return NULL;
    obuf_t b = {NULL, NULL, {NULL}, {0}};
    PyObject *out = NULL;
    if (drain_into(sp, args[1], &b) < 0) {
        to_sink_buffer(sp, &b);
        goto done;
    }
    PyObject *pa[9] = {sp[S_OP_SIDS], sp[S_SIDX], sp[S_STACK_IDS], sp[S_BLOCKS], args[2], args[3], args[4], args[5],
                       args[6]};
    int r = pack_kernel(pa, &b);
    if (r <= 0) {
        to_sink_buffer(sp, &b);
        if (r == 0)
            out = Py_NewRef(Py_False);
        goto done;
    }
    b.counts[KERNEL_TYPE]++;
    if (commit(sp, &b) < 0) {
        to_sink_buffer(sp, &b);
        goto done;
    }
    out = Py_NewRef(Py_True);
done:
    if (flush_counts(sp, &b) < 0)
        Py_CLEAR(out);
    PyMem_Free(b.base);
    return out;
}

static PyMethodDef methods[] = {
    {"drain", (PyCFunction)(void (*)(void))drain, METH_FASTCALL,
     "drain(spec, queue) -> bytes: the recorder's queue encoded and packed, in order"},
    {"op", (PyCFunction)(void (*)(void))op, METH_FASTCALL,
     "op(spec, queue, name, device, handle, spans, key) -> bool: one op encoded and committed"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL,
     "pack(op_sids, sidx, stack_ids, blocks, name, device, handle, spans, key) -> bytes | None\n\n"
     "The msgpack bytes of the kernel's KERNEL record, or None when the Python encoder must "
     "build it (a definition to emit first, a block of unknown size, a strided view)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernelpack", "The kill-safe recorder's KERNEL record, packed natively.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernelpack(void)
{
    if ((str_map = PyUnicode_InternFromString("_map")) == NULL ||
        (str_pos = PyUnicode_InternFromString("_pos")) == NULL ||
        (str_limit = PyUnicode_InternFromString("_limit")) == NULL ||
        (str_commit = PyUnicode_InternFromString("commit")) == NULL ||
        (str_commit_slow = PyUnicode_InternFromString("_commit_slow")) == NULL ||
        (str_next_bid = PyUnicode_InternFromString("_next_bid")) == NULL ||
        (str_popleft = PyUnicode_InternFromString("popleft")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "KERNEL", KERNEL_TYPE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
