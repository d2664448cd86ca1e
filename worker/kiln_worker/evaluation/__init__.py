"""Evaluating a template's candidate: the template library (templates.py), the
evaluate/space methods (evaluate.py), the correctness check (check.py and its
one-pass GPU kernel compare_kernel.py), timing (timing.py), the kernel load
before the GPU lock (preload.py), the confirm method (confirm.py), and how an
evaluation's failure is classified (outcome.py)."""
