"""The page-fault watch of pinned host memory (``NPUSAN_HOST_FAULTS=1``): host accesses
that no torch op makes -- a numpy view made once, ``ctypes.memmove``, a ``memoryview`` --
are races when they overlap an asynchronous copy in flight and clean after the host waits
for it; pageable memory never faults; a real segfault still kills the process; and where
the watch is off the trace and the report say so."""

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from npusan.recorder import host_faults  # noqa: E402
from npusan.trace_format import records as R  # noqa: E402
from npusan.trace_format.reader import TraceReader  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_watch_prog.py")

try:
    from npusan.recorder import _hostfault  # noqa: F401
except ImportError:
    pytest.skip("the page-fault watch is not built here (Linux x86-64/aarch64 only)", allow_module_level=True)


def _env(on=True):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + ROOT
    env.pop("NPUSAN_TRACE", None)
    env.pop(host_faults.ENV, None)
    if on:
        env[host_faults.ENV] = "1"
    return env


def _record(tmp_path, case, variant, on=True):
    out = tmp_path / "t.npusan"
    p = subprocess.run([sys.executable, "-m", "npusan", "record", "--emulate", "cuda", "-o", str(out), "--", PROG,
                        case, variant], env=_env(on), capture_output=True, text=True, timeout=300)
    return p, out


def _analyze(path, fmt="json"):
    a = subprocess.run([sys.executable, "-m", "npusan", "analyze", "--format", fmt, str(path)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    return json.loads(a.stdout)["findings"] if fmt == "json" else a.stdout


#: The source of the line each case's host access is on (host_watch_prog.py).
WHERE = {"numpy-view": "cpu_np[:n] = step + 1", "raw-pointer": "ctypes.memmove(ptr, src, ctypes.sizeof(src))",
         "memoryview-read": "total += mv[0]"}


def _line(frame):
    import linecache

    return linecache.getline(frame["file"], frame["line"]).split("#")[0].strip()


def _host_side(f):
    if f["access"]["stream"]["device"] == R.HOST_DEVICE:
        return f["access"], f["previous"]
    return f["previous"], f["access"]


@pytest.mark.parametrize("case, kind, name", [
    ("numpy-view", "write", host_faults.FAULT_WRITE),
    ("raw-pointer", "write", host_faults.FAULT_WRITE),
    ("memoryview-read", "read", host_faults.FAULT_READ),
])
def test_a_host_access_outside_torch_ops_races_with_the_copy_in_flight(tmp_path, case, kind, name):
    p, path = _record(tmp_path, case, "bug")
    assert p.returncode == 0, p.stderr
    found = _analyze(path)
    assert found and {f["kind"] for f in found} == {"data-race"}, found
    for f in found:
        host, stream = _host_side(f)
        assert host["type"] == kind and host["op"] == name, host
        assert stream["stream"]["device"] == 0 and stream["op"] == "aten::copy_"
    if sys.version_info[:2] == (3, 11):
        # the handler read the faulting frame: the access's own line, where the drain ran in
        # that function (the last step's read is drained after it returned: not there)
        assert any(_line(_host_side(f)[0]["stack"][-1]) == WHERE[case] for f in found), found
    assert TraceReader(str(path)).header[R.HOST_ACCESSES_KEY] == R.HOST_WATCH_FAULTS


@pytest.mark.parametrize("case", ["numpy-view", "raw-pointer", "memoryview-read"])
def test_after_the_host_waits_for_the_copy_it_is_clean(tmp_path, case):
    p, path = _record(tmp_path, case, "fixed")
    assert p.returncode == 0, p.stderr
    assert _analyze(path) == []
    text = _analyze(path, "text")
    assert "are not seen" not in text  # the watch was on: no note that it was not


@pytest.mark.parametrize("case", ["numpy-view", "raw-pointer", "memoryview-read"])
def test_pageable_memory_never_faults(tmp_path, case):
    p, path = _record(tmp_path, case, "pageable")
    assert p.returncode == 0, p.stderr
    assert _analyze(path) == []
    assert not any(r[0] == R.HOST_ACCESS for r in TraceReader(str(path)).records())


def test_the_same_race_is_not_seen_with_the_watch_off_and_the_report_says_why(tmp_path):
    p, path = _record(tmp_path, "numpy-view", "bug", on=False)
    assert p.returncode == 0, p.stderr
    assert _analyze(path) == []
    assert TraceReader(str(path)).header[R.HOST_ACCESSES_KEY] == R.HOST_WATCH_TORCH
    text = _analyze(path, "text")
    assert text.count("host accesses outside torch ops (numpy views, raw pointers) are not seen") == 1
    assert f"page-fault watch: off, set {host_faults.ENV}=1 to turn it on" in text


def test_a_forked_child_writes_the_buffer_unharmed_and_the_parent_is_still_watched(tmp_path):
    p, path = _record(tmp_path, "fork", "bug")
    assert p.returncode == 0, p.stderr
    found = _analyze(path)
    assert len(found) == 1 and _host_side(found[0])[0]["op"] == host_faults.FAULT_WRITE, found


def test_a_real_segfault_still_kills_the_process(tmp_path):
    p, _ = _record(tmp_path, "segfault", "-")
    assert "protected" in p.stdout  # it got as far as the protected pages
    assert p.returncode in (-signal.SIGSEGV, 128 + signal.SIGSEGV), (p.returncode, p.stderr)


def test_the_handler_notes_each_kind_of_first_touch_and_chains_a_real_segfault(tmp_path):
    """In process: a protected page faults once per kind of access; lifting and
    uninstalling give the previous handler back; a segfault outside every protected range,
    while the handler is in, reaches the previous handler (faulthandler) and kills."""
    code = r"""
import ctypes, faulthandler, mmap, signal, sys
faulthandler.enable()
from npusan.recorder import _hostfault as H
ps = H.page_size()
mm = mmap.mmap(-1, 2 * ps)
base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
slot = H.protect(base, base + ps)
mv = memoryview(mm)
assert mv[ps + 1] == 0            # the page after: not protected, no fault
assert H.pending() == 0
x = mv[5]                         # read fault: the page becomes readable
mv[7] = 1                         # write fault: and writable
mv[9] = 2                         # no fault
faults, dropped = H.take()
assert [f[:2] for f in faults] == [(base + 5, False), (base + 7, True)], faults
assert H.lift(slot) == 0 and H.uninstall() is True
assert signal.getsignal(signal.SIGSEGV) is not None
slot = H.protect(base, base + ps)  # the handler is in again
print("ok", flush=True)
ctypes.string_at(0)
"""
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "ok", p.stderr
    assert p.returncode == -signal.SIGSEGV
    assert "Segmentation fault" in p.stderr  # faulthandler's dump: the chain reached it


def _page_tensor(torch, pages):
    import mmap

    buf = mmap.mmap(-1, pages * mmap.PAGESIZE)
    return torch.frombuffer(buf, dtype=torch.int32)


def test_protection_is_lifted_when_the_host_is_ordered_after_the_copy():
    """Which synchronization lifts what: an event recorded after the copy on its stream, a
    synchronize of that stream or of the device, the buffer's death; not an event of
    another stream, nor one recorded before the copy."""
    import gc

    import torch

    posted = []
    pw = host_faults.PageWatch(lambda name, spans, where: posted.append((name, spans[0][1], spans[0][4])))
    try:
        a, b = _page_tensor(torch, 2), _page_tensor(torch, 1)
        s0, s1 = (0, 7), (0, 8)
        pw.event_recorded(100, 7, 0)  # before the copy
        pw.protect([(a, False)], s0)
        pw.protect([(b[:4], True)], s1)
        assert set(pw.ranges) == {a.data_ptr(), b.data_ptr()} and pw.armed
        pw.event_synced(100)
        pw.event_recorded(101, 8, 0)  # another stream, after b's copy
        pw.event_synced(101)
        assert a.data_ptr() in pw.ranges and b.data_ptr() not in pw.ranges  # neither lifted a's
        a.numpy()[1] = 5  # a write outside torch ops: faults once, noted
        a.numpy()[2] = 6
        pw.drain()
        assert posted == [(host_faults.FAULT_WRITE, 4, True)]
        pw.event_recorded(102, 7, 0)  # after the copy, on its stream
        pw.event_synced(102)
        assert a.data_ptr() not in pw.ranges
        pw.protect([(a, False)], s0)
        pw.stream_synced(7, 0)
        assert a.data_ptr() not in pw.ranges
        pw.protect([(a, False)], s0)
        pw.device_synced(None)
        assert not pw.ranges and not pw.armed
        pw.protect([(b, False)], s1)
        del b
        gc.collect()
        assert not pw.ranges  # the buffer died: lifted
        assert int(a[1]) == 5 and int(a[2]) == 6  # the program's writes all happened
    finally:
        pw.close()


def test_storages_off_a_page_boundary_are_not_protected():
    import torch

    pw = host_faults.PageWatch(lambda name, spans, where: None)
    try:
        t = _page_tensor(torch, 2)
        pw.protect([(t[3:], False)], (0, 1))  # a view: its storage is page-aligned
        assert pw.ranges
        pw.device_synced(None)
        odd = torch.frombuffer(bytearray(64), dtype=torch.int32)
        if odd.data_ptr() % 4096:
            pw.protect([(odd, False)], (0, 1))
            assert not pw.ranges and pw.unaligned == 1
            assert pw.refused == "a pinned buffer that does not start on a page boundary"
    finally:
        pw.close()


def test_a_handler_installed_over_ours_stops_the_watch():
    """faulthandler.enable() after the watch started: the next protection is refused (a
    fault would reach faulthandler first and end the program) and every page is lifted."""
    code = r"""
import faulthandler, mmap, torch
from npusan.recorder import host_faults
faulthandler.disable()
pw = host_faults.PageWatch(lambda name, spans, where: None)
buf = mmap.mmap(-1, 2 * mmap.PAGESIZE)
t = torch.frombuffer(buf, dtype=torch.int32)
pw.protect([(t[:4], False)], (0, 1))
assert pw.ranges
faulthandler.enable()
pw.protect([(t, False)], (0, 1))
assert pw.stopped and not pw.ranges and pw.closed
t[0] = 1; memoryview(buf)[5] = 2  # no page protected: nothing faults
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_the_faulting_frame_replaces_the_drain_sites_from_its_own_frame_on():
    drained = (11, 40, 22, 80, 33, 12)  # innermost first: (id(code), lasti) pairs
    assert host_faults.at_fault(drained, (22, 64)) == (22, 64, 33, 12)  # drained in a callee of it
    assert host_faults.at_fault(drained, (11, 8)) == (11, 8, 22, 80, 33, 12)  # in its own frame
    assert host_faults.at_fault(drained, (44, 8)) == drained  # returned: the drain site's stack
