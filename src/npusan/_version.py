"""The package version, in a module of its own so that any layer can name it without
importing the top package (whose ``__init__`` imports the recorder's public names)."""

__version__ = "0.1.0"
