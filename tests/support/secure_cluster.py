"""The secured local broker of the integration tests: its users' settings and their ACLs.

`deploy/kafka/kafka.py up --secure` starts it (the `secure_kafka` fixture of
tests/conftest.py); this module reads what it wrote (the CA, each user's
password file) and grants or revokes ACLs as its super user ``admin``, with
Kafka's CreateAcls and DeleteAcls requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest

from krabka.kafka.access import Acl
from krabka.kafka.connection import Connection

ADMIN = "admin"
ANY_HOST = "*"
ALLOW = 3


@dataclass(frozen=True)
class SecureCluster:
    """A SASL_SSL (SCRAM-SHA-512) broker with the StandardAuthorizer."""

    folder: Path
    bootstrap: str

    def env(self, user: str) -> dict[str, str]:
        """The KAFKA_* variables a client connecting as `user` sets."""
        secure = self.folder / "secure"
        return {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": user,
            "KAFKA_SASL_PASSWORD_FILE": str(secure / f"{user}.password"),
            "KAFKA_SSL_CAFILE": str(secure / "ca.pem"),
        }

    def connection(self, user: str) -> Connection:
        return Connection.from_env(self.env(user))

    def grant(self, user: str, acls: Iterable[Acl]) -> None:
        asyncio.run(self._change(user, acls, CreateAclsRequest, "creation_responses"))

    def revoke(self, user: str, acls: Iterable[Acl]) -> None:
        asyncio.run(self._change(user, acls, DeleteAclsRequest, "filter_responses"))

    async def _change(self, user: str, acls: Iterable[Acl], request: type,
                      results: str) -> None:
        admin = self.connection(ADMIN)
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap, **admin.client_options())
        await client.bootstrap()
        try:
            for acl in acls:
                resource_type, name, pattern, operation = acl.codes()
                response = await client.send(client.get_random_node(), request(
                    resource_type, name, pattern, f"User:{user}", ANY_HOST, operation, ALLOW))
                errors = [r for r in response.to_object()[results] if r["error_code"]]
                assert not errors, f"{request.__name__} {acl} for {user}: {errors}"
        finally:
            await client.close()
