"""Stand-in for ``torch_npu.npu._sanitizer``: torch_npu's own sanitizer, as far as npusan sees it.

``enable()`` registers its handler on every stream-mode hook (stream mode) or on the ACL
hooks (kernel mode, chosen by ``ASCEND_OPP_DEBUG_PATH``) and activates the trace in that
mode, like the real one. Its handler only logs what it receives, so a test can check that
npusan's presence did not take anything away from it.
"""

from __future__ import annotations

import os

import torch_npu
from torch_npu.utils import _npu_trace as npu_trace


class SanitizerMode:
    STREAM = 0
    KERNEL = 1


class _LoggingHandler:
    def __init__(self) -> None:
        self.seen = []

    def __getattr__(self, name):
        if not name.startswith("_handle_"):
            raise AttributeError(name)

        def handler(*args):
            self.seen.append((name[len("_handle_"):], args))

        return handler


_STREAM_HOOKS = (
    "event_creation", "event_deletion", "event_record", "event_wait", "memory_allocation",
    "memory_deallocation", "stream_creation", "device_synchronization", "stream_synchronization",
    "event_synchronization", "record_stream", "erase_stream",
)


class NPUSanitizer:
    def __init__(self) -> None:
        self.event_handler = None
        self.dispatch = None
        self.mode = SanitizerMode.STREAM
        self.enabled = False

    def enable(self) -> None:
        self.event_handler = _LoggingHandler()
        if os.getenv("ASCEND_OPP_DEBUG_PATH"):
            self.mode = SanitizerMode.KERNEL
            npu_trace.register_callback_for_acl_start_execution(
                self.event_handler._handle_acl_start_execution, "handle_acl_start_execution")
        else:
            self.mode = SanitizerMode.STREAM
            for hook in _STREAM_HOOKS:
                getattr(npu_trace, "register_callback_for_npu_" + hook)(
                    getattr(self.event_handler, "_handle_" + hook), "handle_" + hook)
        if not self.enabled:
            torch_npu._C._activate_npu_trace(self.mode)
            self.enabled = True


def enable_npu_sanitizer() -> None:
    npu_sanitizer.enable()


npu_sanitizer = NPUSanitizer()
