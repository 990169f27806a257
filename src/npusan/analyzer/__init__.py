"""The analyzer: from trace records to the report a person reads.

Its stages, one subpackage each, data flowing one way:

- :mod:`.replay` — the engines that replay a trace through the ordering rules (the Python
  specification and its compiled twin) and yield findings;
- :mod:`.findings` — the findings model and what is done to findings before they are shown:
  fingerprints, grouping, root causes, suppressions, baselines;
- :mod:`.report` — the renderers (text, JSON, SARIF, JUnit, HTML) and what they share: the
  words, the suggested fixes, the quoted source lines;
- :mod:`.runs` — one analysis end to end, many traces at once, and the nightly history;
- :mod:`.export` — the trace as a timeline for a trace viewer.
"""
