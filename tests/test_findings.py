"""Findings on realistic log excerpts (Ray prefixes, ANSI colour) read through the real follower."""

from __future__ import annotations

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
    ("nccl-timeout-mid-run",
     [ray("WorkerDict", 312, "[rank0]:[E1122 11:00:00.000 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
      "collective operation timeout: WorkNCCL(SeqNum=4711, OpType=BROADCAST, NumelIn=8388608, NumelOut=8388608, "
      "Timeout(ms)=1800000) ran for 1800443 milliseconds before timing out.")],
     {"seq": "4711", "op": "BROADCAST", "rank": "0"}),
    ("nccl-connect-failed",
     [ray("WorkerDict", 313, "node-3:313:900 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
      "10.0.0.12<43215> failed : Software caused connection abort")],
     {"peer": "10.0.0.12", "port": "43215"}),
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
    ("nccl-timeout-mid-run",  # torch >= 2.5: the process group's name and the rank in that group
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
    ("killed-sigkill",
     ["  traceback : Signal 9 (SIGKILL) received by PID 475677"],
     {"pid": "475677"}),
    ("ray-job-failed",
     ["Job 'raysubmit_Xk2pQ9vLm4TnR8wa' failed"],
     {"job": "raysubmit_Xk2pQ9vLm4TnR8wa"}),
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
    ("ray-node-died",  # Ray 2.4x wording, in a RayActorError's tab-indented fields
     ["ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
      "\tclass_name: WorkerDict",
      "\tactor_id: 9c1f0e2a7b3d4c5e6f708192a3b4c5d6e7f80910",
      "\tpid: 4242",
      "The actor is dead because its node has died. Node Id: 5e6f7a8b"],
     {}),
    ("ib-completion-error",  # the mlx5 driver's own line
     ["mlx5: node-4: got completion with error:"],
     {}),
    ("vllm-no-generation-progress",
     [ray("vLLMHttpServer", 50000, "INFO 06-09 10:52:54 [loggers.py:118] Engine 000: Avg prompt throughput: 588.0 "
      "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 6 reqs, Waiting: 0 reqs, GPU KV cache usage: "
      "12.1%, Prefix cache hit rate: 0.0%")],
     {"running": "6"}),
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
    ("trl-vllm-server-unreachable",
     ["ConnectionError: The vLLM server can't be reached at 10.0.4.9:8000 after 240 seconds. Make sure the server "
      "is running by running `trl vllm-serve`."],
     {"url": "10.0.4.9:8000", "timeout_s": "240"}),
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
    # Two lines of one incident: engine-dead's two wordings, the wake_up frame and its collective_rpc.
    two = name == "engine-dead" or (name == "vllm-wake-up-oom" and len(lines) > 4)
    assert found.count == (2 if two else 1)


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
