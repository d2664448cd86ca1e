"""integrity.Snapshot: a patch of torch / Triton / Python / evaluator objects is
seen whatever its spelling; honest state changes (lazy imports) are not."""
from __future__ import annotations

import gc
import importlib
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "worker"))

from kiln_worker.evaluation import check  # noqa: E402
from kiln_worker.sandbox.integrity import Snapshot  # noqa: E402


def fake(*a, **k):
    return [0.0]


@pytest.fixture
def snap():
    gc.collect()
    s = Snapshot.take()
    assert s.changes() == []
    return s


def _patch_self_param():
    def install(self, fn):
        self.tolist = fn
    install(torch.Tensor, fake)


def _patch_for_target():
    for torch.Tensor.tolist in [fake]:
        pass


def _patch_type_setattr():
    type.__setattr__(torch.Tensor, "tolist", fake)


def _patch_gc_referents():
    gc.get_referents(torch.Tensor.__dict__)[0]["tolist"] = fake


def _patch_importlib():
    importlib.import_module("kiln_worker.evaluation.check").compare = fake


def _patch_code():
    check.compare.__code__ = fake.__code__


SPELLINGS = {"self_param": (_patch_self_param, "torch.Tensor.tolist"),
             "for_target": (_patch_for_target, "torch.Tensor.tolist"),
             "type_setattr": (_patch_type_setattr, "torch.Tensor.tolist"),
             "gc_referents": (_patch_gc_referents, "torch.Tensor.tolist"),
             "importlib": (_patch_importlib, "kiln_worker.evaluation.check.compare"),
             "code": (_patch_code, "kiln_worker.evaluation.check.compare")}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_every_spelling_of_a_patch_is_seen(snap, name):
    patch, what = SPELLINGS[name]
    compare, code = check.compare, check.compare.__code__
    try:
        patch()
        changes = snap.changes()
    finally:
        if "tolist" in vars(torch.Tensor):
            type.__delattr__(torch.Tensor, "tolist")
        compare.__code__ = code
        check.compare = compare
    assert changes and changes[0].startswith(what), changes
    assert snap.changes() == []  # undone: nothing left


def test_a_thread_left_running_is_seen(snap):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert any("thread" in c for c in snap.changes())
    finally:
        stop.set()
        t.join()
    time.sleep(0.01)
    assert snap.changes() == []


def test_honest_state_changes_are_not_patches(snap):
    # a lazy import (a submodule bound on its package), a library's counter,
    # torch compute, a new class
    import json.tool  # noqa: F401  (not imported by the harness)
    x = torch.randn(64)
    (x * 2).sum().tolist()

    class Local(torch.nn.Module):
        pass

    Local()
    assert snap.changes() == []


def test_the_evaluators_own_data_counts(snap):
    old = check.COMPARE_CHUNK
    check.COMPARE_CHUNK = 1
    try:
        assert snap.changes() == ["kiln_worker.evaluation.check.COMPARE_CHUNK was replaced"]
    finally:
        check.COMPARE_CHUNK = old


def test_a_lazily_built_singleton_is_not_a_patch():
    # Triton's first compile in the sandbox child calls tempfile, which builds
    # tempfile._name_sequence (None until then): trusted lazy state
    import tempfile
    old = tempfile._name_sequence
    tempfile._name_sequence = None
    try:
        gc.collect()
        s = Snapshot.take()
        tempfile.mkdtemp()
        assert tempfile._name_sequence is not None
        assert s.changes() == []
    finally:
        tempfile._name_sequence = old


@pytest.mark.parametrize("kind", ["function", "new_class_instance", "class"])
def test_a_none_global_given_behaviour_is_a_patch(kind):
    import types
    lib = types.ModuleType("kiln_test_lazy_lib")
    lib.hook = None
    sys.modules[lib.__name__] = lib
    try:
        gc.collect()
        s = Snapshot.take()

        class Made:  # defined after take(): its behaviour is not in the snapshot
            pass

        lib.hook = {"function": fake, "new_class_instance": Made(), "class": Made}[kind]
        assert s.changes() == ["kiln_test_lazy_lib.hook was replaced"]
    finally:
        del sys.modules[lib.__name__]
