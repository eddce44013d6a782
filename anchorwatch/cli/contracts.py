"""`anchorwatch contracts schemas`: the checked-in JSON Schemas of the wire contracts."""

from __future__ import annotations

import click


@click.group()
def contracts() -> None:
    """The versioned wire contracts (JSON Schemas)."""


@contracts.command("schemas")
@click.option("--write", is_flag=True, help="Regenerate the checked-in schema files.")
@click.option("--check", is_flag=True, help="Exit 1 if a checked-in schema is out of date.")
def contracts_schemas(write: bool, check: bool) -> None:
    """List the JSON Schemas; --write regenerates them from the models, --check verifies."""
    from anchorwatch.contracts import schemas

    stale = []
    for name in schemas.CONTRACTS:
        path = schemas.schema_path(name)
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != schemas.render(name):
            stale.append(name)
        click.echo(f"{name:<18} {path}" + ("  (out of date)" if name in stale else ""))
    if write:
        schemas.write_all()
        click.echo("schemas written")
    elif check and stale:
        raise click.ClickException(f"out of date: {', '.join(stale)}; run with --write")
