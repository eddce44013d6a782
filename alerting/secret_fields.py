"""Checks shared by the alerting service's settings sections (``settings.py``, and the
paging receivers' in ``integrations/paging_settings.py``): a secret given as a value or as
a file (read at load, so a bad file fails at start), and an http(s) URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr


def one_secret(value: SecretStr | None, path: Path | None, name: str, env: str) -> SecretStr | None:
    """The secret from the value or the file; ValueError naming the field otherwise."""
    if value is not None and path is not None:
        raise ValueError(f"{name}_file: set {name} or {name}_file, not both")
    if value is not None and not value.get_secret_value().strip():
        raise ValueError(f"{name}: must not be empty (set {env})")
    if path is None:
        return value
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{name}_file: cannot read {path}: {exc.strerror or exc}") from None
    if not text:
        raise ValueError(f"{name}_file: {path} is empty")
    return SecretStr(text)


def http_url(value: str, name: str, *, secret: bool = False) -> str:
    """``value`` if it is an http(s) URL; the error shows it unless it is a secret."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        shown = "" if secret else f", got {value!r}"
        raise ValueError(f"{name}: must be an http(s) URL{shown}")
    return value
