"""Stand-in for ``torch_npu.utils._npu_trace`` (the registry shape of torch_npu 2.x).

Callbacks are registered as ``(cb, cb_name)`` pairs; ``fire_callbacks`` calls each and,
like the real one, logs and swallows an exception from any of them.
"""

from __future__ import annotations

import logging
from typing import Callable

logger = logging.getLogger(__name__)


class CallbackRegistry:
    def __init__(self, name: str) -> None:
        self.name = name
        self.callback_list = []

    def add_callback(self, cb: Callable, cb_name: str) -> None:
        self.callback_list.append((cb, cb_name))

    def fire_callbacks(self, *args, **kwargs) -> None:
        for cb, cb_name in self.callback_list:
            try:
                cb(*args, **kwargs)
            except Exception:
                logger.exception("Exception in callback %s for %s registered with NPU trace", cb_name, self.name)


NPUACLStartExecuteCallbacks = CallbackRegistry("[kernel check] NPU acl start execution")
NPUACLFinishExecuteCallbacks = CallbackRegistry("[kernel check] NPU acl finish execution")
NPUEventCreationCallbacks = CallbackRegistry("NPU event creation")
NPUEventDeletionCallbacks = CallbackRegistry("NPU event deletion")
NPUEventRecordCallbacks = CallbackRegistry("NPU event record")
NPUEventWaitCallbacks = CallbackRegistry("NPU event wait")
NPUMemoryAllocationCallbacks = CallbackRegistry("NPU memory allocation")
NPUMemoryDeallocationCallbacks = CallbackRegistry("NPU memory deallocation")
NPUStreamCreationCallbacks = CallbackRegistry("NPU stream creation")
NPUDeviceSynchronizationCallbacks = CallbackRegistry("NPU device synchronization")
NPUStreamSynchronizationCallbacks = CallbackRegistry("NPU stream synchronization")
NPUEventSynchronizationCallbacks = CallbackRegistry("NPU event synchronization")
NPURecordStreamCallbacks = CallbackRegistry("NPU record stream")
NPUEraseStreamCallbacks = CallbackRegistry("NPU erase stream")


def register_callback_for_acl_start_execution(cb: Callable, cb_name: str) -> None:
    NPUACLStartExecuteCallbacks.add_callback(cb, cb_name)


def register_callback_for_acl_finish_execution(cb: Callable, cb_name: str) -> None:
    NPUACLFinishExecuteCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_creation(cb: Callable, cb_name: str) -> None:
    NPUEventCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_deletion(cb: Callable, cb_name: str) -> None:
    NPUEventDeletionCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_record(cb: Callable, cb_name: str) -> None:
    NPUEventRecordCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_wait(cb: Callable, cb_name: str) -> None:
    NPUEventWaitCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_allocation(cb: Callable, cb_name: str) -> None:
    NPUMemoryAllocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_deallocation(cb: Callable, cb_name: str) -> None:
    NPUMemoryDeallocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_creation(cb: Callable, cb_name: str) -> None:
    NPUStreamCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_device_synchronization(cb: Callable, cb_name: str) -> None:
    NPUDeviceSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_synchronization(cb: Callable, cb_name: str) -> None:
    NPUStreamSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_synchronization(cb: Callable, cb_name: str) -> None:
    NPUEventSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_record_stream(cb: Callable, cb_name: str) -> None:
    NPURecordStreamCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_erase_stream(cb: Callable, cb_name: str) -> None:
    NPUEraseStreamCallbacks.add_callback(cb, cb_name)
