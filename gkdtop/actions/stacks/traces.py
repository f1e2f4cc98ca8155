"""Flight Recorder dumps asked for through each rank's trigger pipe (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE`).

torch's watchdog reads the pipe and writes the rank's last collectives to a file; the stacks say
where Python is, these say which collective each rank is in (analysed by actions/collectives.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gkdtop.actions.stacks.model import NcclTrace
from gkdtop.collectors.procs import process_environ

if TYPE_CHECKING:
    from gkdtop.model import ProcInfo

TRACE_PIPE_ENVS = ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_FR_DEBUG_INFO_PIPE_FILE")
TRACE_FILE_ENVS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
TRACE_FILE_DEFAULT = "/tmp/nccl_trace_rank_"


def _open_pipe(pid: int, prefix: str) -> str:
    """The trigger FIFO the process holds open (torch's watchdog opens `<prefix><rank>.pipe` for reading)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return ""
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix) and target.endswith(".pipe"):
            return target
    return ""


def trigger_nccl_traces(procs: Sequence[ProcInfo], wait: float = 5.0) -> list[NcclTrace]:
    """Write to each rank's Flight Recorder FIFO (`<pipe prefix><rank>.pipe`) and wait for its dump file.

    torch's watchdog creates and opens the FIFO (ProcessGroupNCCL's DumpPipe) when the pipe prefix is
    set and the trace buffer is on; the FIFO a process holds open names its rank. Processes without
    the variable are skipped; one without a FIFO (CPU/gloo, no NCCL group yet) gets an entry saying so.
    """
    asked: list[tuple[NcclTrace, int]] = []  # (trace, the dump's mtime before; -1: nothing asked)
    seen: set[str] = set()
    for proc in procs:
        env = process_environ(proc.pid)
        prefix = next((env[k] for k in TRACE_PIPE_ENVS if env.get(k)), "")
        if not prefix:
            continue
        stem = next((env[k] for k in TRACE_FILE_ENVS if env.get(k)), TRACE_FILE_DEFAULT)
        pipe = _open_pipe(proc.pid, prefix)
        rank_text = pipe[len(prefix):-len(".pipe")] if pipe else env.get("RANK", "")
        rank = int(rank_text) if rank_text.isdigit() else None
        trace = NcclTrace(proc.pid, rank, pipe or f"{prefix}<rank>.pipe", f"{stem}{rank if rank is not None else ''}",
                          False)
        if not pipe:
            trace.error = "no trigger pipe (no NCCL process group in this process, e.g. CPU/gloo, or not created yet)"
            asked.append((trace, -1))
            continue
        if pipe in seen:
            continue
        seen.add(pipe)
        try:
            before = os.stat(trace.file).st_mtime_ns
        except OSError:
            before = 0
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody reads it: no watchdog
            try:
                os.write(fd, b"1\n")
            finally:
                os.close(fd)
        except OSError as exc:
            trace.error = f"cannot write the trigger pipe: {exc.strerror or exc} (is the rank's watchdog alive?)"
            asked.append((trace, -1))
            continue
        asked.append((trace, before))
    deadline = time.monotonic() + wait
    for trace, before in asked:
        if before < 0:
            continue
        while True:
            try:
                st = os.stat(trace.file)
                if st.st_mtime_ns != before and st.st_size > 0:
                    trace.ok, trace.bytes = True, st.st_size
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                trace.error = f"no dump at {trace.file} within {wait:g} s"
                break
            time.sleep(0.1)
    return [t for t, _ in asked]
