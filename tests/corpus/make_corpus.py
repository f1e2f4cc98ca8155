# ruff: noqa: E501, UP031  (log lines are as long as the frameworks print them; %-format where the text has braces)
"""Write the corpus: every NAME.log and NAME.expect.yaml in tests/corpus/ (python -m tests.corpus.make_corpus).

Each scenario below is one job as it would print, built from the framework writers; its expectation
(state, phase, culprit, fix, wrong claims) is stated next to it, by a person, not derived from gkdtop.
quiet_for is how long the log had been silent when someone looked (the harness backdates the
file's mtime by that much so a live snapshot sees a hang the way a user would).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .frameworks import PY, Verl, ray_connect, ray_pending, verl_startup, verl_traceback_ray
from .logkit import Log, fatal_signal, frame_lines, tqdm_bar, traceback, watchdog_timeout
from .others import (
    OpenRLHF,
    easyr1,
    llamafactory,
    torchrun_banner,
    torchrun_child_failed,
    trl_grpo,
    trl_vllm_server,
    verl_sft,
)

HERE = Path(__file__).parent
SCENARIOS: dict = {}


def scenario(name: str, **expect):
    def deco(fn):
        SCENARIOS[name] = (fn, expect)
        return fn
    return deco


def run_steps(v: Verl, n: int, **kw) -> None:
    for _ in range(n):
        v.train_step(save=v.step + 1 == 10, validate=(v.step + 1) % 5 == 0 and v.algo != "gkd", **kw)


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {t}. GPU {g} has a total capacity of 79.11 GiB of which {f} is free. "
       "Process {p} has {h} memory in use. Of the allocated memory {a} is allocated by PyTorch, and {r} is reserved by PyTorch but unallocated. "
       "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
       "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def sglang_parent_quits(v: Verl) -> None:
    """SGLang's engine after its scheduler child failed: the SIGQUIT the child sends it
    (`Received sigquit from a child process`), it kills its own process tree, and Ray reports the
    WorkerDict that hosted it as dead to the TaskRunner that waited on its init_model()."""
    log = v.log
    log.raw(f"{v.wpre(0, 0)}[{log.pylog_ts(True)[:19]}] Received sigquit from a child process. It usually means the child failed.")
    log.raw(f"{log.prefix('TaskRunner', pid=v.runner)}Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict.actor_rollout_init_model() (pid={v.worker_pids[0][1]}, ip={v.ips[0]}, actor_id=2b3c4d5e6f708192a3b4c5d601000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f2a1b0c9d80>)")
    log.raw("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    log.raw("\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict")
    log.raw("\tactor_id: 2b3c4d5e6f708192a3b4c5d601000000")
    log.raw(f"\tpid: {v.worker_pids[0][1]}")
    log.raw(f"\tname: {v.hosts[0][-3:]}WorkerDict_0:1")
    log.raw("\tnamespace: 0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5")
    log.raw(f"\tip: {v.ips[0]}")
    log.raw("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.")


# ============================================================================================ done
@scenario("verl_grpo_vllm_done", framework="verl", state="done", phase="finished", culprit="none",
          fix=[], quiet_for=30)
def _(log: Log) -> None:
    v = Verl(log, steps=15, vllm_info=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 15)
    v.finish()


@scenario("verl_ppo_megatron_2node_done", framework="verl", state="done", phase="finished", culprit="none",
          fix=[], quiet_for=60, wrong_claims=["NCCL_SOCKET_IFNAME"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", strategy="megatron", nodes=2, critic=True, steps=12, nccl_debug=True, vllm_info=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 12)
    v.finish()


@scenario("verl_gkd_sglang_done", framework="verl", state="done", phase="finished", culprit="none", fix=[], quiet_for=10)
def _(log: Log) -> None:
    v = Verl(log, algo="gkd", engine="sglang", strategy="megatron", steps=10, entry="recipe.gkd.megatron.main_gkd", ref=False, sglang_info=True)
    verl_startup(v)
    run_steps(v, 10)
    v.finish()


# ================================================================================ waiting for resources
@scenario("verl_grpo_ray_pending_gpu", framework="verl", state="stalled", phase="waiting for resources",
          culprit="ray resource request cannot be scheduled: {'GPU': 8.0} on a node with fewer free GPUs",
          culprit_any=["ray-unschedulable", "cannot be scheduled"], fix=["n_gpus_per_node", "ray status", "nnodes"],
          quiet_for=30, wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, steps=50)
    v.config()
    v.dataset()
    v.worker_group()
    ray_pending(log, "{'CPU': 1.0, 'GPU': 8.0}", 25)


@scenario("verl_ppo_2node_no_node_type", framework="verl", state="stalled", phase="waiting for resources",
          culprit="No available node types can fulfill resource request defaultdict(<class 'float'>, {'GPU': 8.0, ...}) (second node never joined)",
          culprit_any=["ray-unschedulable", "No available node types"], fix=["nnodes", "n_gpus_per_node", "ray status"],
          quiet_for=40, wrong_claims=["dataset", "NCCL"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", nodes=2, critic=True, steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    ray_pending(log, "{'CPU': 1.0, 'GPU': 8.0, 'node:__internal_head__': 0.001}", 20, infeasible=True, default_dict=True)


# ===================================================================================== nccl init hangs
@scenario("verl_ppo_2node_nccl_init_hang", framework="verl", state="stalled", phase="nccl init",
          culprit="NCCL bootstrap picked docker0 (172.17.0.1) on both nodes; Init START never followed by Init COMPLETE",
          culprit_any=["docker0", "172.17", "Init START", "Bootstrap"], fix=["NCCL_SOCKET_IFNAME"], quiet_for=1500,
          wrong_claims=["dataset", "gpu_memory_utilization"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", nodes=2, nccl_debug=True, ifname="docker0", ips=["172.17.0.1", "172.17.0.1"], steps=100)
    v.ips = ["172.17.0.1", "172.17.0.1"]
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load(finish=False)
    v.nccl(complete=False, ranks_shown=3)


@scenario("verl_grpo_nccl_socket_169", framework="verl", state="failed", phase="nccl init",
          culprit="NCCL socketStartConnect to a 169.254.x link-local peer failed (wrong interface)",
          culprit_any=["nccl-connect-failed", "169.254"], fix=["NCCL_SOCKET_IFNAME"], quiet_for=20, wrong_claims=["dataset", "CUDA out of memory"])
def _(log: Log) -> None:
    v = Verl(log, nodes=2, nccl_debug=True, ifname="enp0s20f0u1u6", steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load(finish=False)
    v.nccl(complete=False)
    log.adv(120, 130)
    pre = v.wpre(1, 0)
    host, pid = v.hosts[1], v.worker_pids[1][0]
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.3.1<42391> failed : Software caused connection abort")
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] NCCL INFO misc/socket.cc:565 -> 2")
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] NCCL INFO misc/socket.cc:619 -> 2")
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] NCCL INFO bootstrap.cc:274 -> 2")
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] NCCL INFO init.cc:1429 -> 2")
    log.raw(f"{pre}{host}:{pid}:{pid + 311} [0] NCCL INFO init.cc:1778 -> 2")
    verl_traceback_ray(v, "init_model", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 712, "init_model", "self.actor_module_fsdp, self.actor_optimizer, self.actor_lr_scheduler, self.actor_model_config = self._build_model_optimizer("),
        (f"{PY}/torch/distributed/fsdp/fully_sharded_data_parallel.py", 509, "__init__", "_init_param_handle_from_module("),
        (f"{PY}/torch/distributed/fsdp/_init_utils.py", 1185, "_sync_module_params_and_buffers", "_sync_params_and_buffers("),
        (f"{PY}/torch/distributed/utils.py", 326, "_sync_params_and_buffers", "dist._broadcast_coalesced("),
    ], "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \nLast error:\nsocketStartConnect: Connect to 169.254.3.1<42391> failed : Software caused connection abort")


@scenario("verl_ppo_nccl_socket_172", framework="verl", state="failed", phase="nccl init",
          culprit="NCCL could not connect to peer 172.17.0.2 (docker bridge address): socketStartConnect ... failed",
          culprit_any=["nccl-connect-failed", "172.17.0.2"], fix=["NCCL_SOCKET_IFNAME"], quiet_for=15, wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", nodes=2, nccl_debug=True, ifname="docker0", critic=True, steps=100)
    v.ips = ["172.17.0.1", "172.17.0.2"]
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load(finish=False)
    v.nccl(complete=False)
    log.adv(60, 70)
    pre = v.wpre(0, 1)
    host, pid = v.hosts[0], v.worker_pids[0][1]
    for _ in range(3):
        log.raw(f"{pre}{host}:{pid}:{pid + 402} [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.2<35113> failed : Connection refused")
        log.raw(f"{pre}{host}:{pid}:{pid + 402} [1] NCCL INFO misc/socket.cc:565 -> 6")
        log.adv(1, 2)
    log.raw(f"{pre}{host}:{pid}:{pid + 402} [1] NCCL INFO transport/net_socket.cc:338 -> 6")
    log.raw(f"{pre}{host}:{pid}:{pid + 402} [1] NCCL INFO transport/net.cc:683 -> 6")
    log.raw(f"{pre}{host}:{pid}:{pid + 402} [1] NCCL INFO init.cc:1263 -> 6")
    verl_traceback_ray(v, "init_model", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 1512, "init_model", "self.critic_module, self.critic_optimizer, self.critic_lr_scheduler = self._build_critic_model_optimizer(self.config)"),
        (f"{PY}/torch/distributed/distributed_c10d.py", 2726, "broadcast", "work = group.broadcast([tensor], opts)"),
    ], "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nsocketStartConnect: Connect to 172.17.0.2<35113> failed : Connection refused")


@scenario("verl_ppo_watchdog_first_collective", framework="verl", state="failed", phase="nccl init",
          culprit="Watchdog timeout on SeqNum=1 (BROADCAST): ranks never connected",
          culprit_any=["nccl-timeout-first-collective", "SeqNum=1"], fix=["NCCL_SOCKET_IFNAME", "NCCL_DEBUG"], quiet_for=20,
          wrong_claims=["desync", "dataset"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", nodes=2, steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load(finish=False)
    log.adv(600, 601)
    for node in range(2):
        for r in range(2):
            watchdog_timeout(log, v.wpre(node, r), node * 8 + r, r, 1, "BROADCAST", 544997376, 544997376, full=(node, r) == (1, 0))
    log.raw(f"{v.wpre(1, 0)}*** SIGABRT received at time={int(log.t.timestamp())} on cpu 37 ***")
    log.adv(3, 5)
    log.raw(f"(raylet, ip={v.ips[1]}) A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. RayTask ID: ffffffffffffffff1c2b3a4d5e6f708901000000 Worker ID: 6c1e2f0a3b4d Node ID: 8a7b6c5d4e3f Worker IP address: {v.ips[1]} Worker port: 10043 Worker PID: {v.worker_pids[1][0]} Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.")


# =================================================================================== rollout init
@scenario("verl_grpo_vllm_graph_capture_hang", framework="verl", state="stalled", phase="rollout init",
          culprit="vLLM CUDA graph capture stopped at 31/67 and never finished (no 'Graph capturing finished')",
          culprit_any=["Capturing CUDA graph", "graph capture", "CUDA graph"], fix=["enforce_eager"], quiet_for=1800,
          wrong_claims=["dataset", "NCCL_SOCKET_IFNAME"])
def _(log: Log) -> None:
    v = Verl(log, steps=100, vllm_info=True)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.ref_init()
    v.rollout_init(stop="graphs")


@scenario("verl_grpo_sglang_init_segfault", framework="verl", state="failed", phase="rollout init",
          culprit="SGLang scheduler process crashed: Fatal Python error: Segmentation fault while capturing CUDA graphs",
          culprit_any=["Segmentation fault", "Fatal Python error"], fix=["disable_cuda_graph", "cuda graph", "flashinfer"], quiet_for=60,
          wrong_claims=["dataset", "data.train_files"])
def _(log: Log) -> None:
    v = Verl(log, engine="sglang", steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.ref_init()
    v.rollout_init(stop="graphs")
    pre = v.wpre(0, 1)
    fatal_signal(log, pre, "Segmentation fault", v.worker_pids[0][1], [
        (f"{PY}/flashinfer/decode.py", 1201, "plan"),
        (f"{PY}/sglang/srt/layers/attention/flashinfer_backend.py", 702, "call_begin_forward"),
        (f"{PY}/sglang/srt/layers/attention/flashinfer_backend.py", 402, "init_forward_metadata_capture_cuda_graph"),
        (f"{PY}/sglang/srt/model_executor/cuda_graph_runner.py", 512, "capture_one_batch_size"),
        (f"{PY}/sglang/srt/model_executor/cuda_graph_runner.py", 405, "capture"),
        (f"{PY}/sglang/srt/model_executor/model_runner.py", 1302, "init_cuda_graphs"),
        (f"{PY}/sglang/srt/entrypoints/engine.py", 112, "__init__"),
        ("/workspace/verl/verl/workers/rollout/sglang_rollout/sglang_rollout.py", 418, "_init_inference_engine"),
    ])
    log.adv(2, 4)
    sglang_parent_quits(v)


# SGLang's memory pool is the static fraction minus the weights: too small a fraction leaves no
# KV cache, and the fix is the opposite of vLLM's OOM (raise it). verl runs SGLang at
# log_level='error', so its scheduler's exception is the first line SGLang prints.
@scenario("verl_grpo_sglang_mem_fraction", framework="verl", state="failed", phase="rollout init",
          culprit="SGLang: Not enough memory for the KV cache pool (gpu_memory_utilization=0.2, SGLang's mem_fraction_static, barely holds the 7B weights)",
          culprit_any=["sglang-kv-pool-too-small", "mem-fraction-static"], fix=["raise actor_rollout_ref.rollout.gpu_memory_utilization"],
          quiet_for=45, wrong_claims=["dataset", "NCCL_SOCKET_IFNAME", "CUDA out of memory"])
def _(log: Log) -> None:
    v = Verl(log, engine="sglang", steps=100, gpu_memory_utilization=0.2)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.ref_init()
    v.rollout_init(stop="weights")
    log.adv(20, 40)
    pre = v.wpre(0, 0)
    for tp in range(2):
        log.raw(f"{pre}[{log.pylog_ts(True)[:19]} TP{tp}] Scheduler hit an exception: Traceback (most recent call last):")
        frame_lines(log, pre, [
            (f"{PY}/sglang/srt/managers/scheduler.py", 2361, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
            (f"{PY}/sglang/srt/managers/scheduler.py", 268, "__init__", "self.tp_worker = TpWorkerClass("),
            (f"{PY}/sglang/srt/managers/tp_worker.py", 84, "__init__", "self.model_runner = ModelRunner("),
            (f"{PY}/sglang/srt/model_executor/model_runner.py", 235, "__init__", "self.initialize(min_per_gpu_memory)"),
            (f"{PY}/sglang/srt/model_executor/model_runner.py", 313, "initialize", "self.init_memory_pool("),
            (f"{PY}/sglang/srt/model_executor/model_runner.py", 1268, "init_memory_pool", "raise RuntimeError("),
        ])
        log.raw(f"{pre}RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        log.raw(pre)
    log.adv(1, 2)
    sglang_parent_quits(v)


@scenario("verl_ppo_vllm_kv_cache_small", framework="verl", state="failed", phase="rollout init",
          culprit="vLLM: max seq len larger than the KV cache can hold (KV cache too small at gpu_memory_utilization=0.3)",
          culprit_any=["vllm-kv-cache", "KV cache"], fix=["gpu_memory_utilization", "max_model_len"], quiet_for=20, wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100, vllm_info=True)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.critic_init()
    v.ref_init()
    v.rollout_init(stop="kv")
    pre = v._vllm_pre(0)
    log.vllm("ERROR", "core.py:632", "EngineCore failed to start.", pre=pre, proc="EngineCore_0")
    engine = f"{pre}(EngineCore_0 pid={log.pid('EngineCore_0' + pre)}) "
    log.raw(f"{engine}Traceback (most recent call last):")
    frame_lines(log, engine, [
        (f"{PY}/vllm/v1/engine/core.py", 623, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
        (f"{PY}/vllm/v1/engine/core.py", 441, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
        (f"{PY}/vllm/v1/engine/core.py", 86, "__init__", "self._initialize_kv_caches(vllm_config)"),
        (f"{PY}/vllm/v1/engine/core.py", 158, "_initialize_kv_caches", "kv_cache_configs = [get_kv_cache_config(vllm_config, kv_cache_spec_one_worker, available_gpu_memory_one_worker)"),
        (f"{PY}/vllm/v1/core/kv_cache_utils.py", 1094, "get_kv_cache_config", "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"),
        (f"{PY}/vllm/v1/core/kv_cache_utils.py", 566, "check_enough_kv_cache_memory", "raise ValueError("),
    ])
    log.raw(f"{engine}ValueError: To serve at least one request with the models's max seq len (32768), (3.50 GiB KV cache is needed, which is larger than the available KV cache memory (1.21 GiB). Based on the available memory, the estimated maximum model length is 11328. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    verl_traceback_ray(v, "init_model", [
        ("/workspace/verl/verl/workers/rollout/vllm_rollout/vllm_async_server.py", 430, "launch_server", "engine_client = AsyncLLM.from_vllm_config(vllm_config)"),
        (f"{PY}/vllm/v1/engine/core_client.py", 470, "_wait_for_engine_startup", "raise RuntimeError(\"Engine core initialization failed. \""),
    ], "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_0': 1}")


# ========================================================================== reference / reward / ckpt
@scenario("verl_ppo_reward_init_oom", framework="verl", state="failed", phase="reward init",
          culprit="CUDA out of memory while loading the reward model (LlamaForSequenceClassification) next to the actor",
          culprit_any=["cuda-oom", "CUDA out of memory"], fix=["param_offload", "offload", "micro"], quiet_for=20,
          wrong_claims=["dataset", "KV cache"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, reward_model=True, steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.critic_init()
    v.ref_init()
    log.adv(20, 30)
    v.log.ray("WorkerDict", tqdm_bar("Loading checkpoint shards", 3, 4, 33.1), pid=v.worker_pids[0][0])
    verl_traceback_ray(v, "init_model", wg="rm", inner_frames=[
        ("/workspace/verl/verl/workers/fsdp_workers.py", 1780, "init_model", "self.reward_module = self._build_model(config=self.config)"),
        ("/workspace/verl/verl/workers/fsdp_workers.py", 1752, "_build_model", "reward_module = FSDP("),
        (f"{PY}/torch/distributed/fsdp/_init_utils.py", 610, "_init_param_handle_from_module", "_move_module_to_device("),
        (f"{PY}/torch/nn/modules/module.py", 1326, "convert", "return t.to("),
    ], final=OOM.format(t="1.96 GiB", g=0, f="1.02 GiB", p=log.pid("x"), h="78.08 GiB", a="71.22 GiB", r="3.11 GiB"))


@scenario("verl_ppo_checkpoint_save_hang", framework="verl", state="stalled", phase="checkpoint save",
          culprit="checkpoint save at global_step_10 never completed (slow/hung shared filesystem)",
          culprit_any=["checkpoint", "global_step_10"], fix=["default_local_dir", "filesystem", "storage"], quiet_for=2400)
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100, verbose=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 9)
    v.train_step(save=True, stop="checkpoint save")


@scenario("verl_grpo_validation_running", framework="verl", state="running", phase="validation",
          culprit="none", fix=[], quiet_for=5)
def _(log: Log) -> None:
    v = Verl(log, steps=100, vllm_info=True, verbose=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 4)
    v.step += 1
    v.tr("test_gen_batch meta info: {'eos_token_id': 151645, 'pad_token_id': 151643, 'recompute_log_prob': False, 'do_sample': False, 'validate': True, 'global_steps': 5}")
    v.wake()
    for _ in range(4):
        log.adv(10)
        log.vllm("INFO", "loggers.py:118", f"Engine 000: Avg prompt throughput: 410.2 tokens/s, Avg generation throughput: {log.rng.uniform(9000, 12000):.1f} tokens/s, Running: 412 reqs, Waiting: 0 reqs, GPU KV cache usage: 21.3%, Prefix cache hit rate: 68.1%", pre=v._vllm_pre(0))


# ============================================================================ per-step hangs/crashes
@scenario("verl_grpo_weight_sync_hang", framework="verl", state="stalled", phase="weight sync",
          culprit="weight sync at step 8: vLLM woke weights but update_weights never finished",
          culprit_any=["weight sync", "update_weights", "wake up"], fix=["stacks", "nccl_timeout", "py-spy"], quiet_for=1800)
def _(log: Log) -> None:
    v = Verl(log, steps=100, vllm_info=True, verbose=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 7)
    v.train_step(stop="weight sync")


@scenario("verl_ppo_generation_hang", framework="verl", state="stalled", phase="generation",
          culprit="generation stuck: vLLM reports a few running requests and zero generation throughput for an hour",
          culprit_any=["generation", "Running:", "throughput: 0.0"], fix=["response_length", "stacks", "max_tokens"], quiet_for=600,
          wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100, vllm_info=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 12)
    v.train_step(stop="generation")


@scenario("verl_grpo_actor_update_oom", framework="verl", state="failed", phase="actor update",
          culprit="CUDA out of memory in update_actor (dp_actor backward)",
          culprit_any=["cuda-oom", "CUDA out of memory"], fix=["ppo_micro_batch_size_per_gpu", "micro batch", "gradient checkpointing", "expandable_segments"],
          quiet_for=10, wrong_claims=["KV cache", "wake_up"])
def _(log: Log) -> None:
    v = Verl(log, steps=100)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 3)
    v.train_step(stop="actor update")
    log.adv(30, 50)
    verl_traceback_ray(v, "update_actor", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 918, "update_actor", "metrics = self.actor.update_policy(data=data)"),
        ("/workspace/verl/verl/workers/actor/dp_actor.py", 493, "update_policy", "loss.backward()"),
        (f"{PY}/torch/_tensor.py", 648, "backward", "torch.autograd.backward("),
        (f"{PY}/torch/autograd/graph.py", 829, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
    ], OOM.format(t="7.42 GiB", g=5, f="3.17 GiB", p=log.pid("y"), h="75.93 GiB", a="66.02 GiB", r="8.45 GiB"))


@scenario("verl_grpo_vllm_wake_up_oom", framework="verl", state="failed", phase="weight sync",
          culprit="vLLM wake_up (resume KV cache) ran out of GPU memory: the actor did not release memory",
          culprit_any=["vllm-wake-up-oom", "wake_up"], fix=["gpu_memory_utilization", "param_offload", "offload"], quiet_for=15,
          wrong_claims=["dataset", "micro_batch"])
def _(log: Log) -> None:
    v = Verl(log, steps=100)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 2)
    v.step += 1
    v.wake(ok=False)
    log.adv(1, 2)
    pre = v._vllm_pre(0)
    log.vllm("ERROR", "core.py:710", "EngineCore encountered a fatal error.", pre=pre, proc="EngineCore_0")
    verl_traceback_ray(v, "wake_up", [
        ("/workspace/verl/verl/workers/rollout/vllm_rollout/vllm_async_server.py", 556, "wake_up", "await self.engine.wake_up(tags=[\"kv_cache\"])"),
        (f"{PY}/vllm/v1/engine/async_llm.py", 582, "wake_up", "await self.engine_core.wake_up_async(tags)"),
        (f"{PY}/vllm/v1/worker/gpu_worker.py", 104, "wake_up", "allocator.wake_up(tags)"),
        (f"{PY}/vllm/device_allocator/cumem.py", 224, "wake_up", "create_and_map(handle)"),
        (f"{PY}/vllm/device_allocator/cumem.py", 73, "create_and_map", "python_create_and_map(*allocation_handle)"),
    ], "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62")


@scenario("verl_grpo_engine_dead", framework="verl", state="failed", phase="generation",
          culprit="vLLM EngineDeadError during generation (engine core died on an illegal memory access)",
          culprit_any=["engine-dead", "EngineDeadError"], fix=["EngineCore", "traceback", "CUDA_LAUNCH_BLOCKING"], quiet_for=30,
          wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, steps=100, vllm_info=True)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 6)
    v.step += 1
    v.wake()
    log.adv(20, 30)
    pre = v._vllm_pre(1)
    log.vllm("ERROR", "core.py:710", "EngineCore encountered a fatal error.", pre=pre, proc="EngineCore_0")
    log.raw(f"{pre}(EngineCore_0 pid={log.pid('EngineCore_0' + pre)}) RuntimeError: CUDA error: an illegal memory access was encountered")
    log.raw(f"{pre}(EngineCore_0 pid={log.pid('EngineCore_0' + pre)}) CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
    log.raw(f"{pre}(EngineCore_0 pid={log.pid('EngineCore_0' + pre)}) For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
    log.vllm("ERROR", "async_llm.py:416", "AsyncLLM output_handler failed.", pre=pre)
    verl_traceback_ray(v, "generate_sequences", [
        ("/workspace/verl/verl/experimental/agent_loop/agent_loop.py", 511, "generate_sequences", "outputs = await asyncio.gather(*tasks)"),
        (f"{PY}/vllm/v1/engine/async_llm.py", 381, "generate", "out = q.get_nowait() or await q.get()"),
    ], "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")


@scenario("verl_ppo_actor_oom_killed", framework="verl", state="failed", phase="old log-prob",
          culprit="Ray's memory monitor killed a WorkerDict (host RAM): ActorDiedError, worker exit type OUT_OF_MEMORY",
          culprit_any=["ray-actor-died", "ActorDiedError", "OUT_OF_MEMORY"], fix=["memory", "RAY_memory", "offload"], quiet_for=20,
          wrong_claims=["CUDA out of memory"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100)
    verl_startup(v)
    v.validate(initial=True)
    run_steps(v, 5)
    v.train_step(stop="old log-prob")
    log.adv(30, 40)
    wp = v.worker_pids[0][3]
    log.raw(f"(raylet) [{log.pylog_ts(True)} E 2210 2210] (raylet) node_manager.cc:3222: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 5b6a7c8d9e0f1a2b3c4d, IP: {v.ips[0]}) over the last time period. To see more information about the Workers killed on this node, use `ray logs raylet.out -ip {v.ips[0]}`")
    log.raw("(raylet) Refer to the documentation on how to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node or reducing task parallelism by requesting more CPUs per task. To adjust the kill threshold, set the environment variable `RAY_memory_usage_threshold` when starting Ray. To disable worker killing, set the environment variable `RAY_memory_monitor_refresh_ms` to zero.")
    log.raw("Error executing job with overrides: ['algorithm.adv_estimator=gae', 'trainer.n_gpus_per_node=8']")
    log.raw("ray.exceptions.RayTaskError(ActorDiedError): \x1b[36mray::TaskRunner.run()\x1b[39m (pid=%d, ip=%s, actor_id=7f6b2c1d9e8a4b3c2d1e0f9a01000000, repr=<main_ppo.TaskRunner object at 0x7f9a1c3e2b50>)" % (v.runner, v.ips[0]))
    log.raw("  File \"/workspace/verl/verl/trainer/ppo/ray_trainer.py\", line 1123, in fit")
    log.raw("    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)")
    log.raw("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    log.raw("\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict")
    log.raw("\tactor_id: 5e4d3c2b1a09f8e7d6c5b4a301000000")
    log.raw(f"\tpid: {wp}")
    log.raw("\tname: aB3dWorkerDict_0:3")
    log.raw(f"\tip: {v.ips[0]}")
    log.raw("The actor is dead because its worker process has died. Worker exit type: OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.")
    log.raw(f"Memory on the node (IP: {v.ips[0]}, ID: 5b6a7c8d9e0f1a2b3c4d) where the task (actor ID: 5e4d3c2b1a09f8e7d6c5b4a301000000, name=aB3dWorkerDict_0:3, pid={wp}, memory used=61.22GB) was running was 1922.41GB / 2015.57GB (0.953784), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 9c8b7a6f5e4d) because it was the most recently scheduled task; to see more information about memory usage on this node, use `ray logs raylet.out -ip {v.ips[0]}`. To see the logs of the worker, use `ray logs worker-9c8b7a6f5e4d*out -ip {v.ips[0]}. Top 10 memory users:")
    log.raw("PID\tMEM(GB)\tCOMMAND")
    for k in range(5):
        log.raw(f"{v.worker_pids[0][k]}\t{log.rng.uniform(55, 240):.2f}\tray::WorkerDict.actor_rollout_compute_log_prob")
    log.raw("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.")


@scenario("verl_gkd_2node_watchdog_desync", framework="verl", state="failed", phase="actor update",
          culprit="NCCL watchdog timeout mid-run (SeqNum=18423, _ALLGATHER_BASE) on rank 11: ranks out of step",
          culprit_any=["nccl-timeout", "SeqNum=18423"], fix=["stacks", "Flight Recorder", "TORCH_NCCL_TRACE_BUFFER_SIZE"], quiet_for=30,
          wrong_claims=["NCCL_SOCKET_IFNAME", "first collective"])
def _(log: Log) -> None:
    v = Verl(log, algo="gkd", strategy="megatron", nodes=2, steps=200, ref=False, entry="recipe.gkd.megatron.main_gkd")
    verl_startup(v)
    run_steps(v, 23)
    v.train_step(stop="actor update")
    log.adv(600, 601)
    for node, r in ((1, 3), (0, 0), (1, 0)):
        watchdog_timeout(log, v.wpre(node, r), node * 8 + r, node * 4 + r, 18423, "_ALLGATHER_BASE", 95813632, 766509056,
                         pg=(4, 21, "DATA_PARALLEL_GROUP"), full=(node, r) == (1, 3))
    log.raw(f"{v.wpre(1, 3)}*** SIGABRT received at time={int(log.t.timestamp())} on cpu 12 ***")


@scenario("verl_grpo_dist_backend_error", framework="verl", state="failed", phase="weight sync",
          culprit="DistBackendError: NCCL error 'unhandled cuda error' in the weight broadcast to the rollout",
          culprit_any=["DistBackendError", "ray-task-error"], fix=["NCCL_DEBUG", "driver", "NCCL_P2P_DISABLE"], quiet_for=30,
          wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, steps=100)
    verl_startup(v)
    run_steps(v, 4)
    v.step += 1
    v.wake(ok=False)
    verl_traceback_ray(v, "update_weights", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 742, "rollout_mode", "await self.rollout.update_weights(per_tensor_param, peft_config=peft_config, base_sync_done=self.base_sync_done)"),
        ("/workspace/verl/verl/checkpoint_engine/nccl_checkpoint_engine.py", 288, "send_weights", "collective.broadcast(buffer, src_rank=0, group_name=self.group_name)"),
        (f"{PY}/torch/distributed/distributed_c10d.py", 2726, "broadcast", "work = group.broadcast([tensor], opts)"),
    ], "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'peer access is not supported between these two devices'")


@scenario("verl_ppo_2node_ib_completion_error", framework="verl", state="failed", phase="actor update",
          culprit="NET/IB: Got completion from peer ... with status=12 (IBV_WC_RETRY_EXC_ERR: transport retries exhausted) on mlx5_2",
          culprit_any=["ib-completion-error", "Got completion from peer"], fix=["ibstat", "NCCL_IB_DISABLE", "link"], quiet_for=20,
          wrong_claims=["dataset", "CUDA out of memory"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", nodes=2, critic=True, nccl_debug=True, steps=100)
    verl_startup(v)
    run_steps(v, 16)
    v.train_step(stop="actor update")
    log.adv(40, 60)
    pre = v.wpre(1, 2)
    h, pid = v.hosts[1], v.worker_pids[1][2]
    log.raw(f"{pre}{h}:{pid}:{pid + 977} [2] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer {v.ips[0]}<52411> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:{v.ips[1]} remoteGids::ffff:{v.ips[0]} hca mlx5_2")
    log.raw(f"{pre}{h}:{pid}:{pid + 977} [2] NCCL INFO transport/net.cc:1308 -> 6")
    log.raw(f"{pre}{h}:{pid}:{pid + 977} [2] NCCL INFO proxy.cc:698 -> 6")
    log.raw(f"{pre}{h}:{pid}:{pid + 977} [2] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]")
    log.adv(1, 2)
    verl_traceback_ray(v, "update_actor", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 918, "update_actor", "metrics = self.actor.update_policy(data=data)"),
        (f"{PY}/torch/distributed/fsdp/_runtime_utils.py", 1130, "_post_backward_hook", "_reduce_grad(state, handle)"),
        (f"{PY}/torch/distributed/distributed_c10d.py", 4173, "reduce_scatter_tensor", "work.wait()"),
    ], "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 10. Original reason for failure was: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\nLast error:\nNET/IB : Got completion from peer %s<52411> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:%s remoteGids::ffff:%s hca mlx5_2" % (v.ips[0], v.ips[1], v.ips[0]))


@scenario("verl_ppo_no_cpu_backend", framework="verl", state="failed", phase="checkpoint load",
          culprit="RuntimeError: No backend type associated with device type cpu (a CPU tensor broadcast on an NCCL-only group while loading the checkpoint)",
          culprit_any=["No backend type associated with device type cpu"], fix=["cpu:gloo", "gloo", "backend"], quiet_for=20,
          wrong_claims=["dataset", "NCCL_SOCKET_IFNAME"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    v.model_load()
    v.critic_init()
    v.ref_init()
    v.rollout_init()
    v.tr("Load from checkpoint folder: /mnt/ckpt/verl_rl/ppo/global_step_40")
    v.tr("Setting global step to 40")
    v.tr("Resuming from /mnt/ckpt/verl_rl/ppo/global_step_40")
    log.adv(20, 30)
    verl_traceback_ray(v, "load_checkpoint", [
        ("/workspace/verl/verl/workers/fsdp_workers.py", 1098, "load_checkpoint", "self.checkpoint_manager.load_checkpoint(local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load)"),
        ("/workspace/verl/verl/utils/checkpoint/fsdp_checkpoint_manager.py", 152, "load_checkpoint", "self.optimizer.load_state_dict(optimizer_state_dict)"),
        (f"{PY}/torch/distributed/fsdp/_optim_utils.py", 1422, "_broadcast_state", "dist.broadcast(state_objects, src=0, group=group)"),
        (f"{PY}/torch/distributed/distributed_c10d.py", 2726, "broadcast", "work = group.broadcast([tensor], opts)"),
    ], "RuntimeError: No backend type associated with device type cpu")


@scenario("verl_grpo_hydra_config_error", framework="verl", state="failed", phase="config",
          culprit="Hydra: Could not override 'actor_rollout_ref.rollout.gpu_mem_util' (key not in struct)",
          culprit_any=["Could not override", "Key 'gpu_mem_util' is not in struct", "ConfigAttributeError", "not in struct"], fix=["override", "gpu_memory_utilization", "+"], quiet_for=5,
          wrong_claims=["dataset", "NCCL"])
def _(log: Log) -> None:
    log.raw("+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/mnt/data/gsm8k/train.parquet "
            "data.val_files=/mnt/data/gsm8k/test.parquet data.train_batch_size=512 actor_rollout_ref.model.path=/mnt/models/Qwen2.5-7B-Instruct "
            "actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_mem_util=0.6 actor_rollout_ref.rollout.n=5 trainer.n_gpus_per_node=8 trainer.nnodes=1")
    log.vllm("INFO", "__init__.py:244", "Automatically detected platform cuda.")
    log.raw(f"{PY}/transformers/utils/hub.py:111: FutureWarning: Using `TRANSFORMERS_CACHE` is deprecated and will be removed in v5 of Transformers. Use `HF_HOME` instead.")
    log.raw("  warnings.warn(")
    log.raw(f"{PY}/torch/cuda/__init__.py:61: FutureWarning: The pynvml package is deprecated. Please install nvidia-ml-py instead. If you did not install pynvml directly, please report this to the maintainers of the package that installed pynvml for you.")
    log.raw("  import pynvml  # type: ignore[import]")
    log.adv(2, 4)
    log.raw("Could not override 'actor_rollout_ref.rollout.gpu_mem_util'.")
    log.raw("To append to your config use +actor_rollout_ref.rollout.gpu_mem_util=0.6")
    log.raw("Key 'gpu_mem_util' is not in struct")
    log.raw("    full_key: actor_rollout_ref.rollout.gpu_mem_util")
    log.raw("    object_type=dict")
    log.raw("")
    log.raw("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.")


@scenario("verl_ppo_dataset_missing", framework="verl", state="failed", phase="dataset",
          culprit="FileNotFoundError for data.train_files (/mnt/data/gsm8k/train.parquet)",
          culprit_any=["FileNotFoundError", "train.parquet"], fix=["train_files", "data.train_files", "path"], quiet_for=5,
          wrong_claims=["NCCL", "gpu_memory_utilization"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100)
    v.config()
    log.adv(2, 3)
    v.tr("Using dataset class: RLHFDataset")
    log.raw("Error executing job with overrides: ['algorithm.adv_estimator=gae', 'data.train_files=/mnt/data/gsm8k/train.parquet', 'data.val_files=/mnt/data/gsm8k/test.parquet']")
    traceback(log, "", [
        ("/workspace/verl/verl/trainer/main_ppo.py", 42, "main", "run_ppo(config)"),
        ("/workspace/verl/verl/trainer/main_ppo.py", 96, "run_ppo", "ray.get(runner.run.remote(config))"),
        (f"{PY}/ray/_private/worker.py", 937, "get_objects", "raise value.as_instanceof_cause()"),
    ], "ray.exceptions.RayTaskError(FileNotFoundError): \x1b[36mray::TaskRunner.run()\x1b[39m (pid=%d, ip=%s, actor_id=1a2b3c4d5e6f7a8b9c0d1e2f01000000, repr=<main_ppo.TaskRunner object at 0x7f44d0b2c6a0>)\n  File \"/workspace/verl/verl/trainer/main_ppo.py\", line 306, in run\n    train_dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor, is_train=True)\n  File \"/workspace/verl/verl/utils/dataset/rl_dataset.py\", line 138, in _read_files_and_tokenize\n    dataframe = datasets.load_dataset(\"parquet\", data_files=parquet_file)[\"train\"]\n  File \"%s/datasets/data_files.py\", line 409, in resolve_pattern\n    raise FileNotFoundError(error_msg)\nFileNotFoundError: Unable to find '/mnt/data/gsm8k/train.parquet'" % (v.runner, v.ips[0], PY))
    log.raw("")
    log.raw("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.")


@scenario("verl_ppo_watchdog_truncated", framework="verl", state="failed", phase="actor update",
          culprit="NCCL watchdog timeout (SeqNum=7312, ALLREDUCE) — the log ends mid-line, cut while the rank was killed",
          culprit_any=["Watchdog caught collective operation timeout", "nccl-timeout", "SeqNum=7312"], fix=["stacks", "Flight Recorder", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
          quiet_for=900, wrong_claims=["dataset"])
def _(log: Log) -> None:
    v = Verl(log, algo="ppo", critic=True, steps=100)
    verl_startup(v)
    run_steps(v, 11)
    v.train_step(stop="actor update")
    log.adv(600, 601)
    watchdog_timeout(log, v.wpre(0, 5), 5, 5, 7312, "ALLREDUCE", 1, 1, full=False)
    watchdog_timeout(log, v.wpre(0, 2), 2, 2, 7312, "ALLREDUCE", 1, 1, truncate_at=len(v.wpre(0, 2)) + 150)


@scenario("verl_grpo_nan_loss", framework="verl", state="running", phase="training loop",
          culprit="actor/pg_loss became nan from step 31 on (grad_norm nan)",
          culprit_any=["nan-loss", "pg_loss:nan"], fix=["learning rate", "grad_clip", "bf16"], quiet_for=10)
def _(log: Log) -> None:
    v = Verl(log, steps=200)
    verl_startup(v)
    run_steps(v, 30)
    for _ in range(4):
        v.train_step(nan=True)


# The job hung in compute_log_prob, but a default verl run prints nothing inside a step (no vLLM
# stats, no memory lines here): the log shows only that step 9 never ended. What it supports is
# the training loop after step 8, and that only the stacks can say which part; the expectation
# asks for that, not for a sub-phase no line names ("Honest when unsure", issue 15).
@scenario("verl_grpo_megatron_old_logprob_hang", framework="verl", state="stalled", phase="training loop",
          culprit="all ranks silent after step 8 (`Training Progress 8/100`); which part of step 9 (it was compute_log_prob) only the stacks can say",
          culprit_any=["8/100", "step:8"], fix=["stacks", "py-spy"], quiet_for=2700, wrong_claims=["dataset", "NCCL_SOCKET_IFNAME"])
def _(log: Log) -> None:
    v = Verl(log, strategy="megatron", steps=100)
    verl_startup(v)
    run_steps(v, 8)
    v.train_step(stop="old log-prob")


# ======================================================================================= verl SFT
@scenario("verl_sft_torchrun_done", framework="verl-sft", state="done", phase="finished", culprit="none", fix=[], quiet_for=60)
def _(log: Log) -> None:
    verl_sft(log, steps=116)


@scenario("verl_sft_torchrun_oom", framework="verl-sft", state="failed", phase="actor update",
          culprit="torch.OutOfMemoryError on rank 3 in backward; torchrun ChildFailedError",
          culprit_any=["cuda-oom", "CUDA out of memory"], fix=["micro_batch_size_per_gpu", "max_length", "expandable_segments", "gradient checkpointing"],
          quiet_for=10, wrong_claims=["KV cache", "NCCL_SOCKET_IFNAME"])
def _(log: Log) -> None:
    verl_sft(log, steps=116, fail="oom")


# ====================================================================================== OpenRLHF
@scenario("openrlhf_ppo_vllm_done", framework="openrlhf", state="done", phase="finished", culprit="none", fix=[], quiet_for=30)
def _(log: Log) -> None:
    o = OpenRLHF(log, steps=10)
    o.startup()
    o.episode()


@scenario("openrlhf_ppo_weight_sync_hang", framework="openrlhf", state="stalled", phase="weight sync",
          culprit="broadcast of actor weights to the vLLM engines never finished (engines woke weights, no kv_cache wake)",
          culprit_any=["broadcast", "weight sync", "wake up"], fix=["vllm_sync_backend", "stacks", "NCCL"], quiet_for=1800)
def _(log: Log) -> None:
    o = OpenRLHF(log, steps=20)
    o.startup()
    o.episode(hang_at=6)


# The batch sizes are a config mistake, but the assertion fires in PolicyModelActor.fit(), after
# every model and engine loaded (minutes into the run): issue 15 places a failure where it happened,
# so the phase is the training loop (before its first step) and the config is the culprit and fix.
@scenario("openrlhf_ppo_rollouts_zero", framework="openrlhf", state="failed", phase="training loop",
          culprit="AssertionError: num_rollouts_per_episodes should be > 0 (rollout batch smaller than train batch)",
          culprit_any=["rollouts-per-episode-zero", "num_rollouts_per_episodes"], fix=["train_batch_size", "rollout_batch_size"], quiet_for=10,
          wrong_claims=["NCCL", "CUDA out of memory"])
def _(log: Log) -> None:
    o = OpenRLHF(log, steps=20)
    o.startup(rollout_batch=16, n_samples=1, train_batch=128)
    pre = log.prefix("PolicyModelActor", pid=log.pid("PolicyModelActor0"))
    log.raw("Traceback (most recent call last):")
    frame_lines(log, "", [
        (f"{PY}/openrlhf/cli/train_ppo_ray.py", 473, "<module>", "train(args)"),
        (f"{PY}/openrlhf/cli/train_ppo_ray.py", 180, "train", "ray.get(refs)"),
        (f"{PY}/ray/_private/worker.py", 937, "get_objects", "raise value.as_instanceof_cause()"),
    ])
    log.raw(f"ray.exceptions.RayTaskError(AssertionError): \x1b[36mray::PolicyModelActor.fit()\x1b[39m (pid={log.pid('PolicyModelActor0')}, ip=10.8.0.21, actor_id=0a1b2c3d4e5f6a7b8c9d0e1f01000000, repr=<openrlhf.trainer.ray.ppo_actor.PolicyModelActor object at 0x7f1c2d3e4f50>)")
    log.raw(f"  File \"{PY}/openrlhf/trainer/ppo_trainer.py\", line 231, in fit")
    log.raw("    assert num_rollouts_per_episodes > 0, \"num_rollouts_per_episodes should be > 0\"")
    log.raw("AssertionError: num_rollouts_per_episodes should be > 0")
    _ = pre


# ======================================================================================= EasyR1
@scenario("easyr1_grpo_done", framework="easyr1", state="done", phase="finished", culprit="none", fix=[], quiet_for=20)
def _(log: Log) -> None:
    easyr1(log, steps=12)


@scenario("easyr1_grpo_ref_oom", framework="easyr1", state="failed", phase="reference log-prob",
          culprit="CUDA out of memory in compute_ref_log_probs (ref forward on a 9 GiB logits tensor)",
          culprit_any=["cuda-oom", "CUDA out of memory"], fix=["micro_batch_size_per_device_for_experience", "micro batch", "expandable_segments", "offload"],
          quiet_for=10, wrong_claims=["KV cache", "wake_up"])
def _(log: Log) -> None:
    easyr1(log, steps=12, fail_step=4)


# ========================================================================================== TRL
@scenario("trl_grpo_vllm_server_done", framework="trl", state="done", phase="finished", culprit="none", fix=[], quiet_for=30)
def _(log: Log) -> None:
    trl_vllm_server(log)
    log.adv(30, 40)
    trl_grpo(log, steps=20, server_log=True, n_params=290)


@scenario("trl_grpo_vllm_server_unreachable", framework="trl", state="failed", phase="rollout init",
          culprit="ConnectionError: the vLLM server can't be reached at http://10.0.4.9:8000 after 240 s",
          culprit_any=["can't be reached", "ConnectionError"], fix=["vllm-serve", "vllm_server_host", "port"], quiet_for=10,
          wrong_claims=["dataset", "CUDA out of memory"])
def _(log: Log) -> None:
    trl_grpo(log, server_up=False)


@scenario("trl_grpo_loss_oom", framework="trl", state="failed", phase="actor update",
          culprit="torch.OutOfMemoryError on rank 3 in GRPO's loss (log_softmax over the vocabulary) at step 14; accelerate's ChildFailedError",
          culprit_any=["cuda-oom", "CUDA out of memory"], fix=["gradient checkpointing", "expandable_segments", "micro batch"],
          quiet_for=20, wrong_claims=["KV cache", "NCCL_SOCKET_IFNAME", "dataset", "wake_up"])
def _(log: Log) -> None:
    trl_grpo(log, steps=60, oom_at=14)


# =================================================================================== HF / DeepSpeed
@scenario("llamafactory_sft_deepspeed_done", framework="llamafactory", state="done", phase="finished", culprit="none", fix=[], quiet_for=60)
def _(log: Log) -> None:
    llamafactory(log, steps=240)


@scenario("hf_trainer_deepspeed_sigabrt", framework="hf-trainer", state="failed", phase="training loop",
          culprit="rank 5 aborted: Fatal Python error: Aborted (terminate called ... cudaErrorLaunchFailure); torchrun reports Signal 6 (SIGABRT)",
          culprit_any=["Fatal Python error: Aborted", "SIGABRT", "Signal 6"], fix=["CUDA_LAUNCH_BLOCKING", "driver", "dmesg"], quiet_for=10,
          wrong_claims=["dataset", "KV cache"])
def _(log: Log) -> None:
    torchrun_banner(log, 8)
    log.raw(f"[{log.pylog_ts()}] [INFO] [real_accelerator.py:222:get_accelerator] Setting ds_accelerator to cuda (auto detect)")
    log.adv(20, 30)
    log.raw(f"[{log.pylog_ts()}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.15.4, git-hash=unknown, git-branch=unknown")
    log.raw(f"[{log.pylog_ts()}] [INFO] [logging.py:128:log_dist] [Rank 0] Creating ZeRO stage 2 optimizer")
    log.raw("***** Running training *****")
    log.raw("  Num examples = 52,002")
    log.raw("  Total optimization steps = 1,218")
    el = 0.0
    buf = ""
    for s in range(0, 141):
        buf += "\r" + tqdm_bar("", s, 1218, el)[2:]
        dt = log.rng.uniform(2.8, 3.3)
        log.adv(dt)
        el += dt
        if s and s % 10 == 0:
            log.raw(buf)
            buf = ""
            log.raw(str({"loss": round(log.rng.uniform(0.9, 1.3), 4), "grad_norm": round(log.rng.uniform(0.5, 2), 4), "learning_rate": 2e-05, "epoch": round(s / 406, 2)}))
    log.raw(buf)
    log.raw("terminate called after throwing an instance of 'c10::Error'")
    log.raw("  what():  CUDA error: unspecified launch failure")
    log.raw("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
    log.raw("For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
    log.raw("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
    log.raw("")
    log.raw("Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):")
    log.raw("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f6c8d96c446 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)")
    log.raw("frame #1: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x43 (0x7f6c8d9a1b23 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10_cuda.so)")
    fatal_signal(log, "", "Aborted", 4242, [
        (f"{PY}/torch/autograd/graph.py", 825, "_engine_run_backward"),
        (f"{PY}/torch/autograd/__init__.py", 347, "backward"),
        (f"{PY}/deepspeed/runtime/engine.py", 2198, "backward"),
        (f"{PY}/accelerate/accelerator.py", 2450, "backward"),
        (f"{PY}/transformers/trainer.py", 3790, "training_step"),
        (f"{PY}/transformers/trainer.py", 2560, "_inner_training_loop"),
        ("/workspace/train.py", 201, "main"),
    ])
    log.adv(5, 10)
    torchrun_child_failed(log, "/workspace/train.py", 5, 5, "dgx-h100-03", -6, signal_name="SIGABRT")


# ============================================================================================= Ray
@scenario("ray_worker_register_timeout", framework="verl", state="stalled", phase="worker-group creation",
          culprit="raylet: workers of the worker process have not registered within the timeout (runtime_env pip install per worker)",
          culprit_any=["ray-worker-register-slow", "have not registered within the timeout"], fix=["runtime_env", "RAY_worker_register_timeout_seconds"],
          quiet_for=120, wrong_claims=["dataset", "NCCL"])
def _(log: Log) -> None:
    v = Verl(log, steps=100)
    v.config()
    v.dataset()
    v.worker_group()
    for _ in range(30):
        pid = log.rng.randint(300000, 400000)
        log.raw(f"(raylet) [{log.pylog_ts(True)} E 1877 1877] (raylet) worker_pool.cc:588: Some workers of the worker process({pid}) have not registered within the timeout. The process is still alive, probably it's hanging during start.")
        log.adv(60, 62)


@scenario("ray_job_failed_node_died", framework="verl", state="failed", phase="training loop",
          culprit="worker node 10.x died (ActorDiedError: node ... was terminated); Ray Job 'raysubmit_...' failed",
          culprit_any=["ray-actor-died", "ActorDiedError", "failed with"], fix=["node", "dmesg", "raylet"], quiet_for=20,
          wrong_claims=["dataset", "CUDA out of memory"])
def _(log: Log) -> None:
    log.raw(f"{log.pylog_ts()}\tINFO job_manager.py:531 -- Runtime env is setting up.")
    log.raw("Job submission server address: http://10.0.0.11:8265")
    v = Verl(log, algo="ppo", nodes=2, critic=True, steps=100)
    v.ips[0] = "10.0.0.11"
    verl_startup(v)
    run_steps(v, 14)
    v.train_step(stop="actor update")
    log.adv(50, 60)
    ip1 = v.ips[1]
    log.raw(f"(raylet) [{log.pylog_ts(True)} E 1500 1500] (raylet) The node with node id: 3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f and address: {ip1} and node name: {ip1} has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.")
    log.raw("ray.exceptions.RayTaskError(ActorDiedError): \x1b[36mray::TaskRunner.run()\x1b[39m (pid=%d, ip=10.0.0.11, actor_id=7f6b2c1d9e8a4b3c2d1e0f9a01000000, repr=<main_ppo.TaskRunner object at 0x7f9a1c3e2b50>)" % v.runner)
    log.raw("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    log.raw("\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict")
    log.raw(f"\tpid: {v.worker_pids[1][0]}")
    log.raw(f"\tip: {ip1}")
    log.raw("The actor died because its node has died. Node Id: 3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f")
    log.raw("\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats")
    log.adv(1, 2)
    log.raw("")
    log.raw("------------------------------------------")
    log.raw("Job 'raysubmit_Xk2pQ9vLm4TnR8wa' failed")
    log.raw("------------------------------------------")
    log.raw("")
    log.raw("Status message: Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):")
    _ = ray_connect


# ============================================================================================ write
START = "2025-06-{d:02d}T{h:02d}:{m:02d}:{s:02d}.{us:06d}"


def main() -> None:
    names = [n.strip() for n in (HERE / "NAMES").read_text().split() if n.strip()]
    missing = set(names) - set(SCENARIOS)
    if missing:
        raise SystemExit(f"no scenario for: {sorted(missing)}")
    for i, name in enumerate(names):
        fn, expect = SCENARIOS[name]
        seed = sum(map(ord, name))
        # Some logs print container-local stamps 8 h off the driver's (vLLM / logging inside the
        # rollout containers run in UTC, the host in UTC+8), and some keep Ray's ANSI colours.
        tz = 8.0 if i % 5 == 2 else 0.0
        ansi = i % 4 == 1
        start = START.format(d=1 + i % 27, h=(i * 7) % 24, m=(i * 13) % 60, s=(i * 31) % 60, us=(i * 7919) % 1000000)
        log = Log(start, seed=seed, tz_shift_h=tz, ansi=ansi)
        fn(log)
        (HERE / f"{name}.log").write_text(log.text())
        doc = {"framework": expect["framework"], "state": expect["state"], "phase": expect["phase"],
               "culprit": expect["culprit"], "culprit_any": expect.get("culprit_any", []), "fix": expect["fix"],
               "wrong_claims": expect.get("wrong_claims", []), "quiet_for": expect["quiet_for"],
               "clock": {"ends_at": log.t.isoformat(timespec="seconds"), "tz_shift_h": tz, "ansi": ansi}}
        (HERE / f"{name}.expect.yaml").write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=110))
    print(f"wrote {len(names)} logs")


if __name__ == "__main__":
    main()
