"""The tracked tree itself: no tracked symbolic link points outside the
repository or at a directory that contains it (a self-link such as
kernels/kernels -> kernels makes every recursive copy of the tree loop)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_tracked_links_stay_inside_and_do_not_loop():
    bad = []
    for rel in tracked():
        p = ROOT / rel
        if not p.is_symlink():
            continue
        target = Path(os.path.realpath(p))
        if target != ROOT and ROOT not in target.parents:
            bad.append(f"{rel} -> {os.readlink(p)} (outside the repository)")
        elif target.is_dir() and (target == p.parent.resolve() or target in p.parent.resolve().parents):
            bad.append(f"{rel} -> {os.readlink(p)} (a directory that contains the link: copies loop)")
    assert not bad, bad
