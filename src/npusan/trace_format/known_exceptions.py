"""The exception type names a redacted trace may keep: Python's, torch's and a few
well-known libraries' own classes, never a program's.

The recorder writes the uncaught exception's ``__qualname__`` (``OutOfMemoryError``, not
``torch.cuda.OutOfMemoryError``), so names are matched bare. A name shaped like an exception
class (``TokenAbcError``) is not enough: it may be a user's private class, which is as much
the program's as its file names. The table is fixed (nothing is imported to check a name
from a trace); a test checks that each entry is the qualified name of an exception class
of the module it lists.
"""

from __future__ import annotations

import builtins
from typing import Final

#: module -> the ``__qualname__`` of exception classes it defines (or exports) that a
#: training program may end with. Names must be exactly those classes' qualified names.
LIBRARY_EXCEPTIONS: Final[dict] = {
    # torch
    "torch": ("OutOfMemoryError", "AcceleratorError", "FatalError", "Error"),
    "torch.cuda": ("CudaError", "DeferredCudaCallError"),
    "torch.linalg": ("_LinAlgError",),
    "torch.distributed": ("DistError", "DistBackendError", "DistNetworkError", "DistStoreError",
                          "QueueEmptyError"),
    "torch.distributed.elastic.multiprocessing.errors": ("ChildFailedError",),
    "torch.distributed.elastic.rendezvous": ("RendezvousError", "RendezvousClosedError",
                                             "RendezvousConnectionError", "RendezvousStateError",
                                             "RendezvousTimeoutError", "RendezvousGracefulExitError"),
    "torch.multiprocessing": ("ProcessExitedException", "ProcessRaisedException"),
    "torch.utils.checkpoint": ("CheckpointError",),
    "torch.jit": ("TracingCheckError",),
    "torch.onnx": ("OnnxExporterError",),
    "torch._dynamo.exc": ("TorchDynamoException", "InternalTorchDynamoError", "BackendCompilerFailed",
                          "Unsupported", "TorchRuntimeError", "InvalidBackend", "RecompileError",
                          "UserError", "FailOnRecompileLimitHit"),
    "torch._inductor.exc": ("InductorError", "LoweringException", "CppCompileError", "CUDACompileError",
                            "InvalidCxxCompiler", "TritonMissing", "GPUTooOldForTriton"),
    # well-known libraries next to torch
    "numpy.linalg": ("LinAlgError",),
    "numpy.exceptions": ("AxisError",),
    "triton.compiler.errors": ("CompilationError",),
    "triton.runtime.errors": ("OutOfResources",),
    # the standard library (beyond the builtins)
    "subprocess": ("CalledProcessError", "TimeoutExpired", "SubprocessError"),
    "json": ("JSONDecodeError",),
    "pickle": ("PickleError", "PicklingError", "UnpicklingError"),
    "queue": ("Empty", "Full"),
    "asyncio": ("CancelledError", "InvalidStateError", "IncompleteReadError", "LimitOverrunError"),
    "concurrent.futures": ("BrokenExecutor",),
    "concurrent.futures.process": ("BrokenProcessPool",),
    "concurrent.futures.thread": ("BrokenThreadPool",),
    "threading": ("BrokenBarrierError",),
    "multiprocessing": ("AuthenticationError", "BufferTooShort", "ProcessError"),
    "multiprocessing.managers": ("RemoteError",),
    "ssl": ("SSLError", "SSLEOFError", "SSLZeroReturnError", "SSLCertVerificationError"),
    "socket": ("gaierror", "herror"),
    "urllib.error": ("HTTPError", "URLError", "ContentTooShortError"),
    "http.client": ("HTTPException", "RemoteDisconnected", "IncompleteRead"),
    "zipfile": ("BadZipFile", "LargeZipFile"),
    "tarfile": ("TarError", "ReadError"),
    "shutil": ("Error", "SameFileError"),
    "argparse": ("ArgumentError", "ArgumentTypeError"),
    "unittest": ("SkipTest",),
    "xml.etree.ElementTree": ("ParseError",),
    "io": ("UnsupportedOperation",),
}

#: Python's own exception names (``RuntimeError``, ``StopIteration``, ``KeyboardInterrupt``).
BUILTIN_EXCEPTIONS: Final = frozenset(
    name for name, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
)

#: Every bare name kept.
KNOWN_EXCEPTIONS: Final = BUILTIN_EXCEPTIONS | frozenset(n for names in LIBRARY_EXCEPTIONS.values() for n in names)

#: The top-level packages a dotted name (``torch.cuda.OutOfMemoryError``, as a third-party
#: writer may record it) may start with.
KNOWN_ROOTS: Final = frozenset({"builtins"} | {m.split(".")[0] for m in LIBRARY_EXCEPTIONS})


def is_known_exception(name: str) -> bool:
    """Whether ``name`` is the name of one of the exception classes above: bare, or dotted
    under one of their packages (the last part one of the names, the first a known package)."""
    if name in KNOWN_EXCEPTIONS:
        return True
    parts = name.split(".")
    return (len(parts) > 1 and parts[0] in KNOWN_ROOTS and parts[-1] in KNOWN_EXCEPTIONS
            and all(p.isidentifier() for p in parts))
