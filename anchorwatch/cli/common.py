"""What every command group shares: the one settings loader, option blocks, the output
file-or-stdout, the progress bar."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from anchorwatch.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)
F = TypeVar("F", bound=Callable[..., Any])


def config_file(ctx: click.Context) -> Path | None:
    """The root group's --config (or ANCHORWATCH_CONFIG); None when a group runs on its own
    (the settings then read ANCHORWATCH_CONFIG themselves)."""
    obj = ctx.find_root().obj
    config = obj.get("config") if isinstance(obj, dict) else None
    return Path(config) if config else None


def load_settings(ctx: click.Context, cls: type[S], **sections: dict[str, Any]) -> S:
    """Settings for one command: file/env, overridden per section by the options given on
    the line (an option left out, None, overrides nothing)."""
    overrides = {k: {f: v for f, v in d.items() if v is not None} for k, d in sections.items()}
    return cls.load(config_file(ctx), **{k: v for k, v in overrides.items() if v})


def options(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several click options as one decorator, listed in the order --help shows them."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def out_option(help: str) -> Callable[[F], F]:
    """--out FILE, or - (the default) for stdout; ``open_out`` opens it."""
    return click.option(
        "--out",
        type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
        default=Path("-"),
        show_default=True,
        help=help,
    )


def is_stdout(path: Path) -> bool:
    return str(path) == "-"


@contextmanager
def open_out(path: Path) -> Iterator[IO[bytes]]:
    """The file named by --out, written in binary, or stdout for -: flushed, not closed."""
    if is_stdout(path):
        yield sys.stdout.buffer
        sys.stdout.flush()
        return
    with path.open("wb") as fh:
        yield fh


def progress(
    label: str, total: int | None = None, unit: str = "rec", *, unit_scale: bool = False
) -> Any:
    """A tqdm bar on stderr; it turns itself off when stderr is not a terminal, so CI logs
    stay readable."""
    from tqdm import tqdm

    return tqdm(
        total=total, desc=label, unit=unit, unit_scale=unit_scale, file=sys.stderr, disable=None
    )


def utc_minute(ms: int) -> str:
    """Epoch ms as a UTC time to the minute, as the tables print it: 2025-11-29T08:00Z."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")
