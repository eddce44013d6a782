"""What every command group shares: the one settings loader and the progress bar."""

from __future__ import annotations

import sys
from typing import Any, TypeVar

import click

from anchorwatch.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)


def config_file(ctx: click.Context) -> Any:
    """The root group's --config (or ANCHORWATCH_CONFIG); None when a group runs on its own."""
    obj = ctx.find_root().obj
    return obj.get("config") if isinstance(obj, dict) else None


def load_settings(ctx: click.Context, cls: type[S], **sections: dict[str, Any]) -> S:
    """Settings for one command: file/env, overridden by the options given on the line
    (options left out, i.e. None, do not override)."""
    overrides = {k: {f: v for f, v in d.items() if v is not None} for k, d in sections.items()}
    return cls.load(config_file(ctx), **{k: v for k, v in overrides.items() if v})


def progress(label: str, total: int | None = None, unit: str = "rec") -> Any:
    """A tqdm bar on stderr; it turns itself off when stderr is not a terminal, so CI logs
    stay readable."""
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=unit, file=sys.stderr, disable=None)
