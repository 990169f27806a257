"""A stand-in torch_npu (same hook-registry shape) for CPU tests of the NPU adapter."""
