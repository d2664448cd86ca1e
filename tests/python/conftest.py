"""What every test here needs first: the repository on sys.path (the worker
package is under worker/, the templates under kernels/), and the Triton
interpreter chosen (TRITON_INTERPRET=1 unless set) before Triton is imported:
the template tests run the kernels on the CPU."""
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
