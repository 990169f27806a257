"""`npusan export` (placeholder until its issue lands)."""

import click


@click.command()
def export() -> None:
    """Not implemented yet."""
    raise click.UsageError("npusan export is not implemented yet")
