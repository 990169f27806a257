"""The error codes of the compiled replay core, defined once, with what each means.

The core reports a record the engine rejects as ``(code, field)``; ``native.problem`` turns
that into the Python engine's own message (the function of ``engine.py`` named beside each
code below). ``csrc/gen_tables.py`` writes these codes into the C header the core is
compiled with, and the core exports them back (``_core.ERRORS``), which ``native.py`` uses,
so the numbers live only here.

This module imports nothing: the build loads it by path, before the package is installed.
"""

from __future__ import annotations

#: name -> (code, meaning). Code 0 means "no error"; codes are consecutive from 1.
ERRORS: dict = {
    "STREAM_UNDEFINED": (1, "a stream index that is not defined (engine.stream_undefined)"),
    "TOO_MANY_STREAMS": (2, "more than engine.MAX_STREAMS streams (engine.too_many_streams)"),
    "EVENT": (3, "an event id that is not an integer handle (engine.bad_event)"),
    "DEVICE": (4, "a device synchronize naming a device that is not an integer (engine.bad_device)"),
    "BID_RANGE": (5, "a block id out of range (engine.bid_out_of_range)"),
    "MALFORMED_BLOCK": (6, "a block with a malformed pointer or size (engine.malformed_block)"),
    "BLOCK_UNDEFINED": (7, "a block id that is not defined or was freed (engine.block_undefined)"),
    "ACCESS_SHAPE": (8, "a kernel access neither an int nor [block, offset, nbytes] (engine.access_shape)"),
    "ACCESS_MALFORMED": (9, "a kernel access with a malformed block, offset or size (engine.access_malformed)"),
    "VIEWS": (10, "a malformed VIEWS record (the reason: strided.parse_views)"),
    "STACK": (11, "a stack field that is neither a stack id nor nil (engine.bad_stack)"),
    "NOMEM": (12, "the core ran out of memory (the binding raises MemoryError instead)"),
    "OP": (13, "a kernel's op field that is neither nil nor a defined string id (engine.bad_op)"),
}


def codes() -> dict:
    """name -> code, the form ``_core.ERRORS`` exports."""
    return {name: code for name, (code, _) in ERRORS.items()}
