"""`npusan record` (placeholder until its issue lands)."""

import click


@click.command()
def record() -> None:
    """Not implemented yet."""
    raise click.UsageError("npusan record is not implemented yet")
