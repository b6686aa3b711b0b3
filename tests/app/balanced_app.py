"""The worker app (`app.main`) standing for `COORDINATION_TEST_ROLES` roles
(``balanced-00``, ``balanced-01``, ...), for the rebalancing test on the real
broker: ``faust -A tests.app.balanced_app worker``. Each role's function
only waits while the worker leads."""

from __future__ import annotations

import asyncio
import os

from app.main import app, context, installation, settings
from krabka import Leadership

__all__ = ["ROLES", "app", "context", "settings"]

ROLES = [f"balanced-{i:02d}" for i in range(int(os.environ.get("COORDINATION_TEST_ROLES",
                                                               "12")))]


async def hold(leadership: Leadership) -> None:
    # Shielded: cancelling the function must not cancel the tenure's own future.
    await asyncio.shield(leadership.done)


for role in ROLES:
    installation.role(role)(hold)
