"""Run history for nightly jobs: which findings are new, which persist, which were fixed.

``npusan analyze --history DB`` records every run in an SQLite database (created when
missing): the run's label, the traces (rank, kernels, status), and every finding's
fingerprint, kind, title and occurrences per trace, and the kernel at which each trace first
showed it (table ``first_kernels``). The previous run of the database is
what "new", "persisting" and "fixed" are measured against; ``npusan history DB`` shows
the runs, what each run changed against the run before it (:meth:`History.changes`: the
same comparison ``analyze`` made that night), and, per fingerprint, when it was first and
last seen.

A finding of the previous run that was seen only in traces that cannot show it in this
run is neither seen nor fixed: the report lists it as *unchecked*, and the run records it
(table ``unchecked``, with the traces it was last seen in, and ``first_kernels`` keeps
their kernels) so that the next run compares against it as if it had been seen: it
persists, or is fixed, or stays unchecked, but does not come back as "new" after a night
with a corrupt trace. A trace cannot show a finding when it is unreadable, or when it was
cut (a crashed run) before it got past the kernel where it first showed the finding: a
rank that died at kernel 45,154 says nothing about a race seen at kernel 50,102.

``first_kernels`` came after the other tables: a database written without it (or by an
older npusan, which leaves it empty) still loads, its findings simply have no kernel, and
a cut trace then confirms no fix of them (they stay unchecked until a complete trace
checks them). It is a table of its own, not a column, so that an older npusan can still
record runs in the same database.

The database holds data derived from traces (titles, paths): it is read back only as
values, never as code, and every reporter escapes what it shows.
"""

from __future__ import annotations

import datetime
import os
import re
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Optional

from ..findings.baseline import Baseline, KnownFinding
from ..report.base import trace_rows

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    created REAL NOT NULL,
    traces INTEGER NOT NULL,
    errors INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS findings (
    run INTEGER NOT NULL REFERENCES runs(id),
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (run, fingerprint)
);
CREATE TABLE IF NOT EXISTS trace_findings (
    run INTEGER NOT NULL REFERENCES runs(id),
    trace TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS traces (
    run INTEGER NOT NULL REFERENCES runs(id),
    trace TEXT NOT NULL,
    rank INTEGER,
    kernels INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS unchecked (
    run INTEGER NOT NULL REFERENCES runs(id),
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    trace TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS first_kernels (
    run INTEGER NOT NULL REFERENCES runs(id),
    trace TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kernel INTEGER NOT NULL
);
"""


class HistoryError(ValueError):
    """The history database cannot be used; one sentence for the user."""


@dataclass
class Run:
    id: int
    label: str
    created: Optional[float]  # None: the database holds no time a date can show
    traces: Optional[int]  # None (and errors): the database holds no integer there
    errors: Optional[int]
    by_kind: dict = field(default_factory=dict)  # kind -> number of distinct findings
    unchecked: int = 0  # findings of the run before, not checked (their traces unreadable)


@dataclass
class Changes:
    """What one run changed against the run recorded before it (fingerprints, in the
    order the run recorded them; ``fixed`` in the order the run before recorded them)."""

    new: list = field(default_factory=list)
    persisting: list = field(default_factory=list)
    fixed: list = field(default_factory=list)
    compared: bool = True  # False for the first run: there was nothing before it

    @property
    def regression(self) -> bool:
        """A finding the run before did not have (the first run regresses from nothing)."""
        return self.compared and bool(self.new)


@dataclass
class Track:
    """One fingerprint across the runs of a history."""

    fingerprint: str
    kind: str
    title: str
    counts: dict = field(default_factory=dict)  # run id -> occurrences in that run


class History:
    """An open history database (see the module docstring)."""

    def __init__(self, path: str, db: sqlite3.Connection) -> None:
        self.path = path
        self.db = db

    @classmethod
    def open(cls, path: str, create: bool = True, read_only: bool = False) -> "History":
        """The history at ``path``; ``read_only`` (for showing it) opens an existing file
        without writing a byte to it: a file that is not a history is refused, not made one."""
        if os.path.isdir(path):
            raise HistoryError(f"history {path}: is a directory")
        exists = os.path.exists(path)
        if not exists and not create:
            raise HistoryError(f"history {path}: no such file")
        if not exists:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                raise HistoryError(f"history {path}: directory {parent} does not exist")
        elif not os.path.isfile(path):
            raise HistoryError(f"history {path}: not a regular file")
        try:
            if read_only:
                if not exists:
                    raise HistoryError(f"history {path}: no such file")
                uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
                db = sqlite3.connect(uri, uri=True, timeout=30)
            else:
                db = sqlite3.connect(path, timeout=30)
                db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None and read_only:
                raise HistoryError(f"history {path}: not an npusan history database (no schema version)")
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                db.commit()
            elif row[0] != str(SCHEMA_VERSION):
                raise HistoryError(
                    f"history {path}: database schema {row[0]}, this npusan reads schema {SCHEMA_VERSION}"
                )
        except sqlite3.DatabaseError as e:
            raise HistoryError(f"history {path}: not an npusan history database ({e})") from None
        except (sqlite3.Error, OSError) as e:  # cannot be opened at all (permissions, a full disk)
            raise HistoryError(f"history {path}: {e}") from None
        return cls(path, db)

    def close(self) -> None:
        self.db.close()

    # -- what analyze compares against -------------------------------------------------

    def last_run(self) -> Optional[Run]:
        runs = self.runs()
        return runs[-1] if runs else None

    def previous(self) -> Baseline:
        """The last recorded run's findings as a baseline (empty for an empty history)."""
        try:
            return self._previous()
        except sqlite3.Error as e:
            raise HistoryError(f"history {self.path}: cannot be read ({e})") from None

    def _previous(self) -> Baseline:
        last = self.last_run()
        if last is None:
            return Baseline(f"{self.path} (no earlier run)")
        out = Baseline(f"{self.path} (run {last.label})")
        for fp, kind, title in self.db.execute(
            "SELECT fingerprint, kind, title FROM findings WHERE run = ? ORDER BY rowid", (last.id,)
        ):
            out.known[fp] = KnownFinding(fp, kind, title)
        for fp, trace in self.db.execute(
            "SELECT fingerprint, trace FROM trace_findings WHERE run = ? ORDER BY rowid", (last.id,)
        ):
            out.traces.setdefault(fp, []).append(trace)
        # Carried over: what the last run could not check still counts as last seen.
        for fp, kind, title, trace in self.db.execute(
            "SELECT fingerprint, kind, title, trace FROM unchecked WHERE run = ? ORDER BY rowid", (last.id,)
        ):
            out.known.setdefault(fp, KnownFinding(fp, kind, title))
            out.traces.setdefault(fp, []).append(trace)
        # Where each trace first showed each finding, so that a cut trace can tell whether
        # it got that far (runs recorded without it: none known).
        out.first_kernel = {
            (fp, trace): kernel for trace, fp, kernel in self.db.execute(
                "SELECT trace, fingerprint, kernel FROM first_kernels WHERE run = ?", (last.id,))
        }
        # Each trace's rank as last recorded (a trace carried as unchecked may be missing from
        # the last run's traces, when its rank wrote none that night).
        out.ranks = {trace: rank for trace, rank in self.db.execute(
            "SELECT trace, rank FROM traces WHERE rank IS NOT NULL ORDER BY run")}
        return out

    def has_label(self, label: str) -> bool:
        """Whether a run of this history is already called ``label``."""
        return self.db.execute("SELECT 1 FROM runs WHERE label = ? LIMIT 1", (label,)).fetchone() is not None

    def record(self, report, label: Optional[str] = None) -> Run:
        """Record one analyzed run (a :class:`~npusan.analyzer.report.base.Report`).

        Labels name runs in ``npusan history``: a ``label`` already used is refused
        (:class:`HistoryError`); the default label (the date and time) gets ``#2``, ``#3``
        appended when two runs start within one second.
        """

        created = time.time()
        if label and self.has_label(label):
            raise HistoryError(f"history {self.path}: a run labelled '{label}' is already recorded")
        if not label:
            base = label = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            n = 1
            while self.has_label(label):
                n += 1
                label = f"{base} #{n}"
        try:
            return self._record(report, label, created)
        except sqlite3.Error as e:  # a full disk, a database locked past the timeout...
            raise HistoryError(f"history {self.path}: the run was not recorded ({e})") from None

    def _record(self, report, label: str, created: float) -> Run:
        from ..report import describe as D

        groups = list(report.groups) + list(report.known) + list(report.below_min_count)
        errors = len(report.errors)
        with self.db:
            cur = self.db.execute(
                "INSERT INTO runs (label, created, traces, errors) VALUES (?, ?, ?, ?)",
                (label, created, len(report.traces), errors),
            )
            run = cur.lastrowid
            totals: dict = {}
            per_trace: dict = {}
            first: dict = {}  # (trace, fingerprint) -> the first kernel it was seen at there
            for g in groups:
                f = g.finding
                entry = totals.setdefault(g.fingerprint, [f.kind.value, D.title(f, report.header(f.trace)), 0])
                entry[2] += g.count
                for x in g.findings:
                    key = (storable(report.trace_path(x.trace)), g.fingerprint)
                    per_trace[key] = per_trace.get(key, 0) + max(1, x.count)
                    seq = x.first_seq or x.access.seq
                    first[key] = min(first.get(key, seq), seq)
            # Unchecked findings keep the kernels they were last seen at, for the next run.
            carried = getattr(report.compared_with, "first_kernel", {})
            for k in getattr(report, "unchecked", ()):
                for tr in report.unchecked_traces.get(k.fingerprint, ()):
                    if (k.fingerprint, tr) in carried:
                        first[(tr, k.fingerprint)] = carried[(k.fingerprint, tr)]
            self.db.executemany(
                "INSERT INTO findings VALUES (?, ?, ?, ?, ?)",
                [(run, fp, k, t, c) for fp, (k, t, c) in totals.items()],
            )
            self.db.executemany(
                "INSERT INTO trace_findings VALUES (?, ?, ?, ?)",
                [(run, tr, fp, c) for (tr, fp), c in per_trace.items()],
            )
            self.db.executemany(
                "INSERT INTO unchecked VALUES (?, ?, ?, ?, ?)",
                [(run, k.fingerprint, k.kind, k.title, storable(tr))
                 for k in getattr(report, "unchecked", ()) for tr in report.unchecked_traces.get(k.fingerprint, ())],
            )
            self.db.executemany(
                "INSERT INTO first_kernels VALUES (?, ?, ?, ?)",
                [(run, tr, fp, kernel) for (tr, fp), kernel in first.items()],
            )
            self.db.executemany(
                "INSERT INTO traces VALUES (?, ?, ?, ?, ?)",
                [(run, storable(row["trace"]), row["rank"], row["kernels"], row["status"])
                 for row in trace_rows(report)],
            )
        return Run(run, label, created, len(report.traces), errors)

    # -- what `npusan history` shows ---------------------------------------------------

    def runs(self) -> list[Run]:
        """The recorded runs, each value of the type its column declares: SQLite keeps any
        value in any column, and a database handed over with a bug report may hold text in
        a count, a blob as a label or a time of 1e300 (see :func:`_as_int`...)."""
        out = []
        for rid, label, created, traces, errors in self.db.execute(
            "SELECT id, label, created, traces, errors FROM runs ORDER BY id"
        ):
            r = Run(rid, _as_text(label), _as_time(created), _as_int(traces), _as_int(errors))
            for kind, n in self.db.execute(
                "SELECT kind, COUNT(*) FROM findings WHERE run = ? GROUP BY kind", (rid,)
            ):
                r.by_kind[_as_text(kind)] = n
            r.unchecked = self.db.execute(
                "SELECT COUNT(DISTINCT fingerprint) FROM unchecked WHERE run = ?", (rid,)
            ).fetchone()[0]
            out.append(r)
        return out

    def changes(self) -> dict:
        """Run id -> :class:`Changes`, for every run in id order.

        A run is compared with the run before it as ``analyze`` compared it when it was
        recorded: what the run before saw or carried as unchecked is known; a known finding
        the run shows persists, one it shows not and did not list as unchecked is fixed,
        and one the run before did not know is new (every finding of the first run is).
        Counting distinct findings per run hides a night that fixed four and brought one:
        these do not.
        """
        seen: dict = {}  # run id -> fingerprints it recorded, in order
        unchecked: dict = {}  # run id -> fingerprints it carried unchecked
        for run, fp in self.db.execute("SELECT run, fingerprint FROM findings ORDER BY run, rowid"):
            seen.setdefault(run, {})[_as_text(fp)] = None
        for run, fp in self.db.execute("SELECT run, fingerprint FROM unchecked ORDER BY run, rowid"):
            unchecked.setdefault(run, {})[_as_text(fp)] = None
        out: dict = {}
        known: dict = {}
        for (rid,) in self.db.execute("SELECT id FROM runs ORDER BY id"):
            now = seen.get(rid, {})
            later = unchecked.get(rid, {})
            out[rid] = Changes(
                new=[fp for fp in now if fp not in known],
                persisting=[fp for fp in now if fp in known],
                fixed=[fp for fp in known if fp not in now and fp not in later],
                compared=bool(out),
            )
            known = {**now, **later}
        return out

    def tracks(self) -> list[Track]:
        """Every fingerprint ever recorded, in order of first appearance."""
        out: dict = {}
        for run, fp, kind, title, count in self.db.execute(
            "SELECT run, fingerprint, kind, title, count FROM findings ORDER BY run, rowid"
        ):
            if not isinstance(run, int):
                continue  # (a row of no run: the run column is an INTEGER reference)
            fp, kind, title, count = _as_text(fp), _as_text(kind), _as_text(title), _as_int(count)
            t = out.get(fp)
            if t is None:
                t = out[fp] = Track(fp, kind, title)
            t.title = title  # the latest title
            t.counts[run] = count
        return list(out.values())


# -- values as read back ----------------------------------------------------------------

#: Times shown: from the epoch to the year 9999 (datetime's range).
_LATEST = 253402300799.0


def _as_text(value) -> str:
    """A TEXT column's value as text: a blob is decoded (bad bytes replaced), a number written out."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _as_int(value) -> Optional[int]:
    """An INTEGER column's value, or None for a value of another type."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_time(value) -> Optional[float]:
    """A ``created`` time in seconds since the epoch, or None when it is not one a date can show."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= _LATEST:
        return float(value)
    return None


def storable(text: str) -> str:
    """``text`` (a trace path) as SQLite can store it: a file name that is not UTF-8 reaches
    Python with its bad bytes as lone surrogates, which cannot be encoded; they become U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")
