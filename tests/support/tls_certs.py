"""Certificates made at test time with the openssl command: a CA, a server certificate for
127.0.0.1 and client certificates it signs (subject CN as asked), and a second CA nobody
trusts, with a client certificate of its own. EC P-256 keys, valid for two days."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str | Path) -> None:
    binary = shutil.which("openssl")
    # A named system package (make system, .ci/run): missing is a failure, not a skip.
    assert binary is not None, "the openssl command is needed: apt-get install openssl"
    result = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"openssl {' '.join(map(str, args))}: {result.stderr}"


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Ca:
    directory: Path
    name: str
    pair: Pair

    @property
    def cert(self) -> Path:
        return self.pair.cert

    def issue(self, cn: str, *, server: bool = False) -> Pair:
        """A certificate of subject CN ``cn`` signed by this CA: for a server (127.0.0.1 as
        its address) or a client."""
        stem = self.directory / f"{self.name}-{cn}"
        key, csr, cert, ext = (stem.with_suffix(s) for s in (".key", ".csr", ".pem", ".ext"))
        _key(key)
        _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={cn}")
        usage = "serverAuth" if server else "clientAuth"
        extensions = [f"extendedKeyUsage={usage}", "basicConstraints=CA:FALSE"]
        if server:
            extensions.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        ext.write_text("\n".join(extensions) + "\n")
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.pair.key,
                 "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)  # fmt: skip
        return Pair(cert, key)


def new_ca(directory: Path, name: str) -> Ca:
    directory.mkdir(parents=True, exist_ok=True)
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _key(key)
    _openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    return Ca(directory, name, Pair(cert, key))


def client_context(ca: Ca, client: Pair | None) -> ssl.SSLContext:
    """A client's TLS: trusts ``ca`` for the server, presents ``client`` if given."""
    context = ssl.create_default_context(cafile=str(ca.cert))
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    return context
