"""A stand-in ``torch_npu`` for CPU tests of npusan's NPU adapter.

Same registry shape as the real package (``torch_npu.utils._npu_trace`` with
``register_callback_for_npu_*(cb, cb_name)``, ``torch_npu._C._activate_npu_trace``,
``torch_npu._C._npu_getCurrentRawStreamNoWait``, ``torch_npu.npu`` streams and events) and a
trigger API in :mod:`torch_npu._fake`. Like the real one, importing it with
``TORCH_NPU_SANITIZER`` set enables torch_npu's own sanitizer.
"""

import os

import torch  # noqa: F401  (the real package imports torch before anything else)

from . import _C, _fake, npu, utils  # noqa: F401
from .utils import _npu_trace  # noqa: F401

__version__ = "0.0.0+fake"

if "TORCH_NPU_SANITIZER" in os.environ:
    from .npu import _sanitizer as _csan

    _csan.enable_npu_sanitizer()
