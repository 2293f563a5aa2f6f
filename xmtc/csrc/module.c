/* The Python module object of the compiled kernels.  It exports no Python functions: xmtc/native.py
 * loads this same shared object with ctypes (which releases the GIL around every call) and declares
 * each kernel's signature there.  Importing it is what finds the file, wherever it was installed. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "xmtc's compiled kernels (see xmtc/native.py)",
                                    -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
