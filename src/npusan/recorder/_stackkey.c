/* The recorder's stack key, walked natively.
 *
 * Why: the recorder takes the Python stack of every op, allocation and free it records.
 * StackCapture.key walks the frames in a Python loop (a dict look-up and a few attribute
 * reads per frame, every frame to the bottom of the stack): on a small training step that
 * is the largest single cost of recording (docs/benchmarks.md). This is the same loop in
 * C; stacks.py keeps the Python one as the reference, used where this is not built, and
 * the tests hold the two to the same keys.
 *
 * walk(frame, depth, keep, classify) -> tuple
 *   frame: the innermost frame to look at; depth: how many kept frames to keep at most;
 *   keep: {id(code): 0 folded away, 1 kept, 2 a __torch_dispatch__ (it and every frame
 *   inside it folded away)}; classify(code) -> that value, called for a code not in keep
 *   (it adds it). Returns (id(code), lasti, ...) of the kept frames, innermost first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>

#define DISPATCH 2

static PyObject *walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4 || !PyFrame_Check(args[0]) || !PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "walk(frame, depth, keep: dict, classify)");
        return NULL;
    }
    Py_ssize_t depth = PyLong_AsSsize_t(args[1]);
    if (depth == -1 && PyErr_Occurred())
        return NULL;
    PyObject *keep = args[2], *classify = args[3];
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = 0;
    PyCodeObject *code = NULL;
    PyObject *id = NULL;
    PyFrameObject *f = (PyFrameObject *)Py_NewRef(args[0]);
    while (f != NULL) {
        code = PyFrame_GetCode(f);
        id = PyLong_FromVoidPtr(code);
        if (id == NULL)
            goto fail;
        long k;
        PyObject *v = PyDict_GetItemWithError(keep, id); /* borrowed */
        if (v == NULL) {
            if (PyErr_Occurred())
                goto fail;
            v = PyObject_CallOneArg(classify, (PyObject *)code);
            if (v == NULL)
                goto fail;
            k = PyLong_AsLong(v);
            Py_DECREF(v);
        } else {
            k = PyLong_AsLong(v);
        }
        if (k == -1 && PyErr_Occurred())
            goto fail;
        if (k == DISPATCH) { /* what ran inside it is the work of its caller */
            if (PyList_SetSlice(out, 0, PyList_GET_SIZE(out), NULL) < 0)
                goto fail;
            n = 0;
        } else if (k && n < depth) {
            PyObject *lasti = PyLong_FromLong((long)PyFrame_GetLasti(f));
            if (lasti == NULL || PyList_Append(out, id) < 0 || PyList_Append(out, lasti) < 0) {
                Py_XDECREF(lasti);
                goto fail;
            }
            Py_DECREF(lasti);
            n++;
        }
        Py_DECREF(id);
        Py_DECREF(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    PyObject *t = PyList_AsTuple(out);
    Py_DECREF(out);
    return t;
fail:
    Py_XDECREF(id);
    Py_DECREF(code);
    Py_DECREF(f);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(frame, depth, keep, classify) -> tuple: the stack key from frame outwards"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stackkey", "The recorder's stack key, walked natively.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__stackkey(void)
{
    return PyModule_Create(&module);
}
