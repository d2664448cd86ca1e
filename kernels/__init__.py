"""Kiln's Triton template library: one module per kernel family.

`kernels/operators.yaml` maps each operator to its module; every module defines
make_inputs, reference, output_like, config_space, launch, compile_spec and traffic
(see docs/architecture.md, "Template modules"). Shared helpers live in `common`.
"""
