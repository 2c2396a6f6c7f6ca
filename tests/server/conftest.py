"""Fixtures the server tests share."""

from __future__ import annotations

import pytest
from testkit.services import RedisServer, installed


@pytest.fixture(scope="module")
def redis_server():
    """A real redis-server on loopback, for the module (installed if missing)."""
    installed("redis-server")
    with RedisServer() as server:
        yield server
