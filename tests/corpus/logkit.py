# ruff: noqa: E501  (log lines are as long as the frameworks print them)
"""Building blocks that print lines the way the real frameworks do (see docs/real-logs.md).

The corpus logs are written by make_corpus.py with these helpers, not pasted from anyone's job:
every format string here was read in the framework's own source (repo + path in the catalogue),
and the values (hosts, pids, sizes, timings) are invented. A seeded Random keeps the output
stable, so regenerating the corpus gives the same bytes.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

BAR = "██████████"
ESC_CYAN = "\x1b[36m"
ESC_RESET = "\x1b[0m"


class Log:
    """One log being written: a clock that moves forward and the lines printed so far."""

    def __init__(self, start: str, seed: int, tz_shift_h: float = 0.0, ansi: bool = False) -> None:
        self.t = datetime.fromisoformat(start)
        self.rng = random.Random(seed)
        self.lines: list[str] = []
        # Hours added to the stamps that libraries running in containers print (vLLM, Python
        # logging inside Ray workers) while the host-side stamps stay on the driver's clock.
        self.tz_shift = timedelta(hours=tz_shift_h)
        self.ansi = ansi
        self.pids: dict[str, int] = {}
        # verl's runtime_env sets VLLM_LOGGING_LEVEL=WARN unless the user exported it: then vLLM's
        # INFO lines never reach the log (verl/trainer/constants_ppo.py).
        self.vllm_quiet = False

    # -- clock -----------------------------------------------------------------------------
    def adv(self, lo: float, hi: float | None = None) -> None:
        self.t += timedelta(seconds=lo if hi is None else self.rng.uniform(lo, hi))

    def pid(self, name: str) -> int:
        if name not in self.pids:
            self.pids[name] = self.rng.randint(1200, 480000)
        return self.pids[name]

    # -- raw output --------------------------------------------------------------------------
    def raw(self, line: str) -> None:
        self.lines.append(line)

    def prefix(self, actor: str, ip: str | None = None, pid: int | None = None) -> str:
        """Ray's log-monitor prefix: '(WorkerDict pid=123, ip=10.0.0.2) '."""
        p = pid if pid is not None else self.pid(actor + (ip or ""))
        body = f"({actor} pid={p}, ip={ip})" if ip else f"({actor} pid={p})"
        return f"{ESC_CYAN}{body}{ESC_RESET} " if self.ansi else body + " "

    def ray(self, actor: str, text: str, ip: str | None = None, pid: int | None = None) -> None:
        pre = self.prefix(actor, ip, pid)
        for part in text.split("\n"):
            self.lines.append(pre + part)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    # -- time formats --------------------------------------------------------------------------
    def shifted(self) -> datetime:
        return self.t + self.tz_shift

    def vllm_ts(self) -> str:
        """vllm/logger.py: _DATE_FORMAT = '%m-%d %H:%M:%S'."""
        return self.shifted().strftime("%m-%d %H:%M:%S")

    def pylog_ts(self, shifted: bool = False) -> str:
        """logging's default asctime: '2025-06-12 10:31:02,123'. shifted: printed on a worker's clock."""
        t = self.shifted() if shifted else self.t
        return t.strftime("%Y-%m-%d %H:%M:%S") + f",{t.microsecond // 1000:03d}"

    def glog_ts(self, level: str = "I", nanos: bool = True) -> str:
        """c10 logging (torch >= 2.4): 'E1218 20:27:21.426415540' (month+day, 9-digit fraction)."""
        t = self.shifted()  # printed by worker processes: the workers' clock
        frac = f"{t.microsecond:06d}{self.rng.randint(0, 999):03d}" if nanos else f"{t.microsecond:06d}"
        return f"{level}{t:%m%d %H:%M:%S}.{frac}"

    # -- vLLM --------------------------------------------------------------------------------
    def vllm(self, level: str, src: str, msg: str, pre: str = "", proc: str = "") -> None:
        """'INFO 06-12 10:35:01 [gpu_worker.py:232] msg', optionally behind vLLM's own
        '(EngineCore_DP0 pid=N) ' process prefix and Ray's actor prefix."""
        if self.vllm_quiet and level in ("DEBUG", "INFO"):
            return
        tag = f"({proc} pid={self.pid(proc + pre)}) " if proc else ""
        self.lines.append(f"{pre}{tag}{level} {self.vllm_ts()} [{src}] {msg}")


def tqdm_bar(desc: str, n: int, total: int, elapsed: float, unit_rate: str | None = None, postfix: str = "") -> str:
    """A tqdm line: 'desc:  45%|████▌     | 9/20 [00:21<00:26,  2.38s/it]'."""
    pct = int(100 * n / total) if total else 0
    fill = int(10 * n / total) if total else 0
    bar = "█" * fill + " " * (10 - fill)
    el = _fmt_secs(elapsed)
    if n == 0:
        rem, rate = "?", "?it/s"
    else:
        per = elapsed / n
        rem = _fmt_secs(per * (total - n))
        rate = unit_rate or (f"{per:.2f}s/it" if per >= 1 else f"{1 / per:.2f}it/s")
    tail = f", {postfix}" if postfix else ""
    return f"{desc}: {pct:3d}%|{bar}| {n}/{total} [{el}<{rem}, {rate}{tail}]"


def _fmt_secs(s: float) -> str:
    s = int(s)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


# ---------------------------------------------------------------------------------------------
# NCCL (NCCL_DEBUG=INFO): 'host:pid:tid [dev] NCCL INFO ...'
# ---------------------------------------------------------------------------------------------
def nccl_init(log: Log, pre: str, host: str, pid: int, dev: int, rank: int, nranks: int, ifname: str,
              ip: str, ib: bool = True, complete: bool = True, comm: str | None = None) -> None:
    tid = pid + 300 + dev
    h = f"{host}:{pid}:{tid} [{dev}]"
    comm = comm or f"0x{log.rng.randint(0x55550000000, 0x55559999999):x}"
    cid = f"0x{log.rng.getrandbits(60):x}"
    log.raw(f"{pre}{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using {ifname}:{ip}<0>")
    log.raw(f"{pre}{host}:{pid}:{pid} [{dev}] NCCL INFO cudaDriverVersion 12040")
    if rank == 0:
        log.raw(f"{pre}NCCL version 2.21.5+cuda12.4")
    log.raw(f"{pre}{h} NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    if ib:
        log.raw(f"{pre}{h} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB {ifname}:{ip}<0>")
        log.raw(f"{pre}{h} NCCL INFO Using network IB")
    else:
        log.raw(f"{pre}{h} NCCL INFO NET/IB : No device found.")
        log.raw(f"{pre}{h} NCCL INFO NET/Socket : Using [0]{ifname}:{ip}<0>")
        log.raw(f"{pre}{h} NCCL INFO Using network Socket")
    log.raw(f"{pre}{h} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {0x18000 + dev * 0x10000:x} commId {cid} - Init START")
    if not complete:
        return
    log.raw(f"{pre}{h} NCCL INFO Setting affinity for GPU {dev} to ffffffff,00000000,ffffffff")
    log.raw(f"{pre}{h} NCCL INFO comm {comm} rank {rank} nRanks {nranks} nNodes {max(1, nranks // 8)} localRanks {min(8, nranks)} localRank {dev} MNNVL 0")
    for ch in range(0, 4):
        log.raw(f"{pre}{h} NCCL INFO Channel {ch:02d}/24 :    " + " ".join(str(r) for r in range(nranks)))
    log.raw(f"{pre}{h} NCCL INFO Connected all rings")
    log.raw(f"{pre}{h} NCCL INFO Connected all trees")
    log.raw(f"{pre}{h} NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer")
    log.raw(f"{pre}{h} NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {0x18000 + dev * 0x10000:x} commId {cid} - Init COMPLETE")
    log.raw(f"{pre}{h} NCCL INFO Init timings - ncclCommInitRank: rank {rank} nranks {nranks} total 1.{log.rng.randint(10, 99)} (kernels 0.21, alloc 0.07, bootstrap 0.63, allgathers 0.02, topo 0.15, graphs 0.01, connections 0.09, rest 0.03)")


# ---------------------------------------------------------------------------------------------
# PyTorch ProcessGroupNCCL (torch >= 2.5): '[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:632] ...'
# ---------------------------------------------------------------------------------------------
def pg_prefix(pg_id: int, guid: int, desc: str, rank: int) -> str:
    d = f"({desc})" if desc else ""
    return f"[PG ID {pg_id} PG GUID {guid}{d} Rank {rank}]"


def watchdog_timeout(log: Log, pre: str, rank: int, local_rank: int, seq: int, op: str, numel: int, numel_out: int,
                     timeout_ms: int = 600000, pg: tuple[int, int, str] = (0, 0, "default_pg"),
                     truncate_at: int | None = None, full: bool = True) -> None:
    """The watchdog's report on one rank, as torch 2.6 prints it."""
    pgp = pg_prefix(pg[0], pg[1], pg[2], local_rank if pg[0] else rank)
    ran = timeout_ms + log.rng.randint(20, 120)
    work = (f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel_out}, "
            f"Timeout(ms)={timeout_ms}) ran for {ran} milliseconds before timing out.")
    line = f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:632] {pgp} Watchdog caught collective operation timeout: {work}"
    if truncate_at is not None:
        log.raw(line[:truncate_at])
        return
    log.raw(line)
    if not full:
        return
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:2271] {pgp}  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:2106] {pgp} First PG on this rank to signal dumping.")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:1597] {pgp} Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.")
    log.raw(f"{pre}[rank{rank}]:[{log.glog_ts('E')} ProcessGroupNCCL.cpp:1638] {pgp} Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work}")
    log.raw(f"{pre}Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):")
    for i, fr in enumerate([
        "c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f3a2c56c1b8 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)",
        "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x23d (0x7f3a2d8a4a6d in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
        "c10d::ProcessGroupNCCL::watchdogHandler() + 0x6ac (0x7f3a2d8a93dc in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
        "c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f3a2d8aa7bd in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
        "<unknown function> + 0xdc253 (0x7f3b6a3b1253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "<unknown function> + 0x94ac3 (0x7f3b6b7a1ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "<unknown function> + 0x126850 (0x7f3b6b833850 in /lib/x86_64-linux-gnu/libc.so.6)",
    ]):
        log.raw(f"{pre}frame #{i}: {fr}")
    log.raw(pre)
    log.raw(f"{pre}terminate called after throwing an instance of 'c10::DistBackendError'")
    log.raw(f"{pre}  what():  {pgp} Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work}")


def fatal_signal(log: Log, pre: str, sig: str, pid: int, stack: list[tuple[str, int, str]]) -> None:
    """CPython faulthandler: 'Fatal Python error: Segmentation fault' and the thread stacks."""
    log.raw(f"{pre}*** SIG{'SEGV' if sig == 'Segmentation fault' else 'ABRT'} received at time={int(log.t.timestamp())} on cpu {log.rng.randint(0, 95)} ***")
    log.raw(f"{pre}PC: @     0x7f{log.rng.getrandbits(36):09x}  (unknown)  (unknown)")
    log.raw(f"{pre}Fatal Python error: {sig}")
    log.raw(pre)
    log.raw(f"{pre}Thread 0x00007f{log.rng.getrandbits(28):07x}00 (most recent call first):")
    log.raw(f"{pre}  File \"/usr/lib/python3.10/threading.py\", line 324 in wait")
    log.raw(f"{pre}  File \"/usr/lib/python3.10/threading.py\", line 607 in wait")
    log.raw(f"{pre}  File \"/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py\", line 60 in run")
    log.raw(f"{pre}  File \"/usr/lib/python3.10/threading.py\", line 1016 in _bootstrap_inner")
    log.raw(f"{pre}  File \"/usr/lib/python3.10/threading.py\", line 973 in _bootstrap")
    log.raw(pre)
    log.raw(f"{pre}Current thread 0x00007f{log.rng.getrandbits(28):07x}40 (most recent call first):")
    for path, line, fn in stack:
        log.raw(f"{pre}  File \"{path}\", line {line} in {fn}")
    log.raw(pre)
    log.raw(f"{pre}Extension modules: numpy.core._multiarray_umath, numpy.core._multiarray_tests, numpy.linalg._umath_linalg, torch._C, torch._C._fft, torch._C._linalg, torch._C._nn, torch._C._sparse, torch._C._special, psutil._psutil_linux, psutil._psutil_posix, zmq.backend.cython._zmq, uvloop.loop, msgspec._core, yaml._yaml, sentencepiece._sentencepiece (total: 58)")


def frame_lines(log: Log, pre: str, frames: list[tuple[str, int, str, str]]) -> None:
    """A Python traceback's frames: `  File "PATH", line N, in FN` and its source line (if any)."""
    for path, line, fn, src in frames:
        log.raw(f"{pre}  File \"{path}\", line {line}, in {fn}")
        if src:
            log.raw(f"{pre}    {src}")


def traceback(log: Log, pre: str, frames: list[tuple[str, int, str, str]], final: str, chained: str | None = None) -> None:
    log.raw(f"{pre}Traceback (most recent call last):")
    frame_lines(log, pre, frames)
    for ln in final.split("\n"):
        log.raw(f"{pre}{ln}")
    if chained:
        log.raw(pre)
        log.raw(f"{pre}{chained}")
