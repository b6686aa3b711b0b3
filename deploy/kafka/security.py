"""A secured cluster (`up --secure`): TLS from keytool, SCRAM users, the authorizer."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

from deploy.kafka.cluster import Cluster
from deploy.kafka.errors import KafkaScriptError

ADMIN = "admin"
SCRAM = "SCRAM-SHA-512"
CERT_DAYS = 30


def secure_properties(cluster: Cluster) -> dict[str, object]:
    """SASL_SSL for clients and between brokers, SCRAM-SHA-512, the StandardAuthorizer."""
    folder = cluster.secure_dir()
    store_password = read_secret(folder / "store.password")
    admin_password = read_secret(folder / f"{ADMIN}.password")
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{ADMIN}" password="{admin_password}";')
    return {
        "sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        f"listener.name.sasl_ssl.{SCRAM.lower()}.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": folder / "broker.p12",
        "ssl.keystore.password": store_password,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": folder / "truststore.p12",
        "ssl.truststore.password": store_password,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # ANONYMOUS is the principal of the plaintext controller listener only
        # (loopback): the brokers' registrations and heartbeats need it.
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }


def read_secret(path: Path) -> str:
    return path.read_text().strip()


def write_secret(path: Path, value: str) -> None:
    path.write_text(value + "\n")
    path.chmod(0o600)


def keytool(*args: str) -> None:
    home = os.environ.get("JAVA_HOME")
    tool = str(Path(home) / "bin" / "keytool") if home else shutil.which("keytool")
    if not tool:
        raise KafkaScriptError("keytool not found (install a JDK 17+ or set JAVA_HOME)")
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        raise KafkaScriptError(f"keytool {args[0]} failed:\n{done.stdout}{done.stderr}")


def make_secrets(cluster: Cluster) -> None:
    """A CA, the brokers' keystore it signs (SAN: localhost, 127.0.0.1 and --host),
    a truststore, the CA as PEM for clients, and a random password per user."""
    folder = cluster.secure_dir()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    folder.chmod(0o700)
    password = secrets.token_hex(16)
    write_secret(folder / "store.password", password)
    for user in (ADMIN, *cluster.users):
        write_secret(folder / f"{user}.password", secrets.token_hex(16))
    store = ("-storetype", "PKCS12", "-storepass", password)
    ca, broker = str(folder / "ca.p12"), str(folder / "broker.p12")
    sans = {"dns:localhost", "ip:127.0.0.1"}
    sans.add(f"ip:{cluster.host}" if re.fullmatch(r"[0-9.]+", cluster.host)
             else f"dns:{cluster.host}")
    san = "SAN=" + ",".join(sorted(sans))
    days = ("-validity", str(CERT_DAYS))
    keytool("-genkeypair", "-alias", "ca", "-keyalg", "EC", "-dname", "CN=kafka.py local CA",
            "-ext", "bc:c", *days, "-keystore", ca, *store)
    keytool("-exportcert", "-rfc", "-alias", "ca", "-file", str(folder / "ca.pem"),
            "-keystore", ca, *store)
    keytool("-genkeypair", "-alias", "broker", "-keyalg", "EC", "-dname", "CN=localhost",
            "-ext", san, *days, "-keystore", broker, *store)
    keytool("-certreq", "-alias", "broker", "-file", str(folder / "broker.csr"),
            "-keystore", broker, *store)
    keytool("-gencert", "-alias", "ca", "-infile", str(folder / "broker.csr"), "-rfc",
            "-outfile", str(folder / "broker.pem"), "-ext", san, *days, "-keystore", ca, *store)
    for keystore in (broker, str(folder / "truststore.p12")):
        keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(folder / "ca.pem"),
                "-keystore", keystore, *store)
    keytool("-importcert", "-alias", "broker", "-file", str(folder / "broker.pem"),
            "-keystore", broker, *store)
    (folder / "client.env").write_text("".join(f"{k}={v}\n" for k, v in
                                               client_settings(cluster, ADMIN).items()))


def client_settings(cluster: Cluster, user: str) -> dict[str, str]:
    """The KAFKA_* variables a client of the secured cluster sets, as `user`."""
    folder = cluster.secure_dir()
    return {
        "KAFKA_BOOTSTRAP_SERVERS": cluster.bootstrap(),
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": SCRAM,
        "KAFKA_SASL_USERNAME": user,
        "KAFKA_SASL_PASSWORD_FILE": str(folder / f"{user}.password"),
        "KAFKA_SSL_CAFILE": str(folder / "ca.pem"),
    }


def scram_arguments(cluster: Cluster) -> list[str]:
    """StorageTool's --add-scram for every user (SCRAM credentials live in the metadata log)."""
    args = []
    for user in (ADMIN, *cluster.users):
        password = read_secret(cluster.secure_dir() / f"{user}.password")
        args += ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
    return args
