"""Runs: one analysis from inputs to a report (``pipeline``), many traces at once
(``batch``), and the nightly history of runs (``history``)."""
