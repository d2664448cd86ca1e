"""Launches a packaged softmax through libkilnrt with ctypes (docs/runtime.md).
    KILN_RT_LIB=build/libkilnrt.so python3 runtime_softmax.py PKG
Exit: 0 the output matches numpy; 1 an error; 3 no GPU here. Needs numpy only."""
import ctypes
import os
import sys

import numpy as np

lib = ctypes.CDLL(os.environ.get("KILN_RT_LIB", "libkilnrt.so"))
vp, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
lib.kiln_last_error.restype = ctypes.c_char_p
lib.kiln_package_target.restype = ctypes.c_char_p
lib.kiln_package_target.argtypes = [vp]
lib.kiln_package_open.argtypes = [ctypes.c_char_p, vp, ctypes.POINTER(vp)]
lib.kiln_kernel_find.argtypes = [vp, ctypes.c_char_p, i64p, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(vp)]
lib.kiln_kernel_describe.restype = ctypes.c_char_p
lib.kiln_kernel_describe.argtypes = [vp]
lib.kiln_launch.argtypes = [vp, ctypes.POINTER(vp), ctypes.c_int, vp]
lib.kiln_device_alloc.argtypes = [vp, ctypes.c_size_t, ctypes.POINTER(vp)]
lib.kiln_device_free.argtypes = [vp, vp]
lib.kiln_copy_to_device.argtypes = [vp, vp, vp, ctypes.c_size_t]
lib.kiln_copy_to_host.argtypes = [vp, vp, vp, ctypes.c_size_t]
lib.kiln_synchronize.argtypes = [vp]
lib.kiln_kernel_free.argtypes = [vp]
lib.kiln_package_close.argtypes = [vp]


class OpenOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("pubkey_pem", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("device", ctypes.c_int)]


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: {lib.kiln_last_error().decode()}")


def main(pkg_dir, rows=64, cols=1000):
    opts = OpenOptions(ctypes.sizeof(OpenOptions), None, None, 0)
    pkg = vp()
    st = lib.kiln_package_open(pkg_dir.encode(), ctypes.byref(opts), ctypes.byref(pkg))
    if st in (7, 8):  # KILN_E_NO_RUNTIME, KILN_E_NO_DEVICE
        print(lib.kiln_last_error().decode(), file=sys.stderr)
        return 3
    check(st, "open")
    print("device:", lib.kiln_package_target(pkg).decode())
    kernel = vp()
    shape = (ctypes.c_int64 * 2)(rows, cols)
    check(lib.kiln_kernel_find(pkg, b"softmax", shape, 2, b"fp32", ctypes.byref(kernel)), "find")
    print("kernel:", lib.kiln_kernel_describe(kernel).decode())
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    y = np.empty_like(x)
    ptrs = [vp(), vp()]
    for p in ptrs:
        check(lib.kiln_device_alloc(pkg, x.nbytes, ctypes.byref(p)), "alloc")
    dev = (vp * 2)(ptrs[0].value, ptrs[1].value)
    check(lib.kiln_copy_to_device(pkg, dev[0], x.ctypes.data, x.nbytes), "copy")
    check(lib.kiln_launch(kernel, dev, 2, None), "launch")
    check(lib.kiln_synchronize(pkg), "synchronize")
    check(lib.kiln_copy_to_host(pkg, y.ctypes.data, dev[1], y.nbytes), "copy back")
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    err = np.abs(y - e / e.sum(axis=1, keepdims=True)).max()
    print(f"max abs error vs numpy: {err:.2e}")
    for i in range(2):
        lib.kiln_device_free(pkg, dev[i])
    lib.kiln_kernel_free(kernel)
    lib.kiln_package_close(pkg)
    return 0 if err < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
