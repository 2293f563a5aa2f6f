"""``xmtc train --ray auto`` on a real two-node Ray cluster (Ray's own ``ray.cluster_utils.Cluster``, both nodes
on this machine, listening on 127.0.0.1 only): the model folder is byte for byte the plain run's, and the
subtree tasks ran on both nodes."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from xmtc import cli
from xmtc.data import sample_path

pytestmark = pytest.mark.slow  # it starts two Ray nodes (a dozen processes)

STORE = 80 * 1024 * 1024  # each node's object store: X and Y of the sample are a few MB


@pytest.fixture
def two_nodes(monkeypatch):
    """A head node and a second node, one CPU each, on the loopback address; the driver is not connected
    (``xmtc train --ray auto`` connects through RAY_ADDRESS itself). Shut down however the test ends."""
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    assert not ray.is_initialized()
    # Ray rewrites 127.0.0.1 in an address to the machine's outward IP unless clusters are declared local-only
    # (its default on macOS and Windows); without this the driver would dial the outward IP, where nothing listens
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the nodes' and workers' processes
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # this process (Ray is already imported)
    cluster = Cluster(shutdown_at_exit=True)
    try:
        args = dict(num_cpus=1, object_store_memory=STORE, node_ip_address="127.0.0.1")
        head = cluster.add_node(**args, include_dashboard=False)
        second = cluster.add_node(**args)
        cluster.wait_for_nodes(timeout=180)  # a loaded 2-core machine starts raylets slowly
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        yield cluster, head.node_id, second.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def train_file(tmp_path):
    """2,000 documents of the bundled yso-finna-en sample (seeded pick)."""
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    keep = np.sort(np.random.default_rng(1).choice(len(lines), size=2000, replace=False))
    path = tmp_path / "train.txt"
    path.write_text("".join(lines[i] for i in keep), encoding="utf-8")
    return path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("negatives", ["tfn", "tfn+man"])  # subtree tasks; parent-group tasks level by level
def test_train_on_a_two_node_cluster_equals_the_plain_run_and_uses_both_nodes(two_nodes, train_file, tmp_path,
                                                                                capsys, negatives):
    import ray

    cluster, head_id, second_id = two_nodes
    assert cluster.address.startswith("127.0.0.1:")
    # max_leaf_size 20: a 3-level tree of the sample's labels, cut into a dozen or more tasks
    args = ["train", str(train_file), "--max-leaf-size", "20", "--negatives", negatives, "-q", "--n-threads", "2"]
    assert cli.main([*args, "-o", str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert cli.main([*args, "-o", str(tmp_path / "ray"), "--ray", "auto", "--log-level", "INFO"]) == 0
    log_text = capsys.readouterr().err
    assert not ray.is_initialized()  # the command connected to the cluster and disconnected again

    # every node had a worker for the job before the work was cut (a slow worker start must not leave one out)
    assert "ray: workers started on 2 of 2 node(s)" in log_text, log_text[-3000:]
    ran = re.findall(r"ray: (\d+) tasks ran on (\d+) node\(s\): (.+)", log_text)
    assert ran, log_text[-3000:]
    nodes = {}
    for n_tasks, _, per_node in ran:
        counts = dict(part.split() for part in per_node.split(", "))
        assert sum(int(c) for c in counts.values()) == int(n_tasks)
        for node, c in counts.items():
            nodes[node] = nodes.get(node, 0) + int(c)
    assert set(nodes) == {head_id[:8], second_id[:8]}, (nodes, log_text[-3000:])  # work landed on both nodes
    assert sum(nodes.values()) >= 4

    assert _listening(cluster) and all(addr == "127.0.0.1" for addr, _ in _listening(cluster)), _listening(cluster)

    plain, dist = _files(tmp_path / "plain"), _files(tmp_path / "ray")
    assert sorted(plain) == sorted(dist)
    assert any(name.endswith(".safetensors") for name in plain)
    for name in plain:  # every weight array (and the manifest, the vocabulary...) byte for byte
        assert plain[name] == dist[name], (name, _first_difference(plain[name], dist[name]))


def _listening(cluster) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket listened on by the cluster's processes and their descendants (the
    workers), read from /proc."""
    import os

    roots = {info.process.pid for node in [cluster.head_node, *cluster.worker_nodes]
             for infos in node.all_processes.values() for info in infos if info.process is not None}
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1]) if d.isdigit() else None
        except OSError:
            continue
        if ppid is not None:
            children.setdefault(ppid, []).append(int(d))
    pids, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in pids:
            pids.add(pid)
            todo.extend(children.get(pid, []))
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    out = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                hexaddr, port = f[1].split(":")
                raw = bytes.fromhex(hexaddr)
                if table == "tcp":
                    addr = ".".join(str(b) for b in raw[::-1])
                else:  # four little-endian 32-bit words
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    addr = words[12:].hex() if words[:12] == bytes(10) + b"\xff\xff" else words.hex()
                    addr = ".".join(str(b) for b in bytes.fromhex(addr)) if len(addr) == 8 else addr
                out.add((addr, int(port, 16)))
    return out


def _first_difference(a: bytes, b: bytes) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at byte {i}: {a[max(0, i - 60):i + 60]!r} vs {b[max(0, i - 60):i + 60]!r}"
