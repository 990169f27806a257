"""Replaying a trace: the ordering rules applied record by record.

``engine`` is the executable specification in plain Python; ``native`` binds the compiled
core (``_core``) behind the same interface; ``strided`` and ``overlap`` hold the rules for
strided views; ``traces`` replays trace files with whichever engine is available.
"""
