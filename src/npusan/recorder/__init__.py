"""The recorder: device activity of a PyTorch program -> a trace (or a live engine).

Pieces: ``backends/`` (one adapter per device runtime: CUDA, NPU, the simulated device),
``dispatch`` (a TorchDispatchMode in every thread: kernels and their byte-range accesses),
``access`` (schema-based read/write classification), ``stacks`` (cheap interned stacks),
``session`` (the :class:`~.session.Recorder` core, which starts its parts: ``event_queue``,
``callbacks``, ``sinks``, ``online_check``, ``collectives``, ``process_hooks``), ``activate`` (``NPUSAN_TRACE``,
``npusan record``, trace naming per process). Importing this package does not import torch.
"""
