"""Real redis-server processes for the tests and the benchmark: each on a
free loopback port (never 6379), in a temporary directory, persistence off,
killed when done. ``$LEASEHOLD_REDIS_SERVER`` names another binary."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from typing import List, Optional, Sequence

import redis


def command(client: redis.Redis, *args: object) -> object:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]

SLOTS = 16384


def server_binary() -> str:
    binary = os.environ.get("LEASEHOLD_REDIS_SERVER") or shutil.which("redis-server")
    if not binary:
        raise RuntimeError(
            "redis-server is not on the PATH: install it (apt-get install redis-server) "
            "or name one with LEASEHOLD_REDIS_SERVER"
        )
    return binary


def server_version(binary: str) -> tuple[int, int]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else (7, 0)


def free_port() -> int:
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        # The user's own Redis is on 6379; a cluster bus sits 10000 above
        # when the server cannot be told another.
        if port != 6379 and port < 55000:
            return port


class RedisServer:
    """One redis-server on a free port; ``stop()`` kills it."""

    def __init__(self, extra: Sequence[str] = (), cpu: Optional[int] = None) -> None:
        self.binary = server_binary()
        self.dir = tempfile.mkdtemp(prefix="leasehold-py-redis-")
        self.port = free_port()
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--logfile", os.path.join(self.dir, "redis.log"),
            *extra,
        ]
        if cpu is not None and shutil.which("taskset"):
            args = ["taskset", "-c", str(cpu), *args]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}"
        self.client: redis.Redis = redis.Redis(port=self.port, decode_responses=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                return
            except redis.exceptions.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.log()
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on {self.port}:\n{log}")
                time.sleep(0.02)

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "redis.log")) as f:
                return "".join(f.readlines()[-30:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A Redis Cluster of ``masters`` masters, no replicas, formed by hand:
    slots split evenly (CLUSTER ADDSLOTS), the nodes introduced (CLUSTER
    MEET), then waited for until every node says the cluster is ok."""

    def __init__(self, masters: int = 3) -> None:
        version = server_version(server_binary())
        self.nodes: List[RedisServer] = []
        try:
            for shard in range(masters):
                extra = [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "2000",
                ]
                if version >= (7, 0):
                    extra += ["--cluster-port", str(free_port())]
                self.nodes.append(RedisServer(extra))
            for shard, node in enumerate(self.nodes):
                command(node.client, "CLUSTER", "SET-CONFIG-EPOCH", shard + 1)
                first = shard * SLOTS // masters
                last = (shard + 1) * SLOTS // masters
                command(node.client, "CLUSTER", "ADDSLOTS", *range(first, last))
            for node in self.nodes[1:]:
                meet: List[object] = ["CLUSTER", "MEET", "127.0.0.1", node.port]
                if version >= (7, 0):
                    bus = node.client.config_get("cluster-port")["cluster-port"]
                    meet.append(int(str(bus)))
                command(self.nodes[0].client, *meet)
            deadline = time.monotonic() + 30
            while not self._settled():
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not settle in 30 s")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self.urls = [node.url for node in self.nodes]

    def _settled(self) -> bool:
        for node in self.nodes:
            info = command(node.client, "CLUSTER", "INFO")
            if isinstance(info, bytes):
                info = info.decode()
            fields = dict(
                line.split(":", 1) for line in str(info).splitlines() if ":" in line
            )
            if fields.get("cluster_state") != "ok":
                return False
            if int(fields.get("cluster_known_nodes", "0")) != len(self.nodes):
                return False
        return True

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
