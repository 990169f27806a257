"""ProcessGroupHCCL as the stand-in runs it (tests only).

What torch_npu's ProcessGroupHCCL does around a collective (``ProcessGroupHCCL.cpp``):
``syncStreams`` at launch -- an event recorded on the current stream and blocked on the
HCCL stream of the device --, ``recordStream`` of the inputs and outputs to the HCCL
stream (the allocator fires its record_stream hook), the collective on the HCCL stream,
the end event recorded there; then ``WorkHCCL::synchronize`` (``work.wait()``) blocks
the then-current stream on the end event and calls ``eraseStream`` for every tensor it
recorded (the erase_stream hook).

:class:`ProcessGroupHCCL` plays that for ``c10d::allreduce_`` of a world of one (the
reduction is the identity): it replaces the op's CPU kernel while installed, so that the
op reaches the recorder's dispatch mode exactly as on an NPU and the hooks fire inside it.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import _fake, npu


class ProcessGroupHCCL:
    def __init__(self, device: int = 0) -> None:
        self.device = device
        self.stream = npu.Stream(device)  # the HCCL stream of the device (a pool stream)
        self._lib: Optional[torch.library.Library] = None
        self._pending: Dict[Any, Tuple[npu.Event, List[int]]] = {}  # Work -> (end event, ptrs)
        self._orig_wait = None
        self.launched = 0

    def install(self) -> "ProcessGroupHCCL":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            self._lib = torch.library.Library("c10d", "IMPL")
            self._lib.impl("allreduce_", self._allreduce, "CPU")
        Work = torch._C._distributed_c10d.Work
        self._orig_wait = orig = Work.wait
        pg = self

        def wait(work, *args, **kwargs):
            res = orig(work, *args, **kwargs)
            pg._synchronize(work)
            return res

        Work.wait = wait
        self._wait = wait
        return self

    def uninstall(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
            self._lib = None
        Work = torch._C._distributed_c10d.Work
        if self._orig_wait is not None and Work.wait is self._wait:
            Work.wait = self._orig_wait
        self._pending.clear()

    def _allreduce(self, tensors, process_group, reduce_op, sparse_indices, async_op=True, timeout=-1):
        self.launched += 1
        start = npu.Event()
        start.record(npu.current_stream(self.device))  # syncStreams
        start.wait(self.stream)
        ptrs = [t.untyped_storage().data_ptr() for t in tensors]
        for p in ptrs:
            _fake.record_stream(p, self.stream)
        end = npu.Event()
        end.record(self.stream)
        fut = torch.futures.Future()
        fut.set_result(tensors)
        work = torch._C._distributed_c10d._create_work_from_future(fut)
        self._pending[work] = (end, ptrs)  # alive: Python gets this same Work object back
        return tensors, work.boxed()

    def _synchronize(self, work) -> None:
        entry = self._pending.pop(work, None)
        if entry is None:
            return
        end, ptrs = entry
        end.wait(npu.current_stream(self.device))
        for p in ptrs:
            _fake.erase_stream(p, self.stream)
