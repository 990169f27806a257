/* Page-fault watch of pinned host memory (Linux x86-64 and aarch64).
 *
 * Why: the recorder sees the host's accesses of pinned memory made through torch ops, but
 * not those made through a numpy view, ctypes or a memoryview. While an asynchronous copy
 * from or to a pinned buffer may be in flight, the Python side protects the buffer's
 * pages (PROT_NONE); the first host touch of a page faults, this module's SIGSEGV handler
 * notes (address, is_write) in a fixed ring, makes the page readable (a read) or readable
 * and writable (a write), and returns: the instruction restarts and the program goes on
 * as it would have. The Python side drains the ring at the recorder's next event into
 * HOST_ACCESS records.
 *
 * The handler is async-signal-safe: it reads a fixed array of protected ranges, calls
 * mprotect and writes the ring with atomics; no allocation, no lock, no Python. A fault
 * outside every range (a real segfault) goes to the handler that was there before ours
 * (Python's faulthandler, or the default action: the process dies by SIGSEGV as before).
 *
 *   protect(start, end) -> slot | -errno (-EBUSY: another SIGSEGV handler was installed
 *                          over ours since the first protection; nothing is protected)
 *   lift(slot)          -> 0 | -errno   (pages back to read-write)
 *   take()              -> [(address, is_write, code address or 0, lasti), ...], dropped
 *                          count since last take
 *   pending()           -> faults waiting in the ring
 *   uninstall()         -> restores the previous handler if ours is still installed
 *   page_size()
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* Where the Python code that faulted is (CPython 3.11): the faulting thread's innermost
 * frame's code object and instruction offset, read from its own thread state (plain loads
 * of structures the stopped thread owns; nothing is dereferenced later: the Python side
 * only compares the code's address with the code objects of live frames). */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API)
#define NPUSAN_FAULT_FRAMES 1
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#endif

#define NSLOTS 1024
#define RING 4096

enum { FREE = 0, PROTECTED = 1, LIFTED = 2 };

typedef struct {
    uintptr_t start, end; /* written before state becomes PROTECTED */
    int state;
} slot_t;

typedef struct {
    uintptr_t addr;
    uint64_t seq; /* index + 1 once written */
    int write;
    uintptr_t code; /* the faulting Python frame's code object's address, or 0 */
    long lasti;     /* its instruction offset in bytes (as frame.f_lasti) */
} fault_t;

static void fault_frame(fault_t *f)
{
    f->code = 0;
    f->lasti = -1;
#ifdef NPUSAN_FAULT_FRAMES
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (ts == NULL || ts->cframe == NULL)
        return;
    _PyInterpreterFrame *fr = ts->cframe->current_frame;
    while (fr != NULL && _PyFrame_IsIncomplete(fr))
        fr = fr->previous;
    if (fr == NULL || fr->f_code == NULL)
        return;
    f->code = (uintptr_t)fr->f_code;
    f->lasti = (long)(fr->prev_instr - _PyCode_CODE(fr->f_code)) * (long)sizeof(_Py_CODEUNIT);
#endif
}

static slot_t slots[NSLOTS];
static int hwm;          /* slots in use are below it */
static int next_reuse;   /* round robin over LIFTED slots */
static fault_t ring[RING];
static uint64_t head, tail, dropped;
static struct sigaction previous;
static int installed;
static uintptr_t page_mask;

static int fault_is_write(void *ctx)
{
#if defined(__x86_64__)
    ucontext_t *uc = (ucontext_t *)ctx;
    return (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    /* aarch64: the data abort's ESR (WnR, bit 6), when the kernel gives it */
    ucontext_t *uc = (ucontext_t *)ctx;
    unsigned char *p = (unsigned char *)uc->uc_mcontext.__reserved;
    unsigned char *end = p + sizeof(uc->uc_mcontext.__reserved);
    while (p + 8 <= end) {
        uint32_t magic = *(uint32_t *)p, size = *(uint32_t *)(p + 4);
        if (magic == 0 || size < 8)
            break;
        if (magic == 0x45535201 /* ESR_MAGIC */ && size >= 16)
            return ((*(uint64_t *)(p + 8)) >> 6) & 1;
        p += size;
    }
    return 1; /* unknown: a write (the conservative answer) */
#endif
}

static void chain(int sig, siginfo_t *info, void *ctx)
{
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            previous.sa_sigaction(sig, info, ctx);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* default action: restore it; the instruction faults again and the process dies by
     * SIGSEGV, as it would have without us (a signal sent by kill: raise it again) */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    if (info == NULL || info->si_code <= 0)
        raise(sig);
}

/* a fault at an address of a LIFTED range only (a lift by another thread between the
 * fault and this handler) runs the access again; the same address that long: not ours */
#define RETRIES 10000
static uintptr_t last_lifted;
static unsigned retries;

static void handler(int sig, siginfo_t *info, void *ctx)
{
    int saved = errno;
    if (info != NULL && info->si_code > 0) { /* sent by the kernel: a fault */
        uintptr_t a = (uintptr_t)info->si_addr;
        int n = __atomic_load_n(&hwm, __ATOMIC_ACQUIRE), lifted = 0;
        for (int i = 0; i < n; i++) {
            int st = __atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE);
            if (st == FREE || a < slots[i].start || a >= slots[i].end)
                continue;
            if (st == LIFTED) { /* the same pages may be protected again by a later slot */
                lifted = 1;
                continue;
            }
            int w = fault_is_write(ctx);
            uintptr_t page = a & ~page_mask;
            mprotect((void *)page, page_mask + 1, w ? PROT_READ | PROT_WRITE : PROT_READ);
            uint64_t idx = __atomic_fetch_add(&head, 1, __ATOMIC_ACQ_REL);
            if (idx - __atomic_load_n(&tail, __ATOMIC_ACQUIRE) >= RING) {
                __atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
            } else {
                fault_t *f = &ring[idx % RING];
                f->addr = a;
                f->write = w;
                fault_frame(f);
                __atomic_store_n(&f->seq, idx + 1, __ATOMIC_RELEASE);
            }
            errno = saved;
            return;
        }
        if (lifted) {
            if (__atomic_exchange_n(&last_lifted, a, __ATOMIC_RELAXED) != a)
                __atomic_store_n(&retries, 0, __ATOMIC_RELAXED);
            if (__atomic_add_fetch(&retries, 1, __ATOMIC_RELAXED) < RETRIES) {
                errno = saved;
                return;
            }
        }
    }
    errno = saved;
    chain(sig, info, ctx);
}

static int ours_installed(void)
{
    struct sigaction cur;
    return sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == handler;
}

static int install(void)
{
    if (installed) /* another handler went in over ours (a late faulthandler.enable()): stop */
        return ours_installed() ? 0 : -EBUSY;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &previous) != 0)
        return -errno;
    installed = 1;
    return 0;
}

static PyObject *py_protect(PyObject *self, PyObject *args)
{
    unsigned long long s, e;
    if (!PyArg_ParseTuple(args, "KK", &s, &e))
        return NULL;
    if ((s & page_mask) || (e & page_mask) || e <= s)
        return PyLong_FromLong(-EINVAL);
    int r = install();
    if (r)
        return PyLong_FromLong(r);
    int i, found = -1;
    for (i = 0; i < hwm && found < 0; i++)
        if (slots[i].state == FREE)
            found = i;
    if (found < 0 && hwm < NSLOTS)
        found = hwm;
    if (found < 0) { /* reuse a lifted slot, round robin (the oldest, roughly) */
        for (i = 0; i < NSLOTS; i++) {
            int j = (next_reuse + i) % NSLOTS;
            if (slots[j].state == LIFTED) {
                found = j;
                next_reuse = j + 1;
                break;
            }
        }
    }
    if (found < 0)
        return PyLong_FromLong(-ENOSPC);
    __atomic_store_n(&slots[found].state, FREE, __ATOMIC_RELEASE);
    slots[found].start = (uintptr_t)s;
    slots[found].end = (uintptr_t)e;
    __atomic_store_n(&slots[found].state, PROTECTED, __ATOMIC_RELEASE);
    if (found >= hwm)
        __atomic_store_n(&hwm, found + 1, __ATOMIC_RELEASE);
    if (mprotect((void *)(uintptr_t)s, (size_t)(e - s), PROT_NONE) != 0) {
        int err = errno;
        mprotect((void *)(uintptr_t)s, (size_t)(e - s), PROT_READ | PROT_WRITE);
        __atomic_store_n(&slots[found].state, FREE, __ATOMIC_RELEASE);
        return PyLong_FromLong(-err);
    }
    return PyLong_FromLong(found);
}

static PyObject *py_lift(PyObject *self, PyObject *args)
{
    int i;
    if (!PyArg_ParseTuple(args, "i", &i))
        return NULL;
    if (i < 0 || i >= hwm || slots[i].state != PROTECTED)
        return PyLong_FromLong(-EINVAL);
    /* pages first, then the state: a fault in between finds the slot still protected */
    int r = mprotect((void *)slots[i].start, slots[i].end - slots[i].start, PROT_READ | PROT_WRITE);
    int err = r ? errno : 0;
    __atomic_store_n(&slots[i].state, LIFTED, __ATOMIC_RELEASE);
    return PyLong_FromLong(-err);
}

static PyObject *py_take(PyObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    uint64_t h = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    while (tail < h) {
        fault_t *f = &ring[tail % RING];
        if (__atomic_load_n(&f->seq, __ATOMIC_ACQUIRE) != tail + 1)
            break; /* being written by another thread: the next take gets it */
        PyObject *t = Py_BuildValue("(KOKl)", (unsigned long long)f->addr, f->write ? Py_True : Py_False,
                                    (unsigned long long)f->code, f->lasti);
        if (t == NULL || PyList_Append(out, t) != 0) {
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(t);
        __atomic_store_n(&tail, tail + 1, __ATOMIC_RELEASE);
    }
    unsigned long long d = __atomic_exchange_n(&dropped, 0, __ATOMIC_ACQ_REL);
    return Py_BuildValue("(NK)", out, d);
}

static PyObject *py_pending(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(__atomic_load_n(&head, __ATOMIC_ACQUIRE) - tail);
}

static PyObject *py_uninstall(PyObject *self, PyObject *unused)
{
    if (!installed)
        Py_RETURN_FALSE;
    if (!ours_installed())
        Py_RETURN_FALSE; /* another handler went in after ours: it chains to us; leave it */
    for (int i = 0; i < hwm; i++)
        if (slots[i].state == PROTECTED)
            Py_RETURN_FALSE;
    sigaction(SIGSEGV, &previous, NULL);
    installed = 0;
    Py_RETURN_TRUE;
}

static PyObject *py_page_size(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(page_mask + 1);
}

static PyMethodDef methods[] = {
    {"protect", py_protect, METH_VARARGS, "protect(start, end) -> slot, or -errno"},
    {"lift", py_lift, METH_VARARGS, "lift(slot) -> 0, or -errno"},
    {"take", py_take, METH_NOARGS, "take() -> ([(address, is_write, code, lasti)], dropped)"},
    {"pending", py_pending, METH_NOARGS, "faults waiting in the ring"},
    {"uninstall", py_uninstall, METH_NOARGS, "restore the previous SIGSEGV handler"},
    {"page_size", py_page_size, METH_NOARGS, "the page size"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hostfault", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hostfault(void)
{
    long ps = sysconf(_SC_PAGESIZE);
    page_mask = (uintptr_t)(ps > 0 ? ps : 4096) - 1;
    return PyModule_Create(&module);
}

#else /* another OS or architecture: the module does not exist there */

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hostfault", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__hostfault(void)
{
    PyErr_SetString(PyExc_ImportError, "the page-fault watch runs on Linux x86-64 and aarch64 only");
    return NULL;
}

#endif
