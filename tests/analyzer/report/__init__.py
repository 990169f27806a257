"""Tests (a package so that test helper modules import without name clashes)."""
