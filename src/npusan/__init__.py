"""npusan: a stream-synchronization sanitizer for PyTorch on Ascend NPUs and CUDA GPUs.

The package is layered recorder -> trace_format -> analyzer -> cli. Importing ``npusan``
stays cheap and never imports torch; the recording entry points import it lazily.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
