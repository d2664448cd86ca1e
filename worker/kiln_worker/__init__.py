"""Kiln's evaluator: a long-lived worker process the C++ engine drives over pipes.

Run as ``python3 -m kiln_worker`` with ``PYTHONPATH=<home>/worker:<home>``; see
docs/architecture.md ("The worker protocol") and worker/README.md.

Sub-packages (each imports only standard-library modules at package level):
  service/     the JSON-lines request loop
  evaluation/  templates, evaluate/space, check, timing, confirm
  packaging/   package_info and the launch expressions `kiln package` writes
  sandbox/     generated code: screen, sandbox children, confinement
  processes/   device, GPU lock, fork server, compile child
  codeobject/  cross-compiling, ELF/MessagePack readers, resource reports
"""
__version__ = "0.1.0"
