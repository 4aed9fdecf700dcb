"""Bad input is refused before anything reaches Redis; a server out of reach
is an error within the connect timeout, not a hang."""

from __future__ import annotations

import asyncio
import pickle
from datetime import timedelta

import pytest

import leasehold
import leasehold.asyncio
from servers import free_port


def test_empty_name(client: leasehold.Client) -> None:
    with pytest.raises(leasehold.InvalidInputError) as raised:
        client.mutex("")
    assert isinstance(raised.value, ValueError)
    assert raised.value.kind == "invalid_input"
    assert "name" in str(raised.value)


def test_zero_and_negative_durations(client: leasehold.Client) -> None:
    with pytest.raises(leasehold.InvalidInputError, match="lease"):
        client.mutex("x", lease=0)
    with pytest.raises(ValueError):
        client.mutex("x", lease=-1)
    with pytest.raises(ValueError):
        client.mutex("x", lease=float("nan"))
    with pytest.raises(ValueError):
        client.mutex("x").acquire(timeout=timedelta(seconds=-1))
    with pytest.raises(TypeError):
        client.mutex("x", lease="30s")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.mutex("x", lease=True)


def test_bad_settings(client: leasehold.Client) -> None:
    with pytest.raises(ValueError):
        leasehold.Client("not a url")
    with pytest.raises(ValueError):
        leasehold.Client(client.url, command_timeout=0)
    with pytest.raises(ValueError):
        leasehold.Client(client.url, prefix="")
    with pytest.raises(ValueError):
        client.semaphore("s", 0)
    with pytest.raises(ValueError):
        client.reentrant_mutex("r", owner="has space")
    with pytest.raises(ValueError):
        client.mutex("m", hold_at_least=20, max_hold=10)
    with pytest.raises(ValueError):
        leasehold.Redlock(["redis://127.0.0.1:1"])
    with pytest.raises(ValueError):
        leasehold.MultiLock([])


def test_a_name_held_as_another_kind(client: leasehold.Client, name: str) -> None:
    with client.mutex(name):
        with pytest.raises(leasehold.ConflictError):
            leasehold.Client(client.url).semaphore(name, 2).try_acquire()


@pytest.mark.timeout(60)
def test_server_down_is_an_error_not_a_hang() -> None:
    down = leasehold.Client(f"redis://127.0.0.1:{free_port()}", connect_timeout=1, command_timeout=0.5)
    with pytest.raises(leasehold.CannotConnectError) as raised:
        down.mutex("x").acquire()
    assert isinstance(raised.value, ConnectionError)
    assert raised.value.kind == "connection"
    with pytest.raises(leasehold.CannotConnectError):
        down.mutex("x").try_acquire()


@pytest.mark.timeout(60)
def test_server_down_asyncio() -> None:
    async def main() -> None:
        down = leasehold.asyncio.Client(f"redis://127.0.0.1:{free_port()}", connect_timeout=1)
        with pytest.raises(leasehold.CannotConnectError):
            await down.mutex("x").acquire()

    asyncio.run(main())


def test_errors_pickle_and_name_their_kind() -> None:
    error = leasehold.exceptions._from_native("timeout", "lock busy")
    assert isinstance(error, leasehold.LockTimeoutError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is leasehold.LockTimeoutError and copy.kind == "timeout"
    assert str(copy) == "lock busy"
    assert type(leasehold.exceptions._from_native("server", "x")) is leasehold.LeaseholdError
    assert isinstance(leasehold.exceptions._from_native("auth", "x"), leasehold.RefusedError)


def test_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEASEHOLD_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert leasehold.url_from_env() == "redis://127.0.0.1:6379"
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.2:6380")
    assert leasehold.Client().url == "redis://10.0.0.2:6380"
    monkeypatch.setenv("LEASEHOLD_URL", "")
    assert leasehold.url_from_env() == "redis://10.0.0.2:6380"
    monkeypatch.setenv("LEASEHOLD_URL", "redis://10.0.0.1:6379")
    assert leasehold.Client().url == "redis://10.0.0.1:6379"
    assert leasehold.Client(["redis://a:1", "redis://b:2"]).url == "redis://a:1,redis://b:2"


def test_replicas_asked_without_a_timeout_wait_the_librarys_default(client: leasehold.Client) -> None:
    # The test server has no replica: a lock that asks for one is refused
    # once the replica timeout passes, and says which timeout it waited:
    # the library's default (1 s), as in Rust and on the command line.
    with pytest.raises(leasehold.ReplicasMissingError, match=r"within 1s"):
        client.mutex("replicas-default", replicas=1).try_acquire()
    with pytest.raises(leasehold.ReplicasMissingError, match=r"within 200ms"):
        client.mutex("replicas-given", replicas=1, replica_timeout=0.2).try_acquire()
