"""Errors raised on unusable trace input; the CLI turns each into one line and exit 2."""


class TraceFormatError(Exception):
    """The input is not a usable trace (bad magic, corrupt record, unsupported version...)."""


class UnsupportedVersionError(TraceFormatError):
    """The trace was written by a newer major version of the format."""
