"""Stand-in for ``torch_npu._C``: the accessors npusan may use, with the real names."""

from __future__ import annotations

from . import _fake


def _activate_npu_trace(mode: int) -> None:
    st = _fake.state
    st.activate_calls.append(mode)
    if st.trace_mode is None:  # NPUTrace::setTrace is call_once: the first mode wins
        st.trace_mode = mode


def _npu_getDevice() -> int:
    return _fake.state.device


def _npu_setDevice(device: int) -> None:
    _fake.state.device = device


def _npu_getDeviceCount() -> int:
    return _fake.state.device_count


def _npu_getCurrentStream(device: int):
    return (_fake.state.current_id(device), device, _fake.DEVICE_TYPE)


def _npu_getDefaultStream(device: int):
    return (0, device, _fake.DEVICE_TYPE)


def _npu_setStream(stream_id: int = 0, device_index: int = 0, device_type: int = 0) -> None:
    st = _fake.state
    if st.device != device_index:  # the real one switches device too
        st.device = device_index
    st.set_current(device_index, stream_id)


def _npu_getCurrentRawStreamNoWait(device: int) -> int:
    st = _fake.state
    return st.raw[(device, st.current_id(device))]


def _npu_getCurrentRawStream(device: int) -> int:
    _fake.state.drain("torch_npu._C._npu_getCurrentRawStream")
    return 0
