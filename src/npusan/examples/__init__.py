"""Small example programs (run with ``python -m npusan.examples.<name>``)."""
