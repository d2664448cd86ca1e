"""Structural retrieval: a reference module recognised by what it computes.

``trace`` turns a KernelBench-form module into a canonical ATen graph under fake
tensors (nothing full-size is allocated), ``families`` and ``generic`` declare
what each template family computes, ``match`` scores the graph against them,
``method`` is the worker's ``match`` request, and ``oracle`` ties a served job's
template to the reference module at run time.
"""
