"""`npusan info` (placeholder until its issue lands)."""

import click


@click.command()
def info() -> None:
    """Not implemented yet."""
    raise click.UsageError("npusan info is not implemented yet")
