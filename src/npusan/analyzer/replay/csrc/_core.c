/* The compiled replay core: npusan's rules (src/npusan/analyzer/replay/engine.py) over msgpack records.
 *
 * engine.py is the specification, and tests/analyzer/replay/differential.py holds the two to
 * the same findings and the same errors on every engine path. 28 functions here carry the
 * name of the engine.py function whose rule they implement: stream,
 * ordered, ordered_everywhere, merge, report, event_id (streams.c); block, new_block,
 * drop_block, check_free, judge_at_end, add_ghost, prune_ghosts, attach_ghosts, check_ghosts,
 * ghost_meets, overlaps (state.c); whole_access, to_segments, split, coalesce, merge_pair,
 * same_state (rules.c); range_access (grid.c); strided_access, demote (strided.c); apply, check_block
 * (records.c). check_earlier (rules.c) is engine.py's check_race; judge_stream and judge_one
 * (state.c) are engine.py's judge. (flush, in
 * queue.c, is not Engine.flush: it makes the queued accesses.) The rest, about 180, are
 * C's own: the msgpack reader, hash maps and dense id arrays where Python uses dicts
 * (insertion order is kept, because the order of findings depends on it), memory pools,
 * and the forms of a block's state that the Python engine does not have (the packed
 * segment states, the segment index, the grid form, the access queue): docs/native.md
 * says which spec function each replaces and why the answer is the same.
 *
 * A unity build: this file includes the units in order, so that the hot helpers, static in
 * their units, still inline across them. Shared declarations are in core.h (and map.h);
 * the tables copied from Python are in _tables.h, which gen_tables.py writes at build time.
 *
 * Core.replay(buffer, pos, end) replays complete records from buffer[pos:end] and returns
 * when it needs the caller:
 *   (0, pos)                   NEED: the record at pos is incomplete (or pos == end);
 *   (1, pos, length)           SLOW: a record the engine does not replay (definitions, notes,
 *                              END, unknown types, anything that is not a well-formed event
 *                              record): the caller decodes and handles it, then resumes;
 *   (2, pos, -1)               BAD: the msgpack at pos is invalid or over a limit: the
 *                              caller lets msgpack itself name the problem;
 *   (3, pos, length, code, field)  ERROR: the engine rejects the record (engine.py's
 *                              messages, built by the caller from code and field).
 * Nothing is allocated in proportion to a length field before the data is there; ids are
 * hashed, never used as array indexes.
 */

#include "core.h"

#include "reader.c"   /* msgpack reading */
#include "streams.c"  /* streams, events, findings */
#include "state.c"    /* segment states (packed forms), blocks, reuse ghosts */
#include "overlap.c"  /* the overlap test of strided views */
#include "rules.c"    /* the data-race rules over whole blocks and byte ranges */
#include "grid.c"     /* the grid form */
#include "queue.c"    /* the access queue */
#include "strided.c"  /* strided accesses, VIEWS records */
#include "records.c"  /* the rules per record type, the record loop */
#include "module.c"   /* the CPython module: the Core type and the exported tables */
