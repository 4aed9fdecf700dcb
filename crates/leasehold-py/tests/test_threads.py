"""One client serving many threads, with the GIL released while they wait."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import List

import pytest

import leasehold
from servers import RedisServer


def test_threads_of_one_client_exclude_each_other(client: leasehold.Client, server: RedisServer, name: str) -> None:
    counter = f"{name}:counter"
    server.client.set(counter, 0)
    fences: List[int] = []

    def work() -> None:
        for _ in range(20):
            with client.mutex(name) as guard:
                value = int(server.client.get(counter) or 0)
                time.sleep(0.001)
                server.client.set(counter, value + 1)
                fences.append(guard.fence)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int(server.client.get(counter) or 0) == 160
    assert fences == sorted(fences) and len(set(fences)) == 160


def test_a_waiting_thread_lets_others_run(client: leasehold.Client, name: str) -> None:
    holder = client.mutex(name).acquire()
    taken = threading.Event()

    def wait() -> None:
        with client.mutex(name).acquire(timeout=60):
            taken.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    # This thread runs Python (and asks Redis) while the other waits: were
    # the GIL held through the wait, this loop would never end.
    while client.mutex(name).inspect().waiting_clients == 0:
        pass
    assert not taken.is_set()
    holder.release()
    waiter.join()
    assert taken.is_set()


def test_many_threads_try_many_keys(client: leasehold.Client, name: str) -> None:
    taken: List[int] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        for i in range(50):
            guard = client.mutex(f"{name}:{(worker * 7 + i) % 10}").try_acquire()
            if guard is not None:
                guard.release()
                with lock:
                    taken.append(1)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 0 < len(taken) <= 400


def test_one_thread_waits_for_loss_while_another_works(server: RedisServer, name: str) -> None:
    client = leasehold.Client(server.url)
    guard = client.mutex(name).acquire()
    lost = threading.Event()
    
    def watch() -> None:
        if guard.wait_lost():
            lost.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert leasehold.Client(server.url).mutex(name).force_release()
    watcher.join(timeout=60)
    assert lost.is_set()


def test_ctrl_c_ends_a_blocking_wait(client: leasehold.Client, name: str) -> None:
    # Python turns SIGINT into KeyboardInterrupt only if SIGINT was not
    # ignored when it started, and a shell without job control starts its
    # background commands (`cmd &`, as CI runners may) with SIGINT ignored:
    # the handler is installed here, whatever the test was started from.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctrl_c_ends_a_blocking_wait(client, name)
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_ends_a_blocking_wait(client: leasehold.Client, name: str) -> None:
    holder = leasehold.Client(client.url).mutex(name).acquire()
    waiter = client.mutex(name)

    def interrupt() -> None:
        while client.mutex(name).inspect().waiting_clients == 0:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire()
    interrupter.join()
    client.flush()
    holder.release()
    # The interrupted wait left nothing behind: the lock is free to take.
    with waiter.acquire(timeout=30) as guard:
        assert guard.fence > holder.fence
