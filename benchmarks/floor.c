/*
 * The floor under any reader that returns the codecs' values through CPython's C API: `rebuild(value)`
 * makes a new tree equal to `value` the cheapest way that API offers (dicts presized and filled with the
 * same key objects, lists made at their size, each int made anew as a reader must make it), reading no
 * input at all; strs, enum members and other leaves are shared, so this is a lower bound.
 * benchmarks/bench_accel.py --floor compiles it and times rebuild beside the accelerator.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *rebuild(PyObject *module, PyObject *value) {
    (void)module;
    if (PyDict_CheckExact(value)) {
        PyObject *out = _PyDict_NewPresized(PyDict_GET_SIZE(value)), *key, *item;
        Py_ssize_t pos = 0;
        while (out && PyDict_Next(value, &pos, &key, &item)) {
            PyObject *copy = rebuild(module, item);
            if (!copy || PyDict_SetItem(out, key, copy)) Py_CLEAR(out);
            Py_XDECREF(copy);
        }
        return out;
    }
    if (PyList_CheckExact(value)) {
        Py_ssize_t n = PyList_GET_SIZE(value);
        PyObject *out = PyList_New(n);
        for (Py_ssize_t k = 0; out && k < n; k++) {
            PyObject *copy = rebuild(module, PyList_GET_ITEM(value, k));
            if (!copy) Py_CLEAR(out);
            else PyList_SET_ITEM(out, k, copy);
        }
        return out;
    }
    if (PyLong_CheckExact(value)) {
        long long v = PyLong_AsLongLong(value);
        return v == -1 && PyErr_Occurred() ? NULL : PyLong_FromLongLong(v);
    }
    return Py_NewRef(value);
}

static PyMethodDef methods[] = {{"rebuild", rebuild, METH_O, "A new tree equal to the value (see the file's comment)."}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "floor", NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_floor(void) { return PyModule_Create(&module); }
