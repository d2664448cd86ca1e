"""What the GPU cost scripts here (check_cost.py, checker_h200.py) start from:
the worker's Evaluation on this machine's GPU and the H200 target."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def h200_evaluation(tool):
    """(Evaluation, the device, the H200 target dict), or None after printing
    "TOOL: no GPU here" when this machine has none. A GPU lock of its own
    unless KILN_GPU_LOCK names one."""
    os.environ.setdefault("KILN_GPU_LOCK", os.path.join(tempfile.mkdtemp(), "gpu.lock"))
    from kiln_worker.evaluation.evaluate import Evaluation
    from kiln_worker.evaluation.templates import Library
    from kiln_worker.processes.device import select_device

    dev = select_device()
    if not dev.is_gpu:
        print(f"{tool}: no GPU here", file=sys.stderr)
        return None
    target = yaml.safe_load(open(ROOT / "configs" / "targets" / "H200.yaml"))
    return Evaluation(Library(), dev), dev, target
