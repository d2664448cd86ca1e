"""libkilnrt through Python ctypes, as docs/runtime.md shows it: the SplitMix64
verification generator against the numpy implementation that writes the
packages' verification data, and a static-target open + kernel find.

Needs the shared library: KILN_RT_LIB, else build/libkilnrt.so (cmake builds it
beside kiln). Packages are built with tests/data/runtime/make_package.py."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "data" / "runtime"))


def _lib():
    for p in (os.environ.get("KILN_RT_LIB"), ROOT / "build" / "libkilnrt.so"):
        if p and Path(p).exists():
            lib = ctypes.CDLL(str(p))
            lib.kiln_last_error.restype = ctypes.c_char_p
            lib.kiln_splitmix_fill.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                               ctypes.POINTER(ctypes.c_double), ctypes.c_int64]
            lib.kiln_package_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
            lib.kiln_kernel_find.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64),
                                             ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
            lib.kiln_kernel_describe.restype = ctypes.c_char_p
            lib.kiln_kernel_describe.argtypes = [ctypes.c_void_p]
            lib.kiln_kernel_free.argtypes = [ctypes.c_void_p]
            lib.kiln_package_close.argtypes = [ctypes.c_void_p]
            return lib
    pytest.skip("libkilnrt.so not built (set KILN_RT_LIB)")


class OpenOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("pubkey_pem", ctypes.c_char_p),
                ("target", ctypes.c_char_p), ("device", ctypes.c_int)]


@pytest.mark.parametrize("seed,tensor,lo,hi", [(12345, 0, -1.0, 1.0), (0, 3, 0.0, 1.0), (2**64 - 1, 7, -4.0, 4.0)])
def test_splitmix_matches_numpy(seed, tensor, lo, hi):
    import make_package as mp
    lib = _lib()
    n = 10000
    buf = (ctypes.c_double * n)()
    lib.kiln_splitmix_fill(seed, tensor, lo, hi, buf, n)
    got = np.frombuffer(buf, dtype=np.float64)
    want = lo + (hi - lo) * mp.splitmix_uniform(seed, tensor, n)
    assert np.array_equal(got, want)
    assert got.min() >= lo and got.max() < hi and abs(got.mean() - (lo + hi) / 2) < 0.05 * (hi - lo)


def test_static_open_and_find(tmp_path):
    lib = _lib()
    pkg = tmp_path / "pkg"
    env = dict(os.environ, TRITON_INTERPRET="0")
    subprocess.run([sys.executable, str(ROOT / "tests/data/runtime/make_package.py"), "build", str(pkg),
                    "--targets", "MI300X"], check=True, env=env)
    opts = OpenOptions(ctypes.sizeof(OpenOptions), None, b"MI300X", 0)
    h = ctypes.c_void_p()
    assert lib.kiln_package_open(str(pkg).encode(), ctypes.byref(opts), ctypes.byref(h)) == 0, lib.kiln_last_error()
    k = ctypes.c_void_p()
    shape = (ctypes.c_int64 * 2)(64, 1000)
    assert lib.kiln_kernel_find(h, b"softmax", shape, 2, b"fp32", ctypes.byref(k)) == 0, lib.kiln_last_error()
    assert b"grid=[64,1,1]" in lib.kiln_kernel_describe(k)
    lib.kiln_kernel_free(k)
    shape = (ctypes.c_int64 * 2)(64, 5000)
    assert lib.kiln_kernel_find(h, b"softmax", shape, 2, b"fp32", ctypes.byref(k)) == 9  # KILN_E_UNTUNED
    assert b"untuned shape softmax 64x5000 fp32" in lib.kiln_last_error()
    lib.kiln_package_close(h)
