"""Findings on realistic log excerpts (Ray prefixes, ANSI colour) read through the real follower."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from gkdtop.collectors.logs import LogCollector
from gkdtop.config import ConfigError, load_config
from gkdtop.store import Store
from tests.gkdlog import asctime, ray, startup

E = "\x1b"


def store_after(tmp_path: Path, lines: list[str], config_text: str | None = None) -> Store:
    if config_text is not None:
        (tmp_path / "c.yaml").write_text(config_text)
    config = load_config(tmp_path / "c.yaml" if config_text is not None else None)
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    store = Store(config)
    collector = LogCollector([str(log)], backlog=5000)
    try:
        store.put("logs", collector.collect())
    finally:
        collector.close()
    return store


def only(store: Store, name: str):  # type: ignore[no-untyped-def]
    found = [f for f in store.findings() if f.name == name]
    assert len(found) == 1, [f.name for f in store.findings()]
    return found[0]


CASES = [
    ("nccl-timeout-first-collective",
     [ray("WorkerDict", 311, f"{E}[31m[rank1]:[E1122 10:05:02.301 ProcessGroupNCCL.cpp:616] [Rank 1] "
      "Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
      f"ran for 600031 milliseconds before timing out.{E}[0m")],
     {"seq": "1", "op": "ALLREDUCE", "timeout_ms": "600000", "ran_ms": "600031", "rank": "1"}),
    ("nccl-timeout",
     [ray("WorkerDict", 312, "[rank0]:[E1122 11:00:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum=4711, OpType=BROADCAST, NumelIn=8388608, NumelOut=8388608, "
      "Timeout(ms)=1800000) ran for 1800443 milliseconds before timing out.")],
     {"seq": "4711", "op": "BROADCAST", "rank": "0"}),
    ("nccl-connect-failed",
     [ray("WorkerDict", 313, "node-3:313:900 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
      "10.0.0.12<43215> failed : Software caused connection abort")],
     {"peer": "10.0.0.12", "port": "43215"}),
    ("nccl-duplicate-gpu",  # torch's DistBackendError repeats NCCL's check under `Last error:`
     ["[rank3]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/"
      "ProcessGroupNCCL.cpp:1727, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
      "[rank3]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
      "[rank3]: Last error:",
      "[rank3]: Duplicate GPU detected : rank 3 and rank 0 both on CUDA device 1b000"],
     {"rank": "3", "other": "0", "device": "1b000"}),
    ("ib-completion-error",
     ["node-3:2001:2100 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.9<40811> "
      "with error 12, opcode 32753, len 0, vendor err 129 (Recv)"],
     {"error": "12"}),
    ("cuda-oom",
     [ray("WorkerDict", 2001, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
      "total capacity of 79.10 GiB of which 1.23 GiB is free. Process 2001 has 77.85 GiB memory in use. "
      "Of the allocated memory 70.12 GiB is allocated by PyTorch, and 5.20 GiB is reserved by PyTorch "
      "but unallocated.")],
     {"tried": "2.00 GiB", "gpu": "3", "total": "79.10 GiB", "free": "1.23 GiB", "reserved": "5.20 GiB",
      "holder_pid": "2001", "holder_mem": "77.85 GiB"}),
    ("vllm-kv-cache",
     [ray("WorkerDict", 2003, "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
      "that can be stored in KV cache (20128). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`")],
     {"kv_tokens": "20128"}),
    ("sglang-kv-pool-too-small",  # SGLang's scheduler (newer versions add the fraction it ran with)
     [ray("WorkerDict", 2003, "[2025-06-17 13:21:41 TP0] Scheduler hit an exception: "
          "Traceback (most recent call last):"),
      ray("WorkerDict", 2003, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
          "Current value: mem_fraction_static=0.2")],
     {"mem_fraction_static": "0.2"}),
    ("vllm-wake-up-oom",
     [ray("WorkerDict", 2003, "Traceback (most recent call last):"),
      ray("WorkerDict", 2003, '  File "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py", line 301, in wake_up'),
      ray("WorkerDict", 2003, "    self.inference_engine.wake_up(tags=['kv_cache'])"),
      ray("WorkerDict", 2003, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB.")],
     {}),
    ("engine-dead",
     [ray("WorkerDict", 2003, f"{E}[1;31mERROR{E}[0m 11-22 10:00:01 [core.py:588] EngineCore encountered a fatal "
      "error."),
      ray("WorkerDict", 2003, "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")],
     {"what": "EngineDeadError"}),  # two lines of one incident: one finding, the latest detail
    ("vllm-worker-died",
     ["ERROR 07-09 14:21:27 [multiproc_executor.py:140] Worker proc VllmWorker-2 died unexpectedly, shutting down "
      "executor."],
     {"worker": "VllmWorker-2"}),
    ("vllm-init-failed",
     [ray("WorkerDict", 2003, "ERROR: Failed to initialize vLLM engine: not enough memory")],
     {}),
    ("ray-actor-died",
     [ray("TaskRunner", 9, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
      ray("TaskRunner", 9, "\tclass_name: WorkerDict"),
      ray("TaskRunner", 9, "\tactor_id: 6d2e0d4bbbd7ab1f2a3e8b1c01000000"),
      ray("TaskRunner", 9, "\tpid: 2003"),
      ray("TaskRunner", 9, "\tip: 10.0.0.7"),
      ray("TaskRunner", 9, "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
          "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.")],
     {"actor_class": "WorkerDict", "pid": "2003", "ip": "10.0.0.7", "exit_type": "SYSTEM_ERROR"}),
    ("ray-task-error",
     [ray("TaskRunner", 9, "ray.exceptions.RayTaskError(AssertionError): ray::WorkerDict.actor_rollout_generate() "
      "(pid=2003, ip=10.0.0.7)")],
     {"wrapped": "AssertionError", "task": "WorkerDict.actor_rollout_generate"}),
    ("ray-unschedulable",
     [f"{E}[33m(autoscaler +35s){E}[0m Warning: The following resource request cannot be scheduled right now: "
      "{'CPU': 2.0, 'GPU': 2.0}. This is likely due to all cluster resources being claimed by actors."],
     {"demand": "{'CPU': 2.0, 'GPU': 2.0}"}),
    ("ray-unschedulable",  # Ray 2.60's own wording (seen with `gkdtop demo --fault infeasible`)
     ["(autoscaler +12s) Error: No available node types can fulfill resource request "
      "defaultdict(<class 'float'>, {'GPU': 8.0, 'CPU': 2.0}). Add suitable node types to this cluster."],
     {"infeasible": "{'GPU': 8.0, 'CPU': 2.0}"}),
    ("ray-unschedulable",  # the busy form with a summed (defaultdict) demand
     ["(autoscaler +2m5s) Warning: The following resource request cannot be scheduled right now: "
      "defaultdict(<class 'float'>, {'CPU': 1.0, 'GPU': 8.0}). This is likely due to all cluster resources "
      "being claimed by actors."],
     {"demand": "{'CPU': 1.0, 'GPU': 8.0}"}),
    ("ray-unschedulable-cpu",
     ["(autoscaler +45s) Error: No available node types can fulfill resource request {'CPU': 64.0}. "
      "Add suitable node types to this cluster to resolve this issue."],
     {"infeasible": "{'CPU': 64.0}"}),
    ("nccl-timeout",  # torch >= 2.5: the process group's name and the rank in that group
     [ray("WorkerDict", 39435, "[rank5]:[E0625 01:31:33.708894088 ProcessGroupNCCL.cpp:632] [PG ID 4 PG GUID "
      "21(DATA_PARALLEL_GROUP) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7312, "
      "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600047 milliseconds before timing out."),
      ray("WorkerDict", 39435, "[rank5]:[E0625 01:31:33.709 ProcessGroupNCCL.cpp:2168] [PG ID 4 PG GUID "
      "21(DATA_PARALLEL_GROUP) Rank 1] Timeout at NCCL work: 7312, last enqueued NCCL work: 7312, last completed "
      "NCCL work: 7311.")],
     {"pg_name": "DATA_PARALLEL_GROUP", "pg_rank": "1", "seq": "7312", "op": "ALLREDUCE", "timeout_ms": "600000",
      "global_rank": "5", "last_completed": "7311"}),
    ("nccl-watchdog-cut",
     [ray("WorkerDict", 84286, "[rank2]:[E0625 01:31:33.708894516 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
      "0(default_pg) Rank 2] Watchdog caught collective operation timeout: WorkN")],
     {}),
    ("flight-recorder-disabled",
     [ray("WorkerDict", 2001, "[rank0]:[E1218 20:27:21.4 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) "
      "Rank 0] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. "
      "You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.")],
     {}),
    ("nccl-heartbeat-stuck",
     [ray("WorkerDict", 2001, "[rank0]:[F1218 20:35:21.4 ProcessGroupNCCL.cpp:1300] [PG ID 0 PG GUID 0(default_pg) "
      "Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring "
      "enqueued collectives.")],
     {"stuck_s": "480"}),
    ("nccl-heartbeat-stuck",  # newer torch: no seconds, the monitor's own words
     ["[2]:E0423 02:10:44.184026  8352 ProcessGroupNCCL.cpp:1329] [PG 0 (default_pg) Rank 2] Heartbeat monitor timed "
      "out! Process will be terminated after dumping debug info. workMetaList_.size()=0"],
     {}),
    ("nccl-socket-bad-interface",
     [ray("WorkerDict", 71822, "gpu-node-194:71822:72133 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
      "Connect to 169.254.3.1<42391> failed : Software caused connection abort")],
     {"peer": "169.254.3.1", "port": "42391", "reason": "Software caused connection abort"}),
    ("nccl-bootstrap-interface",
     [ray("WorkerDict", 37477, "gpu-node-645:37477:37477 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>")],
     {"iface": "docker0", "addr": "172.17.0.1"}),
    ("nccl-dist-backend-error",
     [ray("WorkerDict", 38012, "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
      "c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version "
      "2.21.5"),
      ray("WorkerDict", 38012, "ncclUnhandledCudaError: Call to CUDA function failed.")],
     {"reason": "unhandled cuda error", "nccl_error": "ncclUnhandledCudaError"}),
    ("no-cpu-backend",
     ["RuntimeError: No backend type associated with device type cpu"],
     {"device": "cpu"}),
    ("hydra-override-error",
     ["Could not override 'actor_rollout_ref.rollout.gpu_mem_util'.",
      "To append to your config use +actor_rollout_ref.rollout.gpu_mem_util=0.6",
      "Key 'gpu_mem_util' is not in struct",
      "    full_key: actor_rollout_ref.rollout.gpu_mem_util"],
     {"key": "actor_rollout_ref.rollout.gpu_mem_util", "append": "+actor_rollout_ref.rollout.gpu_mem_util=0.6",
      "full_key": "actor_rollout_ref.rollout.gpu_mem_util"}),
    ("fatal-signal",
     ["Fatal Python error: Segmentation fault"],
     {"what": "Segmentation fault"}),
    ("map-worker-died",
     ["RuntimeError: One of the subprocesses has abruptly died during map operation.To debug the error, disable "
      "multiprocessing."],
     {}),
    ("cuda-library-symbol",
     ["(WorkerDict pid=70211) Invalid handle. Cannot load symbol cublasLtGetVersion"],
     {"symbol": "cublasLtGetVersion"}),
    ("killed-sigkill",
     ["  traceback : Signal 9 (SIGKILL) received by PID 475677"],
     {"pid": "475677"}),
    ("thread-limit",  # a gloo group made in a worker's __init__, past the pids limit
     ["(WorkerDict pid=18748) RuntimeError: Resource temporarily unavailable"],
     {}),
    ("thread-limit",
     ["OpenBLAS blas_thread_init: pthread_create failed for thread 17 of 64: Resource temporarily unavailable"],
     {}),
    ("killed-sigkill",  # Ray's memory monitor, where only the caller's error reached the log
     ["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."],
     {}),
    ("slurm-cancelled",
     ["slurmstepd: error: *** STEP 40217.0 ON gpu-a12 CANCELLED AT 2026-03-02T04:00:17 DUE TO PREEMPTION ***"],
     {"what": "STEP", "id": "40217.0", "node": "gpu-a12", "reason": "PREEMPTION"}),
    ("ray-job-failed",
     ["Job 'raysubmit_Xk2pQ9vLm4TnR8wa' failed"],
     {"job": "raysubmit_Xk2pQ9vLm4TnR8wa"}),
    ("ray-unhandled-error",  # an actor call's error nobody ray.get()s: not the job failing
     [ray("TaskRunner", 5120, "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
          "ray::RolloutServer.wake_up() (pid=6021, ip=10.2.3.4, actor_id=aa11bb22cc33dd44ee55ff6601000000)")],
     {"task": "RolloutServer.wake_up", "pid": "6021"}),
    ("nccl-watchdog-abort",
     ["[rank1]:[E0311 08:14:02.551 ProcessGroupNCCL.cpp:630] [Rank 1] To avoid data inconsistency, we are taking "
      "the entire process down."],
     {}),
    ("ray-node-died",
     ["(raylet) [2025-06-16 15:35:08,585 E 1500 1500] (raylet) The node with node id: 3c4d5e6f and address: "
      "10.121.225.12 and node name: 10.121.225.12 has been marked dead because the detector has missed too many "
      "heartbeats from it."],
     {"node_id": "3c4d5e6f", "address": "10.121.225.12"}),
    ("nccl-connect-failed",  # NCCL >= 2.19 wording
     ["gpu-b2:318:318 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.8.1.21<50433> returned "
      "113(No route to host) errno 115(Operation now in progress)"],
     {"peer": "10.8.1.21", "port": "50433", "errno": "113", "reason": "No route to host"}),
    ("nccl-connect-failed",  # NCCL 2.10's `Net :` wording (the field named as in the other wordings)
     ["ws-3:1107:1139 [0] include/socket.h:409 NCCL WARN Net : Connect to 192.168.20.4<41209> failed : No route to "
      "host"],
     {"peer": "192.168.20.4", "port": "41209", "reason": "No route to host"}),
    ("nccl-bootstrap-interface",  # NCCL lists every interface it found: a Docker bridge among them
     ["dgx-a:61220:61388 [0] NCCL INFO NET/Socket : Using [0]bond0:192.168.7.31<0> [1]br-2f1a9c0d7e63:172.18.0.1<0> "
      "[2]br-7b04e1d9a2c5:172.22.0.1<0>"],
     {"iface": "br-2f1a9c0d7e63", "addr": "172.18.0.1"}),
    ("faulthandler-timeout",  # faulthandler.dump_traceback_later's own dump: its first frame is where it waits
     ["Timeout (0:05:00)!", "Thread 0x00007f5a2e1f7740 (most recent call first):",
      '  File "/opt/ds/deepspeed/runtime/engine.py", line 1463 in _checkpoint_tag_validation',
      '  File "/opt/ds/deepspeed/runtime/engine.py", line 1496 in save_checkpoint'],
     {"after": "0:05:00", "func": "_checkpoint_tag_validation", "line": "1463"}),
    ("no-progress-watchdog",  # a training script's own watchdog, before it exits
     ["R1 STEP0 route=0 -> step_begin", "HEARTBEAT rank=1 step=0 phase=step_begin t=60s",
      "WATCHDOG: no progress for 60s in phase=step_begin (rank=0), exiting"],
     {"after": "60"}),
    ("ray-worker-died",
     ["(raylet) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the "
      "problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff7c1b0e9d8f2a3c4b5d6e7f8001000000 "
      "Worker ID: 3e4d5c6b7a8f9e0d Node ID: 8a7b6c5d4e3f2a1b Worker IP address: 10.3.8.44 Worker port: 10117 Worker "
      "PID: 12655 Worker exit type: SYSTEM_ERROR"],
     {"pid": "12655", "worker_id": "3e4d5c6b7a8f9e0d", "ip": "10.3.8.44"}),
    ("sglang-prefill-oom",
     ["[2026-03-01 10:02:11 TP0] Scheduler hit an exception: Traceback (most recent call last):",
      "RuntimeError: Prefill out of memory. Try to lower your batch size.",
      "Try to allocate 6144 tokens."],
     {"what": "Prefill out of memory", "tokens": "6144"}),
    ("c10d-store-timeout",
     ["[rank3]:[W301 10:02:11.482113906 socket.cpp:755] [c10d] The client socket has timed out after 600000ms "
      "while trying to connect to (10.0.0.7, 29500)."],
     {"after": "600000", "unit": "ms", "host": "10.0.0.7", "port": "29500"}),
    ("c10d-store-timeout",
     ["torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 3/4 clients joined."],
     {}),
    ("cuda-illegal-memory-access",
     [ray("WorkerDict", 4242, "RuntimeError: CUDA error: an illegal memory access was encountered")],
     {"what": "an illegal memory access was encountered"}),
    ("process-group-not-destroyed",
     ["[rank0]:[W301 10:02:11.841273251 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was "
      "not called before program exit, which can leak resources. For more info, please see the docs (function "
      "operator())"],
     {"what": "destroy_process_group() was not called before program exit"}),
    ("ray-raylet-died",  # the log monitor's line for a node's raylet, its last lines after it
     ["(raylet, ip=10.4.4.2) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL "
      "by the user or system OOM killer, (2) Invalid memory access from Raylet causing SIGSEGV or SIGBUS, (3) Other "
      "termination signals. Last 20 lines of the Raylet logs:",
      "    [2026-02-11 04:10:55,118 C 7310 7402] worker_pool.cc:512: Unhandled exception: epoll: Too many open files"],
     {"raylet": "Raylet is terminated"}),
    ("ray-raylet-died",  # a worker that lost the GCS past Ray's reconnect timeout
     [ray("WorkerDict", 7411, "[2026-02-11 04:11:58,604 E 7411 7499] gcs_rpc_client.h:179: Failed to connect to GCS "
          "within 60 seconds. GCS may have been killed. It's either GCS is terminated by `ray stop` or is killed "
          "unexpectedly. The program will terminate.")],
     {"gcs": "Failed to connect to GCS", "after": "60"}),
    ("ray-node-died",  # Ray 2.4x wording, in a RayActorError's tab-indented fields
     ["ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
      "\tclass_name: WorkerDict",
      "\tactor_id: 9c1f0e2a7b3d4c5e6f708192a3b4c5d6e7f80910",
      "\tpid: 4242",
      "The actor is dead because its node has died. Node Id: 5e6f7a8b"],
     {}),
    ("ib-async-error",  # the adapter's own fault, NCCL 2.4 wording behind mpirun's --tag-output
     ["2019-07-14T03:53:09.334Z: [1,9]<stdout>:job-2:2204:2251 [1] transport/net_ib.cu:80 NCCL WARN NET/IB : Got "
      "async event : local catastrophic error"],
     {"event": "local catastrophic error"}),
    ("ib-completion-error",  # the mlx5 driver's own line
     ["mlx5: node-4: got completion with error:"],
     {}),
    ("vllm-no-generation-progress",  # shown from its third interval (min_count): one is a request's prefill
     [ray("vLLMHttpServer", 50000, f"INFO 06-09 10:5{i}:54 [loggers.py:118] Engine 000: Avg prompt throughput: "
      "588.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 6 reqs, Waiting: 0 reqs, GPU KV cache "
      "usage: 12.1%, Prefix cache hit rate: 0.0%") for i in range(3)],
     {"running": "6"}),
    ("vllm-requests-not-scheduled",  # V0's stats: its queue grows, nothing runs (audit 13's chunked-prefill stall)
     [f"INFO 09-18 16:1{i}:03 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
      f"tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: {22 + 2 * i} reqs, GPU KV cache usage: 0.0%, CPU KV "
      "cache usage: 0.0%." for i in range(3)],
     {"waiting": "26"}),
    ("server-read-timeout",  # OpenRLHF's remote reward model (lmm-r1, audit 13): each try, then repeated
     [ray("remote_rm_fn_ray", 25791, "INFO 03-21 11:38:02 remote_rm_utils.py:24] Request error, please check: "
          "HTTPConnectionPool(host='127.0.0.1', port=5000): Read timed out. (read timeout=180)" + more)
      for more in ("", " [repeated 3x across cluster]")],
     {"host": "127.0.0.1", "port": "5000", "timeout_s": "180"}),
    ("ib-completion-error",  # NCCL 2.19-2.2x wording
     [ray("WorkerDict", 67107, "gpu-node-743:67107:68084 [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
      "completion from peer 10.158.182.11<52411> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid "
      "::ffff:10.22.31.12 remoteGids::ffff:10.158.182.11 hca mlx5_2")],
     {"peer": "10.158.182.11", "status": "12"}),
    ("ib-completion-error",  # NCCL >= 2.27 wording
     ["[2026-03-03 12:11:38] node-2:88:99 [3] transport/net_ib.cc:2310 NCCL WARN NET/IB: Got completion from peer "
      "10.0.0.5<33092> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_3"],
     {"peer": "10.0.0.5", "status": "IBV_WC_RETRY_EXC_ERR", "status_code": "12"}),
    ("vllm-kv-cache",  # vLLM V1 wording
     [ray("vLLMHttpServer", 50007, "ValueError: To serve at least one request with the models's max seq len "
      "(32768), (28.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.84 GiB). "
      "Based on the available memory, the estimated maximum model length is 11520. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")],
     {"max_seq_len": "32768", "needed": "28.00 GiB", "available": "9.84 GiB", "max_model_len": "11520"}),
    ("vllm-wake-up-oom",  # what vLLM's cumem allocator prints: no 'CUDA out of memory', the frames say it
     [ray("WorkerDict", 2003, "Traceback (most recent call last):"),
      ray("WorkerDict", 2003, '  File "/usr/local/lib/python3.10/dist-packages/vllm/executor/executor_base.py", '
          "line 208, in wake_up"),
      ray("WorkerDict", 2003, '    self.collective_rpc("wake_up", kwargs=dict(tags=tags))'),
      ray("WorkerDict", 2003, '  File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", '
          "line 75, in create_and_map"),
      ray("WorkerDict", 2003, "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62")],
     {"oom": "CUDA Error: out of memory", "frame": "create_and_map"}),
    ("dapo-max-gen-batches",
     [ray("TaskRunner", 9, "ValueError: num_gen_batches=6 >= max_num_gen_batches=6. Generated too many. Please check "
          "your data.")],
     {"num": "6", "max": "6"}),
    ("vllm-cumem-oom",  # the allocator's own line, no traceback: a dying worker's last words above its death report
     [ray("WorkerDict", 2004, "CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:58")],
     {}),
    ("trl-vllm-server-unreachable",
     ["ConnectionError: The vLLM server can't be reached at 10.0.4.9:8000 after 240 seconds. Make sure the server "
      "is running by running `trl vllm-serve`."],
     {"url": "10.0.4.9:8000", "timeout_s": "240"}),
    ("server-unreachable",
     [ray("remote_rm_fn_ray", 92261, "INFO 03-11 19:53:40 remote_rm_utils.py:24] Request error, please check: "
          "HTTPConnectionPool(host='10.0.3.7', port=5000): Max retries exceeded with url: /get_reward (Caused by "
          "NewConnectionError('Failed to establish a new connection: [Errno 111] Connection refused'))")] * 2,
     {"host": "10.0.3.7", "port": "5000", "url": "/get_reward"}),
    ("ray-worker-register-slow",
     ["[2026-01-11 10:00:00,000 W 4100 4100] (raylet) worker_pool.cc:581: Some workers of the worker process(2010) "
      "have not registered within the timeout. The process is still alive, probably it's hanging during start."],
     {"worker_pid": "2010"}),
    ("nan-loss",
     [ray("TaskRunner", 9, "step:57 - timing_s/gen:12.1 - actor/pg_loss:nan - actor/kl_loss:0.12 - actor/lr:1e-06")],
     {"step": "57", "metric": "actor/pg_loss", "value": "nan"}),
    ("rollouts-per-episode-zero",
     [ray("TaskRunner", 9, "    assert num_rollouts_per_episodes > 0, f'num_rollouts_per_episodes={num}'"),
      ray("TaskRunner", 9, "AssertionError: num_rollouts_per_episodes=0")],
     {"assertion": "AssertionError: num_rollouts_per_episodes=0"}),
    ("triton-compile-failed",
     [ray("WorkerDict", 2001, "triton.compiler.errors.CompilationError: at 12:8:")],
     {}),
    ("hf-datasets-lock",
     [ray("TaskRunner", 9, "Attempting to acquire lock 139 on /root/.cache/huggingface/datasets/_root_data.lock")],
     {}),
    ("hf-resume-data-skip",  # HF Trainer's banner on a resumed run (LLaMA-Factory, TRL), then a bar stuck at 0
     ["[INFO|trainer.py:1789] 2024-01-11 14:08:02,652 >>   Continuing training from checkpoint, will skip to saved "
      "global_step",
      "[INFO|trainer.py:1791] 2024-01-11 14:08:02,652 >>   Continuing training from global step 6400",
      "  0%|          | 0/20000 [00:00<?, ?it/s]"],
     {"global_step": "6400"}),
    ("zero-training-steps",  # sd-scripts counting zero epochs (a launcher passed 0), then saving at once
     ["  num epochs / epoch数: 0", "  total optimization steps / 学習ステップ数: 0", "steps: 0it [00:00, ?it/s]"],
     {"said": "total optimization steps / 学習ステップ数: 0"}),
]


@pytest.mark.parametrize(("name", "lines", "fields"), CASES, ids=[c[0] for c in CASES])
def test_every_signature_on_a_realistic_excerpt(tmp_path: Path, name: str, lines: list[str],
                                                fields: dict[str, str]) -> None:
    found = only(store_after(tmp_path, lines), name)
    if name == "vllm-wake-up-oom":
        assert found.fields["oom"] in ("CUDA out of memory", "OutOfMemoryError", "CUDA Error: out of memory")
    for key, value in fields.items():
        assert found.fields.get(key) == value, (key, found.fields)
    assert found.cause and found.fix
    # engine-dead's two wordings count twice; the wake_up frame and its collective_rpc are one traceback: once.
    assert found.count == {"engine-dead": 2, "vllm-no-generation-progress": 3, "server-unreachable": 2,
                           "vllm-requests-not-scheduled": 3, "server-read-timeout": 2}.get(name, 1)


def test_every_builtin_signature_has_a_case() -> None:
    from gkdtop.analysis.rules import builtin_signatures

    assert {s.name for s in builtin_signatures()} == {c[0] for c in CASES}


@pytest.mark.parametrize("line", [
    "INFO watchdog thread started for ProcessGroupNCCL",                      # no timeout
    "step:5 - actor/pg_loss:0.123 - actor/kl_loss:0.456",                      # finite loss
    "step:5 - actor/entropy:nan",                                              # nan, but not a loss
    "Tried to allocate buffers for the CUDA graph pool",                       # not an OOM
    "The following resource request was scheduled: {'GPU': 1.0}",              # scheduled
    "wake_up finished in 1.2s",                                                # wake_up without an OOM after it
    "[ACTOR] ✓ Model built in 12.0s",
    # SGLang retracting requests goes on (INFO): not its scheduler dying of an OOM.
    "[2026-03-01 10:02:11 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.6 -> 0.9",
    "Setting up process group for: env:// [rank=0, world_size=8]",             # a rendezvous that is starting
    "[rank0]:[W301 10:02:11.1 ProcessGroupNCCL.cpp:1479] destroy_process_group was called",
    "node-1:7:9 [0] transport/net_ib.cc:98 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change",  # benign
    "node-1:7:9 [0] NCCL INFO comm 0x5581 rank 1 nranks 2 cudaDev 1 busId 1b000 - Init COMPLETE",  # one GPU per rank
    # an idle engine: nothing waits
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 0.0%",
])
def test_near_misses_find_nothing(tmp_path: Path, line: str) -> None:
    assert store_after(tmp_path, [ray("WorkerDict", 1, line)]).findings() == []


def test_nccl_timeout_fix_corrects_the_playbook(tmp_path: Path) -> None:
    found = only(store_after(tmp_path, [CASES[0][1][0]]), "nccl-timeout-first-collective")
    assert "NCCL_TIMEOUT is read by nothing" in found.fix


def test_a_flood_of_one_warning_is_one_finding_with_a_count(tmp_path: Path) -> None:
    t0 = time.time() - 3600
    warning = ("{t} WARNING (autoscaler +{n}s) Warning: The following resource request cannot be scheduled right now: "
               "{{'GPU': 8.0}}. This is likely due to all cluster resources being claimed by actors.")
    lines = [warning.format(t=asctime(t0 + 35 * i), n=35 * i) for i in range(100)]
    store = store_after(tmp_path, lines)
    found = only(store, "ray-unschedulable")
    assert found.count == 100
    assert found.last_seen - found.first_seen == pytest.approx(35 * 99, abs=1)


def test_one_stats_interval_of_prefill_is_no_stuck_generation(tmp_path: Path) -> None:
    """A request arriving: one interval's stats say prompt tokens and no generated ones. Before, that one line
    said 'generation is stuck'; a stuck engine prints it every interval, so three are needed (min_count)."""
    line = ("INFO 11-28 02:27:2{i} metrics.py:341] Avg prompt throughput: 5120.0 tokens/s, Avg generation throughput: "
            "0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 4.1%")
    assert not [f for f in store_after(tmp_path, [line.format(i=0)]).findings()
                if f.name == "vllm-no-generation-progress"]
    assert only(store_after(tmp_path, [line.format(i=i) for i in range(3)]), "vllm-no-generation-progress").count == 3
    (tmp_path / "c.yaml").write_text("findings:\n  - name: x\n    match: 'y'\n    min_count: 0\n")
    with pytest.raises(ConfigError, match=r"c.yaml:4: findings\[0\].min_count: expected a whole number from 1"):
        load_config(tmp_path / "c.yaml")


def test_an_abort_after_a_cuda_error_speaks_of_no_timeout(tmp_path: Path) -> None:
    """SGLang's scheduler aborted after an illegal memory access. The fatal-signal finding's cause listed 'NCCL taking
    the process down after a collective timed out' among SIGABRT's reasons: a timeout the log never showed (a blind
    corpus log counted it as a false statement). The watchdog's own finding speaks of timeouts where there is one."""
    lines = ["[2026-03-22 14:03:51 DP12 TP0] RuntimeError: CUDA error: an illegal memory access was encountered",
             "Fatal Python error: Aborted"]
    found = only(store_after(tmp_path, lines), "fatal-signal")
    assert "timed out" not in found.cause and "timed out" not in found.fix, found.cause


def test_stalled_while_unschedulable_says_waiting_for_resources(tmp_path: Path) -> None:
    lines, _last = startup(time.time() - 900, upto="dataset")
    lines = [*lines[:2], ray("TaskRunner", 9, f"{asctime(time.time() - 800)} INFO Creating ResourcePool..."),
             "Warning: The following resource request cannot be scheduled right now: {'GPU': 2.0}."]
    store = store_after(tmp_path, lines)
    status = store.phase_status()
    assert status.state == "stalled" and status.current == "resource pool"
    assert status.hint is not None
    assert status.hint.causes[0] == "waiting for resources: {'GPU': 2.0} cannot be scheduled"


def test_user_signature_from_config(tmp_path: Path) -> None:
    config = ("findings:\n"
              "  - name: my-shard-missing\n"
              "    severity: warning\n"
              "    match: 'shard (?P<shard>\\d+) not found'\n"
              "    cause: the data export skipped a shard\n"
              "    fix: re-run the export\n")
    store = store_after(tmp_path, [ray("TaskRunner", 9, "ERROR shard 17 not found in /data/train")], config)
    found = only(store, "my-shard-missing")
    assert found.fields == {"shard": "17"} and found.severity == "warning"


def test_bad_user_signature_is_a_one_line_config_error(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("findings:\n  - name: x\n    match: '(broken'\n")
    with pytest.raises(ConfigError, match=r"c.yaml:3: findings\[0\].match: invalid regular expression"):
        load_config(tmp_path / "c.yaml")


def test_catalogue_is_documented() -> None:
    from gkdtop.analysis.rules import builtin_signatures

    doc = (Path(__file__).resolve().parents[1] / "docs" / "findings.md").read_text()
    for sig in builtin_signatures():
        assert f"## {sig.name} (" in doc
        assert sig.fix in doc


# --- one incident, one finding (the posted logs' shapes, invented values) ---------------------------------------

def _watchdog(rank: int, seq: int, ran: int, pg: str = "") -> str:
    return (f"[E ProcessGroupNCCL.cpp:828] {pg}[Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)=600000) ran for {ran} milliseconds before "
            "timing out.")


def timeouts(store: Store) -> list:  # type: ignore[type-arg]
    return [f for f in store.findings() if f.name.startswith("nccl-timeout")]


def test_distinct_collectives_of_one_rank_are_distinct_findings(tmp_path: Path) -> None:
    """Three works of rank 0 (different groups' SeqNums) timed out: three findings, each with its own SeqNum; the
    C++ terminate handler's `what():` restating the first is that incident again, not a fourth."""
    lines = [_watchdog(0, 57, 603001), _watchdog(0, 913, 603122), _watchdog(0, 2020, 603140),
             "[E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down.",
             "terminate called after throwing an instance of 'std::runtime_error'",
             "  what():  " + _watchdog(0, 57, 603001).split("] ", 1)[1]]
    found = timeouts(store_after(tmp_path, lines))
    assert sorted((f.fields["seq"], f.count) for f in found) == [("2020", 1), ("57", 1), ("913", 1)]
    assert {f.name for f in found} == {"nccl-timeout"}


def test_one_crash_reported_three_ways_is_one_incident(tmp_path: Path) -> None:
    """abseil's handler prints `*** SIGSEGV received`, Ray's logger prints it again and Python's faulthandler says
    `Fatal Python error: Segmentation fault`: one crash (before: `fatal-signal x3`). A crash a minute later is
    another."""
    crash = ["(WorkerDict pid=3310) INFO 06-21 03:14:57 [metrics.py:455] Avg generation throughput: 1688.0 tokens/s",
             "*** SIGSEGV received at time=1750475699 on cpu 41 ***",
             "PC: @     0x7f2a11c3d4e5  (unknown)  ncclProxyProgress()",
             "[2025-06-21 03:14:59,412 E 3311 3377] logging.cc:447: *** SIGSEGV received at time=1750475699 on "
             "cpu 41 ***",
             "Fatal Python error: Segmentation fault"]
    found = only(store_after(tmp_path, crash), "fatal-signal")
    assert found.count == 1 and found.fields == {"signal": "SIGSEGV", "what": "Segmentation fault"}
    later = ["[2025-06-21 03:16:02,031 E 3412 3413] logging.cc:447: *** SIGSEGV received at time=1750475762 on "
             "cpu 3 ***"]
    assert only(store_after(tmp_path, crash + later), "fatal-signal").count == 2
    # One actor's three reports behind its Ray prefix, the first unstamped (it takes a stamp from 24 s before): one.
    actor = ["2025-04-30 11:02:14,551\tINFO worker.py:1832 -- Started a local Ray instance.",
             "(WorkerDict pid=20977) *** SIGSEGV received at time=1746010958 on cpu 17 ***",
             "(WorkerDict pid=20977) [2025-04-30 11:02:38,771 E 20977 20977] logging.cc:440: *** SIGSEGV received at "
             "time=1746010958 on cpu 17 ***",
             "(WorkerDict pid=20977) Fatal Python error: Segmentation fault"]
    assert only(store_after(tmp_path, actor), "fatal-signal").count == 1


def test_a_record_takes_no_field_from_another_ranks_lines(tmp_path: Path) -> None:
    """Rank 4's and rank 11's watchdog lines interleave (Ray prefixes, torch 2.5 PG tags): each record keeps its
    own rank, PG rank and last completed work."""
    pg = "[PG ID 3 PG GUID 17 Rank {r}] "
    lines = [
        ray("WorkerDict", 701, "[rank4]:[E0311 08:14:02.1 ProcessGroupNCCL.cpp:632] " + pg.format(r=4)
            + "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3301, OpType=ALLREDUCE, NumelIn=4, "
            "NumelOut=4, Timeout(ms)=600000) ran for 600120 milliseconds before timing out."),
        ray("WorkerDict", 701, "[rank4]:[E0311 08:14:02.2 ProcessGroupNCCL.cpp:2271] " + pg.format(r=4)
            + " failure detected by watchdog at work sequence id: 3301 PG status: last enqueued work: 3301, last "
            "completed work: 3300"),
        ray("WorkerDict", 702, "[rank11]:[E0311 08:14:02.3 ProcessGroupNCCL.cpp:632] " + pg.format(r=11)
            + "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3301, OpType=ALLREDUCE, NumelIn=4, "
            "NumelOut=4, Timeout(ms)=600000) ran for 600175 milliseconds before timing out."),
        ray("WorkerDict", 701, "[rank4]:[E0311 08:14:03.1 ProcessGroupNCCL.cpp:684] [Rank 4] Some NCCL operations "
            "have failed or timed out."),
        # no Ray prefix: torch's own [rankN]: tag says it is rank 4's, not rank 11's
        "[rank4]:[E0311 08:14:03.2 ProcessGroupNCCL.cpp:684] [Rank 4] Some NCCL operations have failed.",
    ]
    by_rank = {f.fields["global_rank"]: f for f in timeouts(store_after(tmp_path, lines))}
    assert set(by_rank) == {"4", "11"}
    assert by_rank["4"].fields["pg_rank"] == "4" and by_rank["4"].fields["rank"] == "4"
    assert by_rank["4"].fields["last_completed"] == "3300"
    assert by_rank["11"].fields["pg_rank"] == "11"
    assert "rank" not in by_rank["11"].fields and "last_completed" not in by_rank["11"].fields
    assert all(f.count == 1 for f in by_rank.values())


def test_the_process_group_of_older_torch_comes_from_the_next_line(tmp_path: Path) -> None:
    """torch 2.3-2.4 tag the detail line `[PG 2 Rank 0]`, not the watchdog line: the record names the group, and the
    same SeqNum of another group is another finding."""
    lines = ["[rank0]:[E0311 08:14:02.1 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
             "600031 milliseconds before timing out.",
             "[rank0]:[E0311 08:14:02.2 ProcessGroupNCCL.cpp:1709] [PG 2 Rank 0] Timeout at NCCL work: 88, last "
             "enqueued NCCL work: 88, last completed NCCL work: 87.",
             "[rank0]:[E0311 08:14:02.3 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation "
             "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
             "600044 milliseconds before timing out.",
             "[rank0]:[E0311 08:14:02.4 ProcessGroupNCCL.cpp:1709] [PG 0 (default_pg) Rank 0] Timeout at NCCL work: "
             "88, last enqueued NCCL work: 88, last completed NCCL work: 87."]
    found = timeouts(store_after(tmp_path, lines))
    assert sorted(f.fields.get("pg_id", "") for f in found) == ["0", "2"]
    assert [f.fields.get("pg_name") for f in found if f.fields["pg_id"] == "0"] == ["default_pg"]


def test_frames_of_one_traceback_are_one_incident(tmp_path: Path) -> None:
    """Every frame of a wake-up traceback names wake_up; the traceback has one OOM: one incident. Another
    process's own OOM in wake_up is a second."""
    def traceback(pid: int) -> list[str]:
        return [ray("WorkerDict", pid, "Traceback (most recent call last):"),
                ray("WorkerDict", pid, '  File "/opt/app/rollout.py", line 88, in wake_up'),
                ray("WorkerDict", pid, "    self.llm.wake_up()"),
                ray("WorkerDict", pid, '  File "/opt/venv/vllm/entrypoints/llm.py", line 1402, in wake_up'),
                ray("WorkerDict", pid, '    self.llm_engine.wake_up(tags)'),
                ray("WorkerDict", pid, '  File "/opt/venv/vllm/executor/executor_base.py", line 208, in wake_up'),
                ray("WorkerDict", pid, '    self.collective_rpc("wake_up", kwargs=dict(tags=tags))'),
                ray("WorkerDict", pid, '  File "/opt/venv/vllm/device_allocator/cumem.py", line 75, in '
                    "create_and_map"),
                ray("WorkerDict", pid, "RuntimeError: CUDA Error: out of memory at /src/csrc/cumem_allocator.cpp:62")]
    assert only(store_after(tmp_path, traceback(4410)), "vllm-wake-up-oom").count == 1
    assert only(store_after(tmp_path, traceback(4410) + traceback(4411)), "vllm-wake-up-oom").count == 2


def test_a_vaguer_report_of_a_named_incident_is_no_second_finding(tmp_path: Path) -> None:
    """The node's own line names it; `The actor died because its node has died` and a second ActorDiedError whose
    details the log does not show are the same things again: no empty `{}` findings beside them."""
    lines = ["2025-02-03 04:05:06,789\tWARNING worker.py:2037 -- The node with node id: 0a1b2c3d and address: "
             "10.9.8.7 and node name: 10.9.8.7 has been marked dead because the detector has missed too many "
             "heartbeats from it.",
             "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
             "\tclass_name: make_group.<locals>.ShardWorker",
             "\tpid: 3131",
             "The actor died because its node has died. Node Id: 0a1b2c3d",
             "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    store = store_after(tmp_path, lines)
    assert only(store, "ray-node-died").fields["address"] == "10.9.8.7"
    actor = only(store, "ray-actor-died")
    assert actor.fields["actor_class"] == "ShardWorker" and actor.fields["pid"] == "3131"


def test_the_timeout_names_say_only_what_the_line_shows(tmp_path: Path) -> None:
    """SeqNum=1: the first collective; any later one (SeqNum=2 is a set-up barrier as often as a step's collective)
    is `nccl-timeout`, whose text claims no training was under way; its fix compares ranks only within one group."""
    first = only(store_after(tmp_path, [_watchdog(2, 1, 600012)]), "nccl-timeout-first-collective")
    later = only(store_after(tmp_path, [_watchdog(2, 2, 600012)]), "nccl-timeout")
    assert first.fields["seq"] == "1" and later.fields["seq"] == "2"
    for word in ("mid-run", "training", "step"):
        assert word not in later.cause.lower()
    assert "one process group" in later.fix and "same SeqNum" in later.fix
    assert "the one behind is it" not in later.fix


def test_a_watchdog_abort_is_named_as_the_timeouts_consequence(tmp_path: Path) -> None:
    """The watchdog taking the process down, then SIGABRT: a finding saying it is the timeout's consequence, and
    the signal's advice does not treat the abort as a CUDA crash first."""
    lines = [_watchdog(3, 4410, 1800207),
             "[E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the entire process down.",
             "terminate called after throwing an instance of 'c10::DistBackendError'",
             "  what():  " + _watchdog(3, 4410, 1800207).split("] ", 1)[1],
             "*** SIGABRT received at time=1741000000 on cpu 12 ***",
             "Fatal Python error: Aborted"]
    store = store_after(tmp_path, lines)
    abort = only(store, "nccl-watchdog-abort")
    assert "consequence" in abort.cause and "CUDA_LAUNCH_BLOCKING" not in abort.fix
    signal = only(store, "fatal-signal")
    assert "in native code" not in signal.cause.split("SIGSEGV")[0]  # SIGABRT is not said to be a native crash
    assert signal.fix.index("timeout") < signal.fix.index("CUDA_LAUNCH_BLOCKING")
    assert only(store, "nccl-timeout").count == 1


VERL_KEYS = re.compile(r"\b(?:actor_rollout_ref\.[\w.]+|trainer\.\w+|nccl_timeout|response_length|"
                       r"tensor_model_parallel_size)\b")


def test_fixes_name_other_stacks_keys_only_as_such() -> None:
    """Findings show on any stack: a verl config key appears only after 'verl' (`verl: nccl_timeout`), and no
    built-in cause or fix assumes an RL rollout engine or worker."""
    from gkdtop.analysis.rules import builtin_signatures

    for sig in builtin_signatures():
        for text in (sig.cause, sig.fix):
            for m in VERL_KEYS.finditer(text):
                assert "verl" in text[max(0, m.start() - 60):m.start()], (sig.name, m.group())
            assert "rollout engine" not in text and "rollout worker" not in text, sig.name


def test_a_store_wait_later_in_a_run_is_not_called_a_rendezvous(tmp_path: Path) -> None:
    """A store-based barrier that times out hours in says so; the rendezvous reading stays for a connect."""
    found = only(store_after(tmp_path, ["torch.distributed.DistStoreError: wait timeout after 300000ms, keys: "
                                        "/barrier/0/8812"]), "c10d-store-timeout")
    assert "later in a run" in found.cause and "barrier" in found.cause
    assert "peer that did not arrive" in found.fix


def test_a_fix_names_a_framework_s_option_only_on_that_framework_s_log(tmp_path: Path) -> None:
    """vLLM's KV cache too small, in a plain vLLM script and in a verl run. Before: the fix named verl's and
    OpenRLHF's option keys on every log (issue 25: a hint never names a framework the log is not)."""
    oom = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
           "in KV cache (20128). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`")
    plain = only(store_after(tmp_path, [oom]), "vllm-kv-cache").fix
    assert "gpu_memory_utilization" in plain and "verl" not in plain and "OpenRLHF" not in plain
    verl = [ray("TaskRunner", 7, "TaskRunner hostname: gpu-node-7, PID: 7"), ray("WorkerDict", 2003, oom)]
    fix = only(store_after(tmp_path, verl), "vllm-kv-cache").fix
    assert fix.endswith("verl: actor_rollout_ref.rollout.gpu_memory_utilization.") and "OpenRLHF" not in fix
    # A user's signature may say the same; a fix_for that is not a mapping is a one-line error.
    store = store_after(tmp_path, ["shard 3 not found", ray("TaskRunner", 7, "TaskRunner hostname: n, PID: 7")],
                        "findings:\n  - name: shard\n    match: 'shard (?P<n>\\d+) not found'\n    fix: re-export\n"
                        "    fix_for:\n      verl: 'verl: data.check=false'\n")
    assert only(store, "shard").fix == "re-export verl: data.check=false"
    (tmp_path / "bad.yaml").write_text("findings:\n  - name: x\n    match: x\n    fix_for: [verl]\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:4: findings\[0\].fix_for: expected a mapping"):
        load_config(tmp_path / "bad.yaml")


def test_a_watchdog_line_a_terminal_wrapped_is_not_cut_off(tmp_path: Path) -> None:
    """Audit 14 (open-r1): `what(): … Watchdog caught collective oper` then `tion timeout: WorkNCCL(SeqNum=4, …`, a
    terminal's wrap 20 lines before the end. Before: nccl-watchdog-cut, whose cause ("cut off … the process was
    killed while writing it") the next line contradicts. Live and in replay; a line truly cut stays one."""
    from gkdtop.config import load_config as load
    from gkdtop.replay import replay

    wrapped = [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: "
        "[Rank 2] Watchdog caught collective oper",
        "tion timeout: WorkNCCL(SeqNum=4, OpType=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for "
        "1800027 milliseconds before timing out.",
        "W0422 10:34:24.402000 88410 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 88411 "
        "closing signal SIGTERM",
    ]
    (tmp_path / "w").mkdir()
    cut = [*wrapped[:2], wrapped[3]]  # the same line, its rest never written
    (tmp_path / "c").mkdir()
    for folder, lines, want in (("w", wrapped, False), ("c", cut, True)):
        names = {f.name for f in store_after(tmp_path / folder, lines).findings()}
        assert ("nccl-watchdog-cut" in names) is want, (folder, names)
        (tmp_path / folder / "r.log").write_text("".join(line + "\n" for line in lines))
        report = replay([str(tmp_path / folder / "r.log")], load(None))
        assert ("nccl-watchdog-cut" in {f.name for f in report.findings}) is want, folder


def test_a_resume_at_its_last_step_is_one_finding_that_says_nothing_is_left_to_train(tmp_path: Path) -> None:
    """Audit 18: LLaMA-Factory re-run in a finished output_dir: resumed at global step 250 of 250, then at once
    `Training completed`. Before: 'hf-resume-data-skip x2' (the resume line and the skip line counted apart) with 'if
    the bar stays at 0 … the skip is the first thing to suspect', where nothing was left to skip or train."""
    head = "[INFO|2025-08-19 07:12:05] trainer.py:2410 >> "
    banner = [head + "  Num Epochs = 5", head + "  Total optimization steps = 250"]
    resume = [head + "  Continuing training from global step 250",
              head + "  Will skip the first 5 epochs then the first 0 batches in the first epoch.",
              "  0%|          | 0/250 [00:00<?, ?it/s]",
              "Training completed. Do not forget to share your model on huggingface.co/models =)"]
    found = only(store_after(tmp_path, banner + resume), "hf-resume-data-skip")
    assert found.count == 1
    assert "nothing is left to train" in found.cause and "raise num_train_epochs or max_steps" in found.fix
    # the banner alone says so too (no bar drawn), and a total written with commas is read
    found = only(store_after(tmp_path, [banner[0], head + "  Total optimization steps = 1,250",
                                        head + "  Continuing training from global step 1250", resume[-1]]),
                 "hf-resume-data-skip")
    assert "nothing is left to train" in found.cause
    # a resume short of the end keeps the skip's advice
    found = only(store_after(tmp_path, [banner[0], head + "  Total optimization steps = 1,250",
                                        head + "  Continuing training from global step 600",
                                        "  0%|          | 0/1250 [00:00<?, ?it/s]"]), "hf-resume-data-skip")
    assert found.count == 1 and "ignore_data_skip" in found.fix


def test_slurms_kill_is_a_finding_after_a_finished_run_and_ends_the_logs_span(tmp_path: Path) -> None:
    """Audit 21: Megatron's `[after training is done]`, then 22 minutes without an exit, then Slurm's TIME LIMIT kill:
    replay said `finished` over the stamps before the kill, and nothing of it."""
    from gkdtop.replay import replay, report_text

    lines = ["[2026-03-02 03:37:10] iteration       20/      20 | consumed samples:         2560 | elapsed time per "
             "iteration (ms): 4102.3 | lm loss: 3.1E-01 |",
             "[after training is done] datetime: 2026-03-02 03:37:11 ",
             "slurmstepd: error: *** JOB 40217 ON gpu-a12 CANCELLED AT 2026-03-02T04:00:17 DUE TO TIME LIMIT ***"]
    found = only(store_after(tmp_path, lines), "slurm-cancelled")
    assert (found.fields["reason"], found.fields["id"]) == ("TIME LIMIT", "40217")
    text = report_text(replay([str(tmp_path / "train.log")], load_config(None)))
    assert "to 04:00:17" in text.splitlines()[0] and "\nfinished\n" in text and "slurm-cancelled" in text


def test_a_dead_engines_advice_points_at_its_traceback_where_it_is_not_at_a_guessed_cause(tmp_path: Path) -> None:
    """Audit 26 L1: SGLang prints the scheduler's traceback after `Scheduler hit an exception:`; the advice said to
    look above it, 'often an OOM or a CUDA error', of a ValueError in a cache lookup printed below."""
    store = store_after(tmp_path, ["[2026-04-02 08:10:11 TP0] Scheduler hit an exception: Traceback (most recent "
                                   "call last):", '  File "/venv/sglang/srt/managers/scheduler.py", line 2311, in run',
                                   "ValueError: prefix length 12 is past the request's 9 tokens"])
    found = next(f for f in store.findings() if f.name == "engine-dead")
    assert "above" not in found.fix and "OOM" not in found.fix, found.fix
