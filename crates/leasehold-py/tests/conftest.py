"""Fixtures: real servers started on free ports (never 6379), clients of
them, a fresh lock name per test, and the workspace's `leasehold` binary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import leasehold
import leasehold.asyncio

sys.path.insert(0, os.path.dirname(__file__))

from servers import RedisCluster, RedisServer  # noqa: E402

WORKSPACE = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    started = RedisServer()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def cluster() -> Iterator[RedisCluster]:
    started = RedisCluster(3)
    yield started
    started.stop()


@pytest.fixture
def client(server: RedisServer) -> leasehold.Client:
    return leasehold.Client(server.url)


@pytest.fixture
def aclient(server: RedisServer) -> leasehold.asyncio.Client:
    return leasehold.asyncio.Client(server.url)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name}:{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def leasehold_bin() -> str:
    """The workspace's `leasehold` command: $LEASEHOLD_BIN, else the one cargo
    built under target/, else built now."""
    named = os.environ.get("LEASEHOLD_BIN")
    if named:
        assert os.access(named, os.X_OK), f"LEASEHOLD_BIN={named} is not an executable"
        return named
    target = Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))
    for profile in ("debug", "release"):
        candidate = target / profile / "leasehold"
        if candidate.is_file():
            return str(candidate)
    cargo = shutil.which("cargo")
    assert cargo, "no leasehold binary under target/ and no cargo to build one"
    subprocess.run([cargo, "build", "-q", "-p", "leasehold-cli"], cwd=WORKSPACE, check=True)
    return str(target / "debug" / "leasehold")
