"""The limits a trace reader applies to untrusted input (docs/trace-format.md, section 9).

One module, so that every reader of trace bytes (:class:`~npusan.trace_format.reader.TraceReader`,
the checks on a trace's unfinished tail, the compiled replay core's binding) bounds the same
things by the same numbers.
"""

#: Limits on one msgpack object (a record, or the header). A record is a few dozen bytes
#: (a kernel with thousands of accesses, tens of KiB); these bound what a corrupt or
#: hostile file can make the reader allocate. Decoding can cost up to ~75 bytes of memory
#: per encoded byte (a byte ``0x80`` is a new empty dict), so one record of 4 MiB costs at
#: most ~300 MiB while it is decoded (docs/security.md).
MAX_RECORD_BYTES = 4 << 20
MAX_STR_LEN = 1 << 20
MAX_BIN_LEN = 1 << 20
MAX_ARRAY_LEN = 1 << 18
MAX_MAP_LEN = 1 << 16
MAX_EXT_LEN = 1 << 20
READ_SIZE = 1 << 16
#: The header, encoded: npusan writes well under 1 KiB; metadata maps beyond this are refused.
MAX_HEADER_BYTES = 1 << 20

#: msgpack's unpacking options for one record read whole, under the limits above (as the
#: reader's record unpacker reads it).
UNPACK_LIMITS = dict(raw=False, strict_map_key=False, max_str_len=MAX_STR_LEN, max_bin_len=MAX_BIN_LEN,
                     max_array_len=MAX_ARRAY_LEN, max_map_len=MAX_MAP_LEN, max_ext_len=MAX_EXT_LEN)
