"""Stand-in for ``torch_npu.utils``."""
