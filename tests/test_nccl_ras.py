"""The NCCL RAS client against a server that speaks the protocol as NCCL's documentation and source give it
(docs/userguide/source/troubleshooting/ras.rst, src/ras/client_support.cc), and against real NCCL on a GPU.

The server is a real TCP server on loopback: handshake `CLIENT PROTOCOL 2` / `SERVER PROTOCOL 2`,
`TIMEOUT n` and `SET FORMAT json` answered `OK` (an NCCL before 2.28.7 answers the latter
`ERROR: Unknown command ...` and reports text), `STATUS` answered with the report and a closed connection.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gkdtop.capture import nccl_ras

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
TEXT_REPORT = """Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      1          2            1          2        2

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         1         2         2         2   RUNNING      OK
"""


@dataclass
class Rank:
    rank: int
    pid: int
    all_reduce: int = 0
    missing: bool = False
    dead: bool = False
    async_error: int = 0


@dataclass
class Job:
    """What the server reports; `moving` ranks launch 10 more all_reduces per STATUS."""

    ranks: list[Rank]
    moving: set[int] = field(default_factory=set)
    json: bool = True  # NCCL >= 2.28.7
    commands: list[str] = field(default_factory=list)

    def report(self) -> str:
        for r in self.ranks:
            if r.rank in self.moving:
                r.all_reduce += 10
        present = [r for r in self.ranks if not r.missing]
        absent = [r for r in self.ranks if r.missing]
        return json.dumps({
            "nccl_version": "2.29.1", "cuda_runtime_version": 13000, "cuda_driver_version": 13000,
            "timestamp": "2026-11-24 10:00:00", "communicators_count": 1,
            "communicators": [{
                "hash": "0xae94423cfbb2ef4a", "secondary_hash": "0x1:0x2", "size": len(self.ranks),
                "ranks_count": len(present), "missing_ranks_count": len(absent),
                "ranks": [{"rank": r.rank, "host": "127.0.0.1", "pid": r.pid, "cuda_dev": r.rank, "nvml_dev": r.rank,
                           "status": {"init_state": 0, "async_error": r.async_error, "finalize_called": False,
                                      "destroy_flag": False, "abort_flag": False},
                           "collective_counts": {f: (r.all_reduce if f == "AllReduce" else 3) for f in FUNCS}}
                          for r in present],
                "missing_ranks": [{"rank": r.rank, "host": "127.0.0.1", "pid": r.pid, "cuda_dev": r.rank,
                                   "nvml_dev": r.rank, "status": {"unresponsive": True, "considered_dead": r.dead}}
                                  for r in absent]}],
            "ras": {"collection_time_sec": 0.0, "timeouts_count": 0},
        }, indent=2) + "\n"


class RasServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, job: Job) -> None:
        self.job = job
        super().__init__(("127.0.0.1", 0), RasHandler)


class RasHandler(socketserver.StreamRequestHandler):
    server: RasServer

    def handle(self) -> None:
        job, json_format = self.server.job, False
        for raw in self.rfile:
            cmd = raw.decode().rstrip("\r\n")
            job.commands.append(cmd)
            low = cmd.lower()
            if low.startswith("client protocol "):
                self.wfile.write(b"SERVER PROTOCOL 2\n")
            elif low.startswith("timeout "):
                value = cmd[len("timeout "):]
                self.wfile.write(b"OK\n" if value.isdigit() else f"ERROR: Invalid timeout value {value}\n".encode())
            elif low.startswith("set format ") and job.json:
                fmt = low[len("set format "):]
                json_format = fmt == "json"
                self.wfile.write(b"OK\n" if fmt in ("json", "text") else f"ERROR: Invalid format {fmt}\n".encode())
            elif low in ("status", "verbose status"):
                self.wfile.write((job.report() if json_format else TEXT_REPORT).encode())
                return  # NCCL closes the connection after the report
            else:
                self.wfile.write(f"ERROR: Unknown command {cmd}\n".encode())


@pytest.fixture
def serve() -> Iterator[callable]:  # type: ignore[valid-type]
    servers: list[RasServer] = []

    def start(job: Job) -> tuple[str, int]:
        server = RasServer(job)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return ("127.0.0.1", server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_communicator_whose_counts_move_is_not_stuck(serve) -> None:  # type: ignore[no-untyped-def]
    job = Job([Rank(0, 101), Rank(1, 102)], moving={0, 1})
    out = nccl_ras.poll(serve(job), interval=0.01)
    assert out["error"] == "" and out["format"] == "json" and out["nccl_version"] == "2.29.1"
    [comm] = out["communicators"]
    assert not comm["stuck"] and comm["advanced"] == [0, 1] and comm["still"] == []
    assert comm["counts"]["0"][1] - comm["counts"]["0"][0] == 10
    assert job.commands[:4] == ["CLIENT PROTOCOL 2", "TIMEOUT 10", "SET FORMAT json", "STATUS"]


def test_no_progress_between_polls_is_stuck_and_a_dead_rank_is_named(serve) -> None:  # type: ignore[no-untyped-def]
    job = Job([Rank(0, 101, all_reduce=6650), Rank(1, 102, missing=True, dead=True),
               Rank(2, 103, all_reduce=6650, async_error=6)])
    out = nccl_ras.poll(serve(job), interval=0.01)
    [comm] = out["communicators"]
    assert comm["stuck"] and comm["advanced"] == [] and comm["still"] == [0, 2]
    assert comm["missing"] == [{"rank": 1, "pid": 102, "dead": True}]
    assert comm["sentence"] == ("communicator 0xae94423cfbb2ef4a (3 ranks): no rank launched a collective between "
                                "the two polls (at operation 6662): stuck; rank 1 (pid 102) is dead; "
                                "rank 2: async error (ncclResult 6)")
    assert comm["errors"] == {"2": "async error (ncclResult 6)"}


def test_one_rank_behind_while_the_others_move(serve) -> None:  # type: ignore[no-untyped-def]
    job = Job([Rank(0, 101), Rank(1, 102), Rank(2, 103)], moving={0, 2})
    [comm] = nccl_ras.poll(serve(job), interval=0.01)["communicators"]
    assert not comm["stuck"] and comm["still"] == [1]
    assert comm["sentence"].endswith("rank 1 launched no collective while 2 others did")


def test_an_nccl_without_json_reports_text(serve) -> None:  # type: ignore[no-untyped-def]
    job = Job([Rank(0, 101)], json=False)
    report = nccl_ras.query(serve(job))
    assert report.format == "text" and "Communicators..." in report.text and report.comms == []
    assert job.commands[2] == "SET FORMAT json"  # refused: "ERROR: Unknown command SET FORMAT json"
    out = nccl_ras.poll(serve(Job([Rank(0, 101)], json=False)), interval=0.01)
    assert "no per-rank counts" in out["error"] and "RUNNING" in out["text"]


def test_nothing_listening_or_not_ras_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        out = nccl_ras.poll(("127.0.0.1", port), interval=0.01)
    assert out["error"].startswith(f"NCCL RAS does not answer at 127.0.0.1:{port}:") and "\n" not in out["error"]

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def not_ras() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(100)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=not_ras, daemon=True).start()
        with pytest.raises(nccl_ras.RasError, match=r"is not NCCL RAS \(it answered 'HTTP/1.1 400 Bad Request'\)"):
            nccl_ras.query(listener.getsockname(), timeout=5)


def test_where_ras_listens_comes_from_the_process_environment() -> None:
    assert nccl_ras.address_from_env({}) == ("localhost", 28028)
    assert nccl_ras.address_from_env({"NCCL_RAS_ADDR": "127.0.0.1:29000"}) == ("127.0.0.1", 29000)
    assert nccl_ras.address_from_env({"NCCL_RAS_ENABLE": "0"}) is None


NCCL_RANK = textwrap.dedent("""
    import os, sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
    torch.cuda.set_device(0)
    x = torch.ones(4, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.mark.gpu
def test_real_nccl_answers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from gkdtop.demo.launcher import free_port

    ras_port = free_port()
    env = {**os.environ, "NCCL_RAS_ADDR": f"127.0.0.1:{ras_port}"}
    proc = subprocess.Popen([sys.executable, "-c", NCCL_RANK, str(free_port(avoid=[ras_port]))], env=env,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert nccl_ras.loaded_nccl(proc.pid).startswith("libnccl.so")
        report = nccl_ras.query(("127.0.0.1", ras_port))
        if report.format == "json":
            pids = {r.pid for c in report.comms for r in c.ranks}
            assert proc.pid in pids, report
            out = nccl_ras.poll(("127.0.0.1", ras_port), interval=0.5)
            assert out["communicators"] and out["communicators"][0]["stuck"]  # it sleeps: nothing launched
        else:
            assert "Communicators" in report.text
    finally:
        proc.kill()
        proc.wait(10)
