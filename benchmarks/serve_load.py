"""Loopback load test of ``xmtc serve``: latency, throughput, errors, memory and SIGTERM, bounded.

    python benchmarks/serve_load.py --dataset reuters21578-apte90            # 8 clients, 2,000 suggests
    python benchmarks/serve_load.py --dataset yso-finna-en-2k-20k
    python benchmarks/serve_load.py --dataset reuters21578-apte90 --requests 200000 --duration 180  # minutes

What it does, in one run: trains an XR-Linear model on the data set's train file (or serves ``--model``),
starts ``xmtc serve`` on a free loopback port, sends ``--warmup`` requests, then has ``--clients``
keep-alive connections send ``--requests`` suggest requests (texts from the test file, Annif's form
body, ``limit=10``) as fast as answers come back, stopping at ``--duration`` seconds whatever the
count. Every ``--malformed-every``-th request is a malformed one instead (no text, ``limit=-1``,
``threshold=abc``, broken JSON, 33 documents, an unknown project, a wrong method, a body over the
server's limit): each must get a 4xx problem+json. Good requests must get 200. Any 5xx fails the run.
The server's RSS is sampled every 0.25 s; "growth after warm-up" is its last sample minus the sample
taken when the warm-up ended. The default warm-up is 4,000 requests because the server's private
memory grows during its first ~3,000 (by 14 MB on the full yso-finna-en model: allocator arenas and
scratch buffers reaching the largest micro-batch they will see) and is flat from then on (+1 MB over the
next 21,000, ``RssAnon`` sampled from /proc; benchmarks/RESULTS.md). Finally, eight requests are sent into a long batching window, SIGTERM
is sent while they wait, and all eight must still be answered 200 with the process ending by itself.

The client is a small HTTP/1.1 keep-alive client on asyncio streams in this process, so it costs the
two cores little; its latencies are wall-clock from the first byte written to the last byte read,
client parsing included. Last line of stdout: one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from xmtc.data.data_root import data_root  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = data_root()
LABEL_FILES = {"yso-finna-en-2k-20k": "yso-finna-en/labels.txt.gz"}


# -- a minimal HTTP/1.1 client --------------------------------------------------------------------------
class Conn:
    """One keep-alive connection; ``request`` returns (status, headers, body), reconnecting when needed."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body: bytes = b"", ctype: str | None = None,
                      declared: int | None = None) -> tuple[int, dict, bytes]:
        if self.writer is None:
            await self._open()
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        if ctype:
            head.append(f"Content-Type: {ctype}")
        if method in ("POST", "PUT"):
            head.append(f"Content-Length: {len(body) if declared is None else declared}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        try:
            status_line = await self.reader.readline()
            if not status_line:
                raise ConnectionError("connection closed before a response")
            status = int(status_line.split()[1])
            headers = {}
            while True:
                line = await self.reader.readline()
                if line in (b"\r\n", b""):
                    break
                key, _, value = line.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        except BaseException:
            self.close()
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, data


def form(**fields) -> bytes:
    from urllib.parse import urlencode
    return urlencode(fields).encode()


def malformed_requests(project: str, limit_bytes: int) -> list[tuple[str, str, bytes, str | None, str]]:
    """(method, path, body, content type, what) of requests that must each get a 4xx problem."""
    form_t, json_t = "application/x-www-form-urlencoded", "application/json"
    sug, batch = f"/v1/projects/{project}/suggest", f"/v1/projects/{project}/suggest-batch"
    return [
        ("POST", sug, form(limit=5), form_t, "no text"),
        ("POST", sug, form(text="x", limit=-1), form_t, "limit -1"),
        ("POST", sug, form(text="x", threshold="abc"), form_t, "threshold abc"),
        ("POST", batch, b'{"documents": [{"text": ', json_t, "broken JSON"),
        ("POST", batch, json.dumps({"documents": [{"text": "a"}] * 33}).encode(), json_t, "33 documents"),
        ("POST", batch, b'{"documents": [{"id": 1}]}', json_t, "document without text"),
        ("POST", "/v1/projects/no-such-project/suggest", form(text="x"), form_t, "unknown project"),
        ("GET", sug, b"", None, "wrong method"),
        ("POST", sug, b"text=" + b"a" * (limit_bytes + 1), form_t, "body over the limit"),
    ]


# -- the server ----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def start_server(model: Path, project: str, port: int, extra: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "xmtc.cli", "serve", "--name", f"{project}={model}", "--port", str(port),
           "-q", *extra]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"xmtc serve exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("xmtc serve did not start within 120 s")


def read_texts(path: Path, n: int) -> list[str]:
    import gzip
    texts = []
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as fh:
        for line in fh:
            texts.append(line.rstrip("\n").split("\t", 1)[-1])
    rng = np.random.default_rng(0)
    return [texts[i] for i in rng.permutation(len(texts))[:n]]


# -- the load --------------------------------------------------------------------------------------------
async def run_load(port: int, pid: int, project: str, texts: list[str], args) -> dict:
    bad = malformed_requests(project, args.max_body_bytes)
    path = f"/v1/projects/{project}/suggest"
    ctype = "application/x-www-form-urlencoded"
    bodies = [form(text=t, limit=10) for t in texts]

    async def warm(conn):
        for i in range(args.warmup // args.clients):
            await conn.request("POST", path, bodies[i % len(bodies)], ctype)

    conns = [Conn(port) for _ in range(args.clients)]
    await asyncio.gather(*(warm(c) for c in conns))
    rss = [(0.0, rss_mb(pid))]
    cpu0 = cpu_s(pid)
    counter = iter(range(args.requests))
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    failures: list[str] = []
    t_start = time.perf_counter()
    deadline = t_start + args.duration

    async def sample():
        while True:
            await asyncio.sleep(0.25)
            rss.append((time.perf_counter() - t_start, rss_mb(pid)))

    async def client(conn: Conn):
        for i in counter:
            if time.perf_counter() > deadline:
                return
            is_bad = args.malformed_every and i % args.malformed_every == args.malformed_every - 1
            if is_bad:
                method, p, body, ct, what = bad[(i // args.malformed_every) % len(bad)]
            else:
                method, p, body, ct, what = "POST", path, bodies[i % len(bodies)], ctype, "suggest"
            t0 = time.perf_counter()
            try:
                status, headers, data = await conn.request(method, p, body, ct)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                failures.append(f"{what}: {type(exc).__name__}: {exc}")
                continue
            dt = time.perf_counter() - t0
            key = f"{what}: {status}"
            statuses[key] = statuses.get(key, 0) + 1
            if is_bad:
                if not (400 <= status < 500 and headers.get("content-type", "").startswith("application/problem+json")):
                    failures.append(f"{what}: got {status} {data[:200]!r}")
            else:
                latencies.append(dt)
                if status != 200 or b'"results"' not in data:
                    failures.append(f"suggest: got {status} {data[:200]!r}")

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(client(c) for c in conns))
    wall = time.perf_counter() - t_start
    server_cpu = cpu_s(pid) - cpu0
    sampler.cancel()
    rss.append((wall, rss_mb(pid)))
    for c in conns:
        c.close()
    lat = np.array(latencies) * 1000
    n_5xx = sum(n for k, n in statuses.items() if k.rsplit(": ", 1)[1].startswith("5"))
    done = sum(statuses.values())
    return {"requests": done, "good": int(lat.size), "malformed": done - int(lat.size), "wall_s": round(wall, 2),
            "throughput_rps": round(done / wall, 1), "server_cpu_ms_per_request": round(server_cpu / done * 1000, 3),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p90_ms": round(float(np.percentile(lat, 90)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2), "max_ms": round(float(lat.max()), 2),
            "errors": len(failures), "n_5xx": n_5xx, "first_errors": failures[:5], "statuses": statuses,
            "rss_after_warmup_mb": round(rss[0][1], 1), "rss_end_mb": round(rss[-1][1], 1),
            "rss_max_mb": round(max(r for _, r in rss), 1), "rss_growth_mb": round(rss[-1][1] - rss[0][1], 1)}


async def sigterm_check(port: int, proc: subprocess.Popen, project: str, texts: list[str]) -> dict:
    """Eight requests wait in a long batching window; SIGTERM; all must be answered 200."""
    conns = [Conn(port) for _ in range(8)]
    for c in conns:
        await c.request("GET", "/v1/")
    path = f"/v1/projects/{project}/suggest"
    tasks = [asyncio.create_task(c.request("POST", path, form(text=t), "application/x-www-form-urlencoded"))
             for c, t in zip(conns, texts)]
    await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    rc = await asyncio.to_thread(proc.wait, 60)
    answered = [r[0] if isinstance(r, tuple) else type(r).__name__ for r in results]
    return {"in_flight": len(tasks), "answered": answered, "exit": rc, "shutdown_s": round(time.perf_counter() - t0, 2),
            "ok": answered == [200] * len(tasks) and rc in (0, -signal.SIGTERM)}


def train(dataset: str, out: Path) -> Path:
    cmd = [sys.executable, "-m", "xmtc.cli", "train", str(DATA / dataset / "train.txt.gz"), "-o", str(out), "-q"]
    label_file = DATA / LABEL_FILES.get(dataset, f"{dataset}/labels.txt.gz")
    if label_file.exists():
        cmd += ["--label-file", str(label_file)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(cmd, check=True, env=env)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="reuters21578-apte90", help="Folder of ../shared/data (train/test files).")
    ap.add_argument("--model", type=Path, help="Serve this model folder instead of training one.")
    ap.add_argument("--texts", type=Path, help="Request texts from this TSV(.gz) file instead of the test file.")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2000, help="Requests in the measured phase (good + malformed).")
    ap.add_argument("--duration", type=float, default=300.0, help="Stop the measured phase after this many seconds.")
    ap.add_argument("--warmup", type=int, default=4000,
                    help="Requests sent before measuring (memory settles after ~3,000).")
    ap.add_argument("--malformed-every", type=int, default=10, help="Every N-th request is malformed (0: none).")
    ap.add_argument("--batch-wait-ms", type=float, default=None, help="Server's micro-batching window.")
    ap.add_argument("--batch-size", type=int, default=None, help="Server's micro-batch size (1: no batching).")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--no-sigterm-check", action="store_true")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="xmtc-serve-load-") as tmp:
        model = args.model or train(args.dataset, Path(tmp) / "model")
        texts = read_texts(args.texts or DATA / args.dataset / "test.txt.gz", 5000)
        project = "bench"
        extra = ["--workers", str(args.workers), "--max-body-bytes", str(args.max_body_bytes)]
        if args.batch_wait_ms is not None:
            extra += ["--batch-wait-ms", str(args.batch_wait_ms)]
        if args.batch_size is not None:
            extra += ["--batch-size", str(args.batch_size)]
        port = free_port()
        proc = start_server(model, project, port, extra)
        load_before = os.getloadavg()
        try:
            result = asyncio.run(run_load(port, proc.pid, project, texts, args))
        finally:
            proc.terminate()
            proc.wait(60)
        result.update({"dataset": args.dataset, "clients": args.clients, "workers": args.workers,
                       "batch_wait_ms": args.batch_wait_ms, "batch_size": args.batch_size, "loadavg_before": [round(x, 2) for x in load_before],
                       "loadavg_after": [round(x, 2) for x in os.getloadavg()], "nproc": os.cpu_count()})
        if not args.no_sigterm_check:
            port = free_port()
            proc = start_server(model, project, port, ["--batch-wait-ms", "2000"])
            try:
                result["sigterm"] = asyncio.run(sigterm_check(port, proc, project, texts[:8]))
            finally:
                if proc.poll() is None:
                    proc.kill()
    print(f"{args.dataset}: {result['requests']} requests ({result['malformed']} malformed) from {args.clients}"
          f" clients in {result['wall_s']} s: {result['throughput_rps']} req/s, server CPU"
          f" {result['server_cpu_ms_per_request']} ms/request; suggest p50 {result['p50_ms']} ms,"
          f" p99 {result['p99_ms']} ms; errors {result['errors']}, 5xx {result['n_5xx']}; RSS"
          f" {result['rss_after_warmup_mb']} -> {result['rss_end_mb']} MB; load {result['loadavg_before'][0]}",
          file=sys.stderr)
    print(json.dumps(result))
    ok = result["errors"] == 0 and result["n_5xx"] == 0 and result.get("sigterm", {"ok": True})["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
