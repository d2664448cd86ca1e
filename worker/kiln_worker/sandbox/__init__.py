"""Generated (untrusted) code: static screening (screen.py), the evaluator that
runs it in sandbox children (generated.py), the child itself (child.py), the
process-level confinement it applies (confine.py), the interpreter integrity
check (integrity.py) and reference operators given as PyTorch modules
(reference_module.py)."""
