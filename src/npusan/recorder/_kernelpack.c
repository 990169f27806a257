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
static inline void put_int(out_t *o, int64_t d)
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

#define SPAN_MAX 28 /* one access: array header + 3 ints of 9 bytes */
#define HEAD_MAX 41 /* the record's array header + 4 ints */
#define STACK_BUF 4096

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "pack() takes 9 arguments");
        return NULL;
    }
    PyObject *op_sids = args[0], *sidx_map = args[1], *stack_ids = args[2], *blocks = args[3];
    PyObject *name = args[4], *device = args[5], *handle = args[6], *spans = args[7], *key = args[8];
    if (!PyDict_CheckExact(op_sids) || !PyDict_CheckExact(sidx_map) || !PyDict_CheckExact(stack_ids) ||
        !PyDict_CheckExact(blocks) || !PyList_CheckExact(spans))
        Py_RETURN_NONE;
    int ok = 1;

    PyObject *op = lookup(op_sids, name);
    if (op == NULL)
        Py_RETURN_NONE;
    int64_t op_id = as_i64(op, &ok);
    PyObject *skey = PyTuple_Pack(2, device, handle);
    if (skey == NULL)
        return NULL;
    PyObject *sv = lookup(sidx_map, skey);
    Py_DECREF(skey);
    if (sv == NULL)
        Py_RETURN_NONE;
    int64_t sidx = as_i64(sv, &ok);
    int64_t stack = 0;
    int has_stack = 0;
    if (key != Py_None) {
        PyObject *st = lookup(stack_ids, key);
        if (st == NULL)
            Py_RETURN_NONE;
        if (st != Py_None) {
            stack = as_i64(st, &ok);
            has_stack = 1;
        }
    }
    if (!ok)
        Py_RETURN_NONE;

    Py_ssize_t n = PyList_GET_SIZE(spans);
    size_t cap = HEAD_MAX + (size_t)n * SPAN_MAX;
    unsigned char local[STACK_BUF];
    unsigned char *buf = local;
    if (cap > sizeof(local)) {
        buf = PyMem_Malloc(cap);
        if (buf == NULL)
            return PyErr_NoMemory();
    }
    out_t o = {buf};
    put_array(&o, 4 + n);
    put_int(&o, KERNEL_TYPE);
    put_int(&o, sidx);
    put_int(&o, op_id);
    if (has_stack)
        put_int(&o, stack);
    else
        put_u8(&o, 0xc0);

    PyObject *result = Py_None;
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
            put_int(&o, a);
        } else {
            put_u8(&o, 0x93);
            put_int(&o, a);
            put_int(&o, off);
            put_int(&o, ext);
        }
    }
    result = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)(o.p - buf));
    if (buf != local)
        PyMem_Free(buf);
    return result;

fallback:
    if (buf != local)
        PyMem_Free(buf);
    Py_RETURN_NONE;
}

/* put(mapping, pos, limit, head, skip, data) -> new pos, or -1 when it does not fit
 *
 * Copies head[skip:] and then data into the writable buffer ``mapping`` (an mmap) at
 * ``pos``, when pos + their length <= limit: the kill-safe commit of one op (the records
 * its hooks deferred, packed as one list whose array header is skipped, then its kernel)
 * in one call and one copy, without the slices and bytes objects of doing it in Python.
 * The buffer is released before returning, so the mapping can still be resized. */
static PyObject *put(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "put() takes 6 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    Py_ssize_t skip = PyLong_AsSsize_t(args[4]);
    if ((pos == -1 || limit == -1 || skip == -1) && PyErr_Occurred())
        return NULL;
    PyObject *head = args[3], *data = args[5];
    if (!PyBytes_Check(head) || !PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "put() copies bytes");
        return NULL;
    }
    Py_ssize_t nh = PyBytes_GET_SIZE(head), nd = PyBytes_GET_SIZE(data);
    if (skip < 0 || skip > nh || pos < 0) {
        PyErr_SetString(PyExc_ValueError, "put(): bad offsets");
        return NULL;
    }
    Py_ssize_t n = nh - skip + nd;
    if (limit < 0 || n > limit - pos)
        return PyLong_FromLong(-1);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (pos + n > view.len) {
        PyBuffer_Release(&view);
        return PyLong_FromLong(-1);
    }
    char *dst = (char *)view.buf + pos;
    memcpy(dst, PyBytes_AS_STRING(head) + skip, (size_t)(nh - skip));
    memcpy(dst + (nh - skip), PyBytes_AS_STRING(data), (size_t)nd);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos + n);
}

static PyMethodDef methods[] = {
    {"put", (PyCFunction)(void (*)(void))put, METH_FASTCALL,
     "put(mapping, pos, limit, head, skip, data) -> new pos, or -1 when it does not fit"},
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
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "KERNEL", KERNEL_TYPE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
