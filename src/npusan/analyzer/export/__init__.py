"""Exports of a trace for other tools: the timeline for Perfetto and chrome://tracing."""
