"""A local Kafka node that also listens with SASL_SSL (SCRAM-SHA-512), for the tests of the
documented Kafka security settings: certificates made at test time with the JDK's keytool
(a CA, the broker's certificate signed by it for 127.0.0.1 and localhost, and a second CA
nobody signed with), SCRAM users written into the storage when it is formatted, by Kafka's
own StorageTool (`kafka-storage.sh format --add-scram`)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from anchorwatch.stack.jvm import JvmArtifacts
from anchorwatch.stack.kafka import KafkaBroker
from anchorwatch.stack.processes import StackError

#: The SCRAM user the clients log in as.
USER = "anchorwatch"
#: Only this test's broker and keystores use it; it never leaves the test's directory.
_STORE_PASSWORD = "changeit-" + secrets.token_hex(8)


def _keytool(*args: str) -> None:
    keytool = shutil.which("keytool")
    if keytool is None:
        raise StackError("`keytool` (from the JDK, 17 or newer) is not on PATH")
    result = subprocess.run([keytool, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"keytool {args[0]} failed:\n{result.stdout}{result.stderr}")


def _new_ca(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA: (its PKCS12 keystore, its certificate as PEM)."""
    store, pem = directory / f"{name}.p12", directory / f"{name}.pem"
    _keytool("-genkeypair", "-alias", name, "-keyalg", "EC", "-groupname", "secp256r1",
             "-dname", f"CN=anchorwatch test {name}", "-ext", "bc:c", "-validity", "2",
             "-keystore", str(store), "-storetype", "PKCS12",
             "-storepass", _STORE_PASSWORD)  # fmt: skip
    _keytool("-exportcert", "-rfc", "-alias", name, "-keystore", str(store),
             "-storepass", _STORE_PASSWORD, "-file", str(pem))  # fmt: skip
    return store, pem


@dataclass(frozen=True)
class Certificates:
    ca_pem: Path  # signed the broker's certificate
    other_ca_pem: Path  # a CA that signed nothing of this broker's
    broker_keystore: Path  # PKCS12: the broker's key, its certificate and the CA's
    password: str


def make_certificates(directory: Path) -> Certificates:
    """A CA, the broker's key and certificate (SAN 127.0.0.1 and localhost) signed by it, and
    a second, unrelated CA. keytool only: a JDK is what Kafka needs anyway."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_store, ca_pem = _new_ca(directory, "ca")
    _, other_pem = _new_ca(directory, "other-ca")
    broker = directory / "broker.p12"
    san = "SAN=ip:127.0.0.1,dns:localhost"
    common = ["-storepass", _STORE_PASSWORD]
    _keytool("-genkeypair", "-alias", "broker", "-keyalg", "EC", "-groupname", "secp256r1",
             "-dname", "CN=localhost", "-ext", san, "-validity", "2", "-keystore", str(broker),
             "-storetype", "PKCS12", *common)  # fmt: skip
    csr, signed = directory / "broker.csr", directory / "broker.pem"
    _keytool("-certreq", "-alias", "broker", "-keystore", str(broker), "-file", str(csr), *common)
    _keytool("-gencert", "-alias", "ca", "-keystore", str(ca_store), "-infile", str(csr),
             "-outfile", str(signed), "-rfc", "-ext", san, "-ext", "eku=serverAuth",
             "-validity", "2", *common)  # fmt: skip
    # The chain goes in under the broker's alias once the CA it ends in is known.
    _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
             "-keystore", str(broker), *common)  # fmt: skip
    _keytool("-importcert", "-alias", "broker", "-file", str(signed), "-keystore", str(broker),
             *common)  # fmt: skip
    return Certificates(ca_pem, other_pem, broker, _STORE_PASSWORD)


@dataclass(frozen=True)
class SaslBroker(KafkaBroker):
    """A single KRaft node (see KafkaBroker) with one more listener, SASL_SSL on
    ``sasl_port`` with SCRAM-SHA-512 over TLS; the plaintext one stays for the stack's own
    readiness check."""

    sasl_port: int = 0
    certificates: Certificates | None = None
    scram_password: str = field(default="", repr=False)

    @property
    def sasl_bootstrap(self) -> str:
        return f"{self.host}:{self.sasl_port}"

    def server_properties(self) -> str:
        c = self.certificates
        assert c is not None
        h = self.host
        extra = {
            "listeners": f"PLAINTEXT://{h}:{self.port},CONTROLLER://{h}:{self.controller_port},"
            f"SASL_SSL://{h}:{self.sasl_port}",
            "advertised.listeners": f"PLAINTEXT://{h}:{self.port},SASL_SSL://{h}:{self.sasl_port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(c.broker_keystore),
            "ssl.keystore.password": c.password,
            "ssl.key.password": c.password,
        }
        # Later lines win in a properties file: the listeners above replace the base ones.
        return super().server_properties() + "".join(f"{k}={v}\n" for k, v in extra.items())

    def _format(self, artifacts: JvmArtifacts, config: Path, cluster_id: str) -> None:
        # The SCRAM credentials are metadata records: written with the storage, before the
        # first start, the way `kafka-storage.sh format --add-scram` does.
        cmd = [
            *self._jvm_args(artifacts, "256m"),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",
            "-c",
            str(config),
            "--standalone",
            "--add-scram",
            f"SCRAM-SHA-512=[name={USER},password={self.scram_password}]",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")
