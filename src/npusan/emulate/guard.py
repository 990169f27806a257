"""A CUDA device guard for a CPU-only torch, so autograd accepts tensors that say ``cuda``.

Autograd asks the device guard registry for the ``cuda`` guard (``InputMetadata`` takes the
current stream of each input's device; the engine sets streams around each backward node).
A CPU-only build registers none and aborts the process. libc10 itself carries one:
``ensureCUDADeviceGuardSet()`` keeps a ``FakeGuardImpl<CUDA>`` (thread-local current
device and streams, no runtime) for CUDA builds without a GPU, but only swaps it in when a
CUDA guard is already there. This module finds that object by its symbol in libc10's own
symbol table and stores it in the registry's CUDA slot -- the object torch itself would
install. Without the symbol (a stripped or different build) :func:`install` raises
:class:`GuardUnavailable` with the reason.
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Dict, Optional

_REGISTRY = "_ZN3c104impl26device_guard_impl_registryE"
_FAKE_GUARD = "_ZZN3c104impl24ensureCUDADeviceGuardSetEvE15fake_cuda_guard"
_CUDA = 1  # c10::DeviceType::CUDA


class GuardUnavailable(RuntimeError):
    """This torch build has no CUDA device guard that can be borrowed."""


def _symbols(path: str, names: set) -> Dict[str, int]:
    """Values of ``names`` in the ELF64 ``.symtab`` (and ``.dynsym``) of ``path``."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise GuardUnavailable(f"{path} is not a little-endian ELF64 library")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: Dict[str, int] = {}
    for _name, typ, _fl, _addr, off, size, link, _info, _al, entsize in sections:
        if typ not in (2, 11) or not entsize:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        stroff = sections[link][4]
        for i in range(size // entsize):
            st_name, _inf, _oth, _shndx, value, _sz = struct.unpack_from("<IBBHQQ", data, off + i * entsize)
            end = data.index(b"\0", stroff + st_name)
            sym = data[stroff + st_name:end].decode("ascii", "replace")
            if sym in names and value:
                found[sym] = value
        if len(found) == len(names):
            break
    return found


_installed: Optional[int] = None


def install() -> None:
    """Put libc10's fake CUDA guard in the registry's CUDA slot (idempotent; a real CUDA
    guard already there is left alone)."""
    global _installed
    if _installed is not None:
        return
    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    if not os.path.isfile(path):
        raise GuardUnavailable(f"no {path}")
    lib = ctypes.CDLL(path)
    slots = (ctypes.c_void_p * 2).in_dll(lib, _REGISTRY)
    if slots[_CUDA]:
        _installed = slots[_CUDA]
        return
    syms = _symbols(path, {_REGISTRY, _FAKE_GUARD})
    if len(syms) != 2:
        raise GuardUnavailable("libc10 has no FakeGuardImpl<CUDA> symbol (a stripped or older torch build)")
    base = ctypes.addressof(slots) - syms[_REGISTRY]
    slots[_CUDA] = base + syms[_FAKE_GUARD]
    _installed = slots[_CUDA]
