"""A really small disk: a tmpfs of 150 KiB, less than one step the mapped trace grows by.

The recorder used to ask for its first step (256 KiB) and, refused, leave no trace at all.
Mounting needs root (or a user namespace); where it is not permitted the test is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch

import npusan
from npusan.trace_format import records as R
from npusan.trace_format.reader import TraceReader

from .conftest import NPUSAN


@pytest.fixture
def small_disk(tmp_path):
    where = tmp_path / "small"
    where.mkdir()
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount(8) here to make a small tmpfs")
    try:
        done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=150k", "tmpfs", str(where)],
                              capture_output=True, text=True, timeout=30)
    except OSError as e:
        pytest.skip(f"cannot run mount: {e}")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        # lazily: a reader the test left to the garbage collector may still hold a file open
        subprocess.run([umount, "-l", str(where)], capture_output=True, timeout=30)


def test_a_disk_smaller_than_a_growth_step_keeps_what_fitted_and_says_the_disk_filled(small_disk, capfd):
    path = small_disk / "t.npusan"
    rec = npusan.record(str(path), backend="sim").start()
    x = torch.ones(64)
    for _ in range(12000):  # ~330 KiB of records: more than the disk holds
        x = x * 1.0
    rec.stop()
    assert float(x.sum()) == 64.0  # the program ran on
    assert rec.failed and "disk full" in capfd.readouterr().err
    size = os.path.getsize(path)
    assert 64 << 10 < size <= 150 << 10  # most of the disk, not nothing
    reader = TraceReader(str(path))
    kernels = sum(1 for r in reader.records() if r[0] == R.KERNEL)
    assert kernels > 1000
    assert reader.ended_cleanly and reader.end_stats["stopped"].startswith("disk full")
    info = subprocess.run([*NPUSAN, "info", str(path)], capture_output=True, text=True, timeout=120)
    assert info.returncode == 0 and "ended early" in info.stdout and "disk full" in info.stdout
