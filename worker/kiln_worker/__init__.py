"""Kiln's evaluator: a long-lived worker process the C++ engine drives over pipes.

Run as ``python3 -m kiln_worker`` with ``PYTHONPATH=<home>/worker:<home>``; see
docs/architecture.md ("The worker protocol") and worker/README.md.
"""
__version__ = "0.1.0"
