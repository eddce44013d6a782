"""Gateway credentials: who may write, which doc types, how fast (``ingest.credentials_file``).

The file is JSON, written by ``anchorwatch ingest credentials`` (atomically, mode 0600)::

    {"version": 1, "gateways": {"kong-eu": {
        "doc_types": ["invoice", "medical_*"],
        "rate": {"per_s": 50, "burst": 100, "unit": "requests"},
        "expires": "2027-01-01T00:00:00Z",
        "secrets": [{"id": "3f9a0c1d", "sha256": "<64 hex>", "created": "...",
                     "expires": null}],
        "client_cert_cn": "kong-eu.gateways.example.com"}}}

``client_cert_cn`` (optional, set by editing the file): with mutual TLS
(``ingest.tls_client_ca_file``) a connection whose verified client certificate has that
subject CN writes as the gateway without a bearer token, scoped and limited the same way.

Secrets are kept as SHA-256 digests only. The tool makes each token from 32 random bytes,
so a plain digest is enough: nobody can guess such a token, hashed slowly or not (a slow
password hash buys nothing against 256 bits and would cost every request). A token is
found by its digest in a dict: that lookup is not constant time, but what its timing could
reveal is the digest, and a digest does not give the token back.

``Credentials`` is the file as the service uses it (digest -> gateway); ``Watcher`` rereads
the file when its mtime, size or inode change and keeps the last good one when a new one
does not load.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from anchorwatch.errors import AnchorwatchError

log = logging.getLogger("anchorwatch.connectors.server")

#: The gateway name the legacy single token (ingest.auth_token) writes as.
LEGACY_GATEWAY: Final = "default"
_SETTING: Final = "ingest.credentials_file"
_TOKEN_PREFIX: Final = "awg_"  # noqa: S105 (a prefix, not a secret)
# Doc types a gateway's scope remembers the answer for (they are the client's text: bounded).
_SCOPE_CACHE_MAX: Final = 4096
_PATTERN_CHARS: Final = re.compile(r"[*?\[]")

GatewayName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$", strict=True)]
SecretId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{4,32}$", strict=True)]
ClientCertCn = Annotated[str, StringConstraints(min_length=1, max_length=64, strict=True)]
DocTypePattern = Annotated[str, StringConstraints(min_length=1, max_length=200, strict=True)]


class CredentialsError(AnchorwatchError):
    """The credentials file cannot be used: names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretEntry(_Strict):
    id: SecretId = Field(description="Names the secret in `credentials list` and `revoke`.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="Hex SHA-256 of the token.")
    created: datetime = Field(description="When `credentials add` made it (UTC).")
    expires: datetime | None = Field(None, description="Refused from then on; None: never.")


class RateLimit(_Strict):
    per_s: float = Field(gt=0, le=1_000_000, description="Sustained rate.")
    burst: int = Field(ge=1, le=10_000_000, description="What may come at once.")
    unit: Literal["requests", "events"] = Field(
        "requests", description="What is counted: requests, or events (Kong entries, lines)."
    )


class GatewayEntry(_Strict):
    doc_types: list[DocTypePattern] = Field(
        min_length=1, description="Doc types it may write: exact names or fnmatch patterns."
    )
    rate: RateLimit | None = Field(None, description="None: no limit of its own.")
    expires: datetime | None = Field(None, description="All its secrets refused from then on.")
    secrets: list[SecretEntry] = Field(default_factory=list)
    client_cert_cn: ClientCertCn | None = Field(
        None,
        description="The subject CN of the gateway's client certificate: with mutual TLS "
        "(ingest.tls_client_ca_file) a request on a connection with that certificate and "
        "no bearer token writes as this gateway. None: by its secrets only.",
    )


class CredentialsFile(_Strict):
    version: Literal[1] = 1
    gateways: dict[GatewayName, GatewayEntry] = Field(default_factory=dict)


class Scope:
    """The doc types one gateway may write: a set lookup for exact names; patterns are
    matched once per doc type and the answer remembered (bounded: doc types are the
    client's text)."""

    def __init__(self, patterns: list[str] | None) -> None:
        self.everything = patterns is None
        given = patterns or []
        self._exact = frozenset(p for p in given if not _PATTERN_CHARS.search(p))
        self._patterns = tuple(p for p in given if _PATTERN_CHARS.search(p))
        self._cache: dict[str, bool] = {}

    def allows(self, doc_type: str) -> bool:
        if self.everything or doc_type in self._exact:
            return True
        if not self._patterns:
            return False
        known = self._cache.get(doc_type)
        if known is not None:
            return known
        # fnmatchcase: the same answer on every platform (doc types are case-sensitive).
        answer = any(fnmatch.fnmatchcase(doc_type, p) for p in self._patterns)
        if len(self._cache) >= _SCOPE_CACHE_MAX:
            self._cache.clear()
        self._cache[doc_type] = answer
        return answer


@dataclass(frozen=True, eq=False)
class Gateway:
    """One writer as the service knows it: its name (the events' source and the metrics'
    label), its scope and its rate limit."""

    name: str
    source: str
    scope: Scope
    rate: RateLimit | None = None
    expires_s: float | None = None


@dataclass(frozen=True)
class Credentials:
    """Token digest -> (gateway, the secret's own expiry, epoch s); client certificate
    subject CN -> gateway."""

    by_digest: dict[bytes, tuple[Gateway, float | None]] = field(default_factory=dict)
    gateways: dict[str, Gateway] = field(default_factory=dict)
    by_cn: dict[str, Gateway] = field(default_factory=dict)

    def identify_cn(self, cn: str, now_s: float) -> Gateway | Literal["unknown", "expired"]:
        """The gateway whose ``client_cert_cn`` is ``cn`` (a certificate the TLS layer has
        already verified against ingest.tls_client_ca_file)."""
        gateway = self.by_cn.get(cn)
        if gateway is None:
            return "unknown"
        return "expired" if _past(gateway.expires_s, now_s) else gateway

    def identify(self, token: bytes, now_s: float) -> Gateway | Literal["unknown", "expired"]:
        found = self.by_digest.get(hashlib.sha256(token).digest())
        if found is None:
            return "unknown"
        gateway, secret_expires = found
        if _past(secret_expires, now_s) or _past(gateway.expires_s, now_s):
            return "expired"
        return gateway


def _past(expires_s: float | None, now_s: float) -> bool:
    return expires_s is not None and now_s >= expires_s


def _epoch(value: datetime | None) -> float | None:
    if value is None:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def parse(data: bytes, path: Path) -> CredentialsFile:
    """The file's content, checked; CredentialsError names the file and the field."""
    try:
        return CredentialsFile.model_validate_json(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "(the file)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise CredentialsError(f"{_SETTING}: {path}: {where}: {problem['msg']}{more}") from None


def read(path: Path) -> CredentialsFile:
    """Read and check ``path``; a missing file reads as no gateways (for the CLI's add)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CredentialsFile()
    except OSError as exc:
        raise CredentialsError(f"{_SETTING}: cannot read {path}: {exc}") from None
    return parse(data, path)


def build(file: CredentialsFile, path: Path) -> Credentials:
    """The service's view of ``file``: every secret's digest to its gateway."""
    by_digest: dict[bytes, tuple[Gateway, float | None]] = {}
    gateways: dict[str, Gateway] = {}
    by_cn: dict[str, Gateway] = {}
    for name, entry in file.gateways.items():
        if name == LEGACY_GATEWAY:
            raise CredentialsError(
                f"{_SETTING}: {path}: gateways.{name}: the name is kept for the legacy token "
                "(ingest.auth_token); choose another"
            )
        gateway = Gateway(name, name, Scope(entry.doc_types), entry.rate, _epoch(entry.expires))
        gateways[name] = gateway
        if entry.client_cert_cn is not None:
            if entry.client_cert_cn in by_cn:
                raise CredentialsError(
                    f"{_SETTING}: {path}: gateways.{name}.client_cert_cn: the same as gateway "
                    f"{by_cn[entry.client_cert_cn].name}'s"
                )
            by_cn[entry.client_cert_cn] = gateway
        for secret in entry.secrets:
            digest = bytes.fromhex(secret.sha256)
            if digest in by_digest:
                raise CredentialsError(
                    f"{_SETTING}: {path}: gateways.{name}.secrets.{secret.id}: the same "
                    f"secret as gateway {by_digest[digest][0].name}'s"
                )
            by_digest[digest] = (gateway, _epoch(secret.expires))
    return Credentials(by_digest, gateways, by_cn)


def load(path: Path) -> Credentials:
    """The credentials the service starts with: a file that is missing or does not parse
    is an error naming it (the service refuses to start)."""
    if not path.exists():
        raise CredentialsError(
            f"{_SETTING}: {path} does not exist (create it with `anchorwatch ingest "
            "credentials add`)"
        )
    return build(read(path), path)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class Watcher:
    """The credentials of ``path``, reread when its mtime, size or inode change (a stat per
    check: cheap enough every 0.25 s). A change that does not load keeps the last good
    credentials; ``on_reload(ok)`` is told of every attempt."""

    def __init__(self, path: Path, on_reload: Callable[[bool], None] | None = None) -> None:
        self.path = path
        self._on_reload = on_reload
        self._stamp = _stamp(path)
        self.current = load(path)
        # The stamp of the last change that did not load ("never": none yet).
        self._failed_stamp: tuple[int, int, int] | str | None = "never"

    def check(self) -> bool:
        """Reread the file if it changed; True when new credentials were taken."""
        stamp = _stamp(self.path)
        if stamp == self._stamp or stamp == self._failed_stamp:
            return False  # unchanged, or the same broken file: reported once
        try:
            if stamp is None:
                raise CredentialsError(f"{_SETTING}: {self.path} is gone")
            fresh = build(read(self.path), self.path)
        except CredentialsError as exc:
            self._failed_stamp = stamp
            log.error(
                "credentials file not reloaded: keeping the last good credentials",
                extra={"path": str(self.path), "error": str(exc)[:500]},
            )
            if self._on_reload is not None:
                self._on_reload(False)
            return False
        self._stamp, self._failed_stamp = stamp, "never"
        self.current = fresh
        log.info(
            "credentials reloaded",
            extra={
                "path": str(self.path),
                "gateways": len(fresh.gateways),
                "secrets": len(fresh.by_digest),
            },
        )
        if self._on_reload is not None:
            self._on_reload(True)
        return True


# ---------------------------------------------------------------------- writing (the CLI)


def new_token() -> str:
    """A fresh gateway token: 32 random bytes, URL-safe, with a recognisable prefix."""
    return _TOKEN_PREFIX + secrets.token_urlsafe(32)


def digest_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write(path: Path, file: CredentialsFile) -> None:
    """Replace ``path`` atomically (a temporary file beside it, fsynced, renamed), mode
    0600: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    data = orjson.dumps(
        file.model_dump(mode="json"), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    )
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
