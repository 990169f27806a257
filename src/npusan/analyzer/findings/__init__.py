"""Findings: the data model every stage after replay shares, and what is done to findings
before they are shown (fingerprints, grouping, root causes, suppressions, baselines)."""
