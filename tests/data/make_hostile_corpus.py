"""Write the hostile-trace corpus: tests/data/hostile/<name>.npusan plus expected.json.

Each trace is built by hand, byte by byte where the writer would refuse, to hit one way a
trace from a stranger could hurt the analyzing machine. ``expected.json`` says, for each
trace and each verb (analyze, info, export), the exit status and a piece of text that must
appear in stderr ("" for none); tests/cli/test_hostile_corpus.py checks them. Run
``python tests/data/make_hostile_corpus.py`` after changing a case and commit the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgpack

HERE = Path(__file__).resolve().parent
OUT = HERE / "hostile"
sys.path.insert(0, str(HERE.parents[1] / "src"))

from npusan.trace_format import records as R  # noqa: E402

ESC = "\x1b]52;c;c2VjcmV0\x07\x1b]0;title\x07\x1b[2K\x9b31m\u202egnp.exe\nforged line"
BIG = 2**24 - 1
HEADER = {"format": [1, 0], "backend": "cuda", "default_streams": {0: 0}}


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def trace(records, header=None, *, end=True) -> bytes:
    body = b"".join(r if isinstance(r, bytes) else pack(r) for r in records)
    return R.MAGIC + pack(HEADER if header is None else header) + body + (pack([R.END, {}]) if end else b"")


def race(op="aten::add", file="t.py", func="f", stack=0, extra=()) -> list:
    """A data race between stream 0 and stream 1 on one 64-byte block."""
    return [[R.STR, 0, op], [R.STR, 1, file], [R.STR, 2, func], [R.FRAME, 0, 1, 3, 2], [R.STACK, 0, [0]],
            [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 0x51], [R.STREAM_CREATED, 1, 0],
            [R.ALLOC, 0, 0x1000, 64, 0, 0], *extra,
            [R.KERNEL, 0, 0, stack, ~0], [R.KERNEL, 1, 0, stack, 0]]


def empty_maps(n: int) -> bytes:
    """One msgpack array holding ``n`` empty maps in arrays of 65,535 (one byte each in the
    file, ~70 bytes each once decoded)."""
    chunks = [min(65535, n - i) for i in range(0, n, 65535)]
    return b"\xdd" + len(chunks).to_bytes(4, "big") + b"".join(
        b"\xdc" + k.to_bytes(2, "big") + b"\x80" * k for k in chunks)


def cases() -> dict:
    c = {}
    ok = {"analyze": [1, ""], "info": [0, ""], "export": [0, ""]}

    # Escape sequences in every string a trace can carry.
    header = {**HEADER, "host": ESC, "argv": [ESC], "writer": ESC, "torch": ESC, "metadata": {ESC: ESC}}
    c["escapes_everywhere"] = (trace(race(op=ESC, file=ESC, func=ESC, extra=[[R.THREAD, 0, ESC]]), header), ok)
    note = trace(race()[:-1] + [[R.NOTE, ESC, ESC], race()[-1]])
    c["escapes_in_note"] = (note, ok)

    # Field types the format does not allow.
    c["header_backend_list"] = (trace(race(), {**HEADER, "backend": [1, 2]}), ok)
    c["header_keys_wrong_types"] = (trace(race(), {"format": [1, 0], "default_streams": [1], "argv": "x",
                                                   "pid": "p", "rank": {}, "start_time": "now",
                                                   "device_count": [1], "host": 5, 7: 8}), ok)
    # A stack is a stack id or nil (docs/trace-format.md sections 5 and 7; docs/security.md:
    # "a map as a stack id" is corrupt): another type is refused, with the record named.
    bad_stack = {v: [2, "record 10 at byte offset 111"] for v in ("analyze", "info", "export")}
    c["stack_id_map"] = (trace(race(stack={})), {**bad_stack, "analyze": [2, "the stack id is a map"]})
    c["stack_id_list"] = (trace(race(stack=[0])), {**bad_stack, "analyze": [2, "the stack id is an array"]})
    # A kernel's op is nil or a defined string id (docs/trace-format.md sections 5 and 7):
    # an op of another type, or naming a string never defined, is corrupt (it showed as "?").
    bad_op = {v: [2, "record 10 at byte offset"] for v in ("analyze", "info")}
    bad_op["export"] = [2, "record 10"]
    c["op_id_list"] = (trace(race()[:-2] + [[R.KERNEL, 0, [0], 0, ~0], [R.KERNEL, 1, [0], 0, 0]]),
                       {**bad_op, "analyze": [2, "the op is an array, not a string id or nil"]})
    c["op_id_string"] = (trace(race()[:-2] + [[R.KERNEL, 0, "aten::add", 0, ~0], race()[-1]]),
                         {**bad_op, "analyze": [2, "the op is a string, not a string id or nil"]})
    c["op_id_undefined"] = (trace(race()[:-2] + [[R.KERNEL, 0, 77, 0, ~0], race()[-1]]),
                            {**bad_op, "analyze": [2, "the op is string id 77, which is not defined"]})
    # A frame's line number is 0 (unknown) or more.
    c["frame_line_negative"] = (trace([[R.STR, 0, "t.py"], [R.FRAME, 0, 0, -3, 0]]),
                                {v: [2, "record 2 at byte offset 59: frame 0 has a negative line number (-3)"]
                                 for v in ("analyze", "info", "export")})
    # END's statistics are informational: another type than a map is warned about, not fatal.
    c["end_stats_not_a_map"] = (trace(race(), end=False) + pack([R.END, [1, 2]]),
                                {**ok, "analyze": [1, "the end record's statistics are not a map; ignored"]})
    # info refuses what analyze refuses, with the same line (it replays the trace first).
    bad_kernel = {"analyze": [2, "record 11 at byte offset"], "info": [2, "record 11 at byte offset"],
                  "export": [2, "record 11"]}
    # A NOTE's level and text are strings (docs/trace-format.md, section 3): corrupt otherwise.
    c["note_level_ext"] = (trace(race()[:-1] + [[R.NOTE, msgpack.ExtType(5, b"x"), b"\xff"], race()[-1]]),
                           {v: [2, "has a level that is an extension type, not a string"]
                            for v in ("analyze", "info", "export")})
    c["stream_index_map"] = (trace(race()[:-1] + [[R.KERNEL, {}, 0, 0, 0]]),
                             {v: [2, "record 11"] for v in ("analyze", "info", "export")})
    c["access_float"] = (trace(race()[:-1] + [[R.KERNEL, 1, 0, 0, 1.5]]), bad_kernel)
    c["record_type_string"] = (trace([["17", 0]]), {v: [2, "record type that is not an integer"]
                                                    for v in ("analyze", "info", "export")})

    # Ids: the largest the format allows, and beyond.
    huge = [[R.STR, BIG, "aten::add"], [R.STR, BIG - 1, "t.py"], [R.FRAME, BIG, BIG - 1, 1, BIG],
            [R.STACK, BIG, [BIG]], [R.STREAM_DEF, 0, 0, 0], [R.STREAM_DEF, 1, 0, 5], [R.THREAD, BIG, "t"],
            [R.STREAM_CREATED, 1, BIG], [R.ALLOC, BIG, 4096, 64, 0, BIG],
            [R.KERNEL, 0, BIG, BIG, ~BIG], [R.KERNEL, 1, BIG, BIG, BIG],
            [R.EVENT_CREATED, 2**64 - 1, None], [R.EVENT_RECORD, 2**64 - 1, 1, None], [R.FREE, BIG, BIG]]
    c["ids_all_max"] = (trace(huge), ok)
    c["id_out_of_range"] = (trace([[R.STR, 2**24, "x"]]), {v: [2, "out of range"] for v in ("analyze", "info", "export")})
    c["id_negative"] = (trace([[R.STR, -1, "x"]]), {v: [2, "out of range"] for v in ("analyze", "info", "export")})

    # Sizes: claimed and real.
    big_meta = b"\x83" + pack("format") + pack([1, 0]) + pack("backend") + pack("cuda") + pack("metadata") + \
        b"\x81" + pack("m") + empty_maps(1100 << 10)
    c["header_over_1mib"] = (R.MAGIC + big_meta + pack([R.END, {}]),
                             {v: [2, "header is larger than the 1024 KiB limit"] for v in ("analyze", "info", "export")})
    many_keys = {**HEADER, "metadata": {f"k{i}": i for i in range(60000)}}
    c["header_metadata_60k_keys"] = (trace(race(), many_keys), ok)
    c["record_over_4mib"] = (trace([b"\x92\x63" + empty_maps(4200 << 10)]),
                             {v: [2, "larger than the 4 MiB limit"] for v in ("analyze", "info", "export")})
    c["string_claims_4gib"] = (trace([], end=False) + b"\x93\x00\x00\xdb\xff\xff\xff\xff",
                               {v: [2, "over the reader's limit"] for v in ("analyze", "info", "export")})
    c["array_claims_4g_elements"] = (trace([], end=False) + b"\xdd\xff\xff\xff\xff",
                                     {v: [2, "corrupt data at record 1"] for v in ("analyze", "info", "export")})
    c["nested_arrays_deep"] = (trace([], end=False) + b"\x91" * 5000 + b"\x00",
                               {v: [2, "corrupt"] for v in ("analyze", "info", "export")})

    # A stack record repeating one frame of 4 KiB names 20,000 times (29 KB): reports and
    # the timeline show it once with a count, not 20,000 times (once 1.5 GB of JSON).
    names = dict(op="o" * 4096, file="/f/" + "a" * 4093, func="g" * 4096)
    c["stack_repeats_one_frame"] = (trace([[R.STACK, 0, [0] * 20000] if r[0] == R.STACK else r
                                           for r in race(**names)]), ok)

    # 512 MiB of zeros after the start of a trace in 16 KB of zstandard: refused once the
    # data decodes to more than 1,000 times what was read (16 GiB of zeros took 63 s).
    import zstandard

    z = zstandard.ZstdCompressor(level=19, write_checksum=True).compressobj()
    bomb = z.compress(trace(race(), end=False)) + b"".join(z.compress(bytes(1 << 24)) for _ in range(32)) + z.flush()
    c["zstd_bomb_of_zeros"] = (bomb, {v: [2, "refused as a decompression bomb"] for v in ("analyze", "info", "export")})

    after_end = {"analyze": [1, "data after its end record"], "info": [0, ""], "export": [0, ""]}
    # A clean trace whose END is followed by 512 MiB of zeros in 16 KB of zstandard, in a frame
    # of their own or in the END's frame: only whether anything follows END is asked (a
    # bounded look, 64 KiB), so the zeros are not decoded (they took 2.5 s, then were
    # refused as a bomb although every record before END was read and verified).
    whole = zstandard.ZstdCompressor(level=19, write_checksum=True)
    z = whole.compressobj()
    zeros = b"".join(z.compress(bytes(1 << 24)) for _ in range(32)) + z.flush()
    c["zstd_zero_bomb_after_end"] = (whole.compress(trace(race())) + zeros, after_end)
    z = whole.compressobj()
    c["zstd_zero_bomb_after_end_same_frame"] = (
        z.compress(trace(race())) + b"".join(z.compress(bytes(1 << 24)) for _ in range(32)) + z.flush(), after_end)

    # Framing.
    c["header_not_a_map"] = (R.MAGIC + pack([1, 0]), {v: [2, "not a map"] for v in ("analyze", "info", "export")})
    c["format_2_0"] = (trace([], {"format": [2, 0]}), {v: [2, "newer"] for v in ("analyze", "info", "export")})
    c["cut_inside_a_record"] = (trace(race(), end=False)[:-3],
                                {"analyze": [0, "without an end record"], "info": [0, ""],
                                 "export": [0, ""]})
    c["data_after_end"] = (trace(race()) + b"\xff\xfe junk", after_end)
    c["unknown_record_type"] = (trace([[200, ESC]] + race()),
                                {"analyze": [1, "unknown type 200"], "info": [0, ""], "export": [0, ""]})
    # 5,000 distinct unknown types, each of which would be warned about once: the first 20
    # are named, the rest counted in one line (100,000 once wrote 10 MB of warnings).
    c["unknown_types_5000"] = (trace([[t] for t in range(1000, 6000)] + race()),
                               {"analyze": [1, "skipped 4,980 records of 4,980 more unknown types"],
                                "info": [0, ""], "export": [0, ""]})
    # A stack of 3,000 distinct frames sharing two names of 4,096 characters (2^18 of them
    # once took 2.2 GB: the fingerprint kept every frame's 8 KiB of names).
    names = [[R.STR, 10, "f" * 4096], [R.STR, 11, "g" * 4096]]
    frames = [[R.FRAME, 10 + i, 10, i + 1, 11] for i in range(3000)]
    c["stack_of_distinct_frames"] = (
        trace(names + frames + [[R.STACK, 1, list(range(10, 10 + 3000))]] + race(stack=1)), ok)
    return c


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.npusan"):
        old.unlink()
    expected = {}
    for name, (data, verbs) in cases().items():
        (OUT / f"{name}.npusan").write_bytes(data)
        expected[name] = verbs
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(expected)} traces to {OUT}")


if __name__ == "__main__":
    main()
