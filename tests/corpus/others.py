# ruff: noqa: E501, UP031  (log lines are as long as the frameworks print them; %-format where the text has braces)
"""Writers for the non-verl frameworks: torchrun + verl SFT, OpenRLHF, EasyR1, TRL, LLaMA-Factory."""

from __future__ import annotations

from .logkit import Log, frame_lines, tqdm_bar

PY = "/usr/local/lib/python3.10/dist-packages"


# ---------------------------------------------------------------------------------------------
# torchrun (torch.distributed.run / elastic): python logging 'W0612 10:31:02.123000 123 torch/...'
# ---------------------------------------------------------------------------------------------
def torchrun_banner(log: Log, nproc: int) -> None:
    pid = log.pid("torchrun")
    log.raw(f"W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d} {pid} torch/distributed/run.py:766] ")
    log.raw(f"W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d} {pid} torch/distributed/run.py:766] *****************************************")
    log.raw(f"W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d} {pid} torch/distributed/run.py:766] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. ")
    log.raw(f"W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d} {pid} torch/distributed/run.py:766] *****************************************")


def torchrun_child_failed(log: Log, script: str, rank: int, local_rank: int, host: str, exitcode: int,
                          signal_name: str | None = None, nproc: int = 8, launcher: str = "torchrun") -> None:
    """torch elastic's summary of a failed child; `launcher`: torchrun, or `accelerate launch`
    (whose multi-GPU launcher calls torch.distributed.run in-process: its frames, then the same)."""
    pid = log.pid("torchrun")
    child = log.pid(f"child{rank}")
    ts = f"{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d}"
    if signal_name:
        log.raw(f"W{ts} {pid} torch/distributed/elastic/multiprocessing/api.py:897] Sending process {child + 1} closing signal SIGTERM")
        log.raw(f"E{ts} {pid} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: {exitcode}) local_rank: {local_rank} (pid: {child}) of binary: /usr/bin/python3")
    else:
        for lr in range(nproc):
            if lr != local_rank:
                log.raw(f"W{ts} {pid} torch/distributed/elastic/multiprocessing/api.py:897] Sending process {child + lr + 1} closing signal SIGTERM")
        log.raw(f"E{ts} {pid} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: {exitcode}) local_rank: {local_rank} (pid: {child}) of binary: /usr/bin/python3")
    log.raw("Traceback (most recent call last):")
    log.raw(f"  File \"/usr/local/bin/{launcher}\", line 8, in <module>")
    log.raw("    sys.exit(main())")
    if launcher == "accelerate":
        frame_lines(log, "", [
            (f"{PY}/accelerate/commands/accelerate_cli.py", 50, "main", "args.func(args)"),
            (f"{PY}/accelerate/commands/launch.py", 1182, "launch_command", "multi_gpu_launcher(args)"),
            (f"{PY}/accelerate/commands/launch.py", 809, "multi_gpu_launcher", "distrib_run.run(args)"),
            (f"{PY}/torch/distributed/run.py", 909, "run", "elastic_launch("),
            (f"{PY}/torch/distributed/launcher/api.py", 138, "__call__", "return launch_agent(self._config, self._entrypoint, list(args))"),
        ])
    else:
        log.raw(f"  File \"{PY}/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 355, in wrapper")
        log.raw("    return f(*args, **kwargs)")
        log.raw(f"  File \"{PY}/torch/distributed/run.py\", line 918, in main")
        log.raw("    run(args)")
    log.raw(f"  File \"{PY}/torch/distributed/launcher/api.py\", line 265, in launch_agent")
    log.raw("    raise ChildFailedError(")
    log.raw("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    log.raw("============================================================")
    log.raw(f"{script} FAILED")
    log.raw("------------------------------------------------------------")
    log.raw("Failures:")
    log.raw("  <NO_OTHER_FAILURES>")
    log.raw("------------------------------------------------------------")
    log.raw("Root Cause (first observed failure):")
    log.raw("[0]:")
    log.raw(f"  time      : {log.t:%Y-%m-%d_%H:%M:%S}")
    log.raw(f"  host      : {host}")
    log.raw(f"  rank      : {rank} (local_rank: {local_rank})")
    log.raw(f"  exitcode  : {exitcode} (pid: {child})")
    log.raw("  error_file: <N/A>")
    if signal_name:
        log.raw(f"  traceback : Signal {-exitcode} ({signal_name}) received by PID {child}")
    else:
        log.raw("  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    log.raw("============================================================")


def verl_sft(log: Log, *, steps: int = 120, fail: str | None = None, nproc: int = 8, host: str = "gpu-a100-17") -> None:
    """verl/trainer/fsdp_sft_trainer.py under torchrun; tqdm on rank 0 written with '\\r' only."""
    torchrun_banner(log, nproc)
    log.adv(8, 12)
    log.raw("Normalize batch size by dp 8")
    log.raw("Using sequence parallel size: 1")
    log.raw("Using remove padding: True")
    log.raw("Using FSDP rank 0 and size 8 for data distribution")
    log.raw("{'data': {'train_batch_size': 256, 'micro_batch_size_per_gpu': 4, 'train_files': '/mnt/data/gsm8k/train.parquet', 'val_files': '/mnt/data/gsm8k/test.parquet', 'prompt_key': 'extra_info', 'response_key': 'extra_info', 'max_length': 2048, 'truncation': 'error'}, 'model': {'partial_pretrain': '/mnt/models/Qwen2.5-3B-Instruct', 'fsdp_config': {'wrap_policy': {'min_num_params': 0}, 'cpu_offload': False, 'offload_params': False}, 'enable_gradient_checkpointing': True}, 'optim': {'lr': 1e-05, 'betas': [0.9, 0.95], 'weight_decay': 0.01, 'warmup_steps_ratio': 0.1, 'clip_grad': 1.0}, 'trainer': {'default_local_dir': '/mnt/ckpt/sft/qwen3b', 'project_name': 'gsm8k-sft', 'experiment_name': 'gsm8k-sft-qwen-2.5-3b-instruct', 'total_epochs': 4, 'logger': ['console'], 'seed': 1}}")
    log.adv(2, 4)
    log.raw("dataset len: 7473")
    log.raw("dataset len: 1319")
    log.adv(5, 10)
    log.raw("functools.partial(<function transformer_auto_wrap_policy at 0x7f7d2f3a1c60>, transformer_layer_cls={<class 'transformers.models.qwen2.modeling_qwen2.Qwen2DecoderLayer'>})")
    log.raw(f"Number of steps/epoch {steps // 4}, number of epochs 4, total number of steps {steps}")
    log.adv(20, 30)
    per_epoch = steps // 4
    step = 0
    for ep in range(4):
        buf = ""
        el = 0.0
        for k in range(per_epoch + 1):
            buf += "\r" + tqdm_bar(f"Epoch {ep + 1}/4", k, per_epoch, el)
            if k == per_epoch:
                break
            dt = log.rng.uniform(3.2, 3.9)
            log.adv(dt)
            el += dt
            step += 1
            if fail == "oom" and ep == 1 and k == 7:
                log.raw(buf)
                _sft_oom(log, host, nproc)
                return
            loss = log.rng.uniform(0.2, 0.6) * (1 - 0.1 * ep)
            buf += f"\nstep:{step} - train/loss:{loss:.3f} - train/lr(1e-3):{0.01:.3f}"
            if log.rng.random() < 0.3:
                log.raw(buf)
                buf = ""
        log.raw(buf)
        log.raw(f"step:{step} - val/loss:{log.rng.uniform(0.3, 0.5):.3f}")
        log.adv(30, 40)
        log.raw(f"Saving checkpoint to: /mnt/ckpt/sft/qwen3b/global_step_{step}")
        log.raw(f"Saved dataloader state to: /mnt/ckpt/sft/qwen3b/global_step_{step}/data.pt")
        log.raw("Updated checkpoint tracker: /mnt/ckpt/sft/qwen3b/latest_checkpointed_iteration.txt")
    log.raw(f"Total time for train steps: {step * 3.5:.2f}s")
    log.raw(f"Final validation metrics: {{'val/loss': {log.rng.uniform(0.3, 0.4):.4f}}}")


def _sft_oom(log: Log, host: str, nproc: int) -> None:
    for rank in (3,):
        pre = f"[rank{rank}]: "
        log.raw(f"{pre}Traceback (most recent call last):")
        frame_lines(log, pre, [
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 833, "<module>", "main()"),
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 826, "main", "run_sft(config)"),
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 815, "run_sft", "trainer.fit()"),
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 771, "fit", "metric = self.training_step(data)"),
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 489, "training_step", "loss = self._compute_loss_and_backward(batch=micro_batch) / n_micro_batches"),
            ("/workspace/verl/verl/trainer/fsdp_sft_trainer.py", 440, "_compute_loss_and_backward", "loss.backward()"),
            (f"{PY}/torch/_tensor.py", 648, "backward", "torch.autograd.backward("),
            (f"{PY}/torch/autograd/graph.py", 829, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
        ])
        log.raw(f"{pre}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.64 GiB. GPU {rank} has a total capacity of 79.15 GiB of which 2.91 GiB is free. Including non-PyTorch memory, this process has 76.23 GiB memory in use. Of the allocated memory 70.48 GiB is allocated by PyTorch, and 4.92 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    log.adv(2, 4)
    log.raw(f"[rank0]:[W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d}123 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())")
    log.adv(3, 6)
    torchrun_child_failed(log, "verl.trainer.fsdp_sft_trainer", 3, 3, host, 1, nproc=nproc)


# ---------------------------------------------------------------------------------------------
# OpenRLHF (openrlhf/cli/train_ppo_ray.py): logging '%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s'
# ---------------------------------------------------------------------------------------------
class OpenRLHF:
    def __init__(self, log: Log, *, engines: int = 4, tp: int = 2, episodes: int = 1, steps: int = 12,
                 ip: str = "10.8.0.21") -> None:
        self.log, self.engines, self.tp, self.steps, self.ip = log, engines, tp, steps, ip
        self.episodes = episodes

    def info(self, src: str, msg: str, actor: str = "PolicyModelActor", rank: int = 0) -> None:
        pre = self.log.prefix(actor, pid=self.log.pid(f"{actor}{rank}"))
        self.log.raw(f"{pre}INFO {self.log.shifted():%m-%d %H:%M:%S} {src}] {msg}")

    def startup(self, rollout_batch: int = 1024, n_samples: int = 4, train_batch: int = 128) -> None:
        log = self.log
        log.raw(f"{log.pylog_ts()}\tINFO worker.py:1852 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 ")
        log.raw(f"Namespace(ref_num_nodes=1, ref_num_gpus_per_node=8, reward_num_nodes=1, reward_num_gpus_per_node=8, critic_num_nodes=1, critic_num_gpus_per_node=8, actor_num_nodes=1, actor_num_gpus_per_node=8, vllm_num_engines={self.engines}, vllm_tensor_parallel_size={self.tp}, vllm_sync_backend='nccl', vllm_gpu_memory_utilization=0.6, enable_prefix_caching=False, enforce_eager=False, colocate_all_models=True, vllm_enable_sleep=True, deepspeed_enable_sleep=True, zero_stage=3, bf16=True, pretrain='/mnt/models/Llama-3-8b-sft-mixture', reward_pretrain='/mnt/models/Llama-3-8b-rm-700k', save_path='./checkpoint/llama3-8b-rlhf', micro_train_batch_size=8, train_batch_size={train_batch}, micro_rollout_batch_size=16, rollout_batch_size={rollout_batch}, n_samples_per_prompt={n_samples}, max_epochs=1, num_episodes=1, prompt_max_len=1024, generate_max_len=1024, actor_learning_rate=5e-07, critic_learning_rate=9e-06, init_kl_coef=0.01, advantage_estimator='gae', prompt_data='OpenRLHF/prompt-collection-v0.1', input_key='context_messages', apply_chat_template=True, max_samples=100000, packing_samples=True, use_wandb=None)")
        log.adv(3, 6)
        for i in range(self.engines):
            log.raw(f"{log.prefix('LLMRayActor', pid=log.pid(f'llm{i}'))}creating LLM with bundle_indices=[{i * self.tp}, {i * self.tp + 1}]")
        for i in range(self.engines):
            pre = log.prefix("LLMRayActor", pid=log.pid(f"llm{i}"))
            log.vllm("INFO", "config.py:1472", "Using max model len 2048", pre=pre)
            log.vllm("INFO", "llm_engine.py:240", "Initializing a V0 LLM engine (v0.8.5.post1) with config: model='/mnt/models/Llama-3-8b-sft-mixture', speculative_config=None, tokenizer='/mnt/models/Llama-3-8b-sft-mixture', dtype=torch.bfloat16, max_seq_len=2048, tensor_parallel_size=2, pipeline_parallel_size=1, enforce_eager=False, seed=42, enable_prefix_caching=False", pre=pre)
            log.adv(2, 4)
            log.vllm("INFO", "model_runner.py:1110", "Starting to load model /mnt/models/Llama-3-8b-sft-mixture...", pre=pre)
            log.adv(5, 8)
            log.vllm("INFO", "model_runner.py:1146", "Model loading took 7.5122 GiB and 6.013102 seconds", pre=pre)
            log.vllm("INFO", "worker.py:267", "Memory profiling takes 2.61 seconds", pre=pre)
            log.vllm("INFO", "worker.py:267", "the current vLLM instance can use total_gpu_memory (79.15GiB) x gpu_memory_utilization (0.60) = 47.49GiB", pre=pre)
            log.vllm("INFO", "worker.py:267", "model weights take 7.51GiB; non_torch_memory takes 1.21GiB; PyTorch activation peak memory takes 1.48GiB; the rest of the memory reserved for KV Cache is 37.29GiB.", pre=pre)
            log.vllm("INFO", "executor_base.py:112", "# cuda blocks: 19092, # CPU blocks: 2048", pre=pre)
            log.vllm("INFO", "executor_base.py:117", "Maximum concurrency for 2048 tokens per request: 149.16x", pre=pre)
            log.vllm("INFO", "model_runner.py:1456", "Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use '--enforce-eager' in the CLI. If out-of-memory error occurs during cudagraph capture, consider decreasing `gpu_memory_utilization` or switching to eager mode. You can also reduce the `max_num_seqs` as needed to decrease memory usage.", pre=pre)
            log.adv(15, 25)
            log.vllm("INFO", "model_runner.py:1598", "Graph capturing finished in 19 secs, took 0.41 GiB", pre=pre)
            log.vllm("INFO", "llm_engine.py:437", "init engine (profile, create kv cache, warmup model) took 26.45 seconds", pre=pre)
            log.vllm("INFO", "worker.py:133", "Sleep mode freed 44.12 GiB memory, 1.53 GiB memory is still in use.", pre=pre)
            log.vllm("INFO", "executor_base.py:208", "It took 1.217405 seconds to fall asleep.", pre=pre)
        for actor in ("PolicyModelActor", "ReferenceModelActor", "RewardModelActor", "CriticModelActor"):
            log.adv(3, 6)
            pre = log.prefix(actor, pid=log.pid(f"{actor}0"))
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [real_accelerator.py:222:get_accelerator] Setting ds_accelerator to cuda (auto detect)")
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [comm.py:658:init_distributed] cdb=None")
            if actor == "PolicyModelActor":
                log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [comm.py:689:init_distributed] Initializing TorchBackend in DeepSpeed with backend nccl")
            log.adv(20, 40)
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.16.4, git-hash=unknown, git-branch=unknown")
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [config.py:734:__init__] Config mesh_device None world_size = 8")
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [engine.py:1325:_configure_optimizer] Using client Optimizer as basic optimizer")
            log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [stage3.py:167:__init__] Reduce bucket size 500000000")
        self.info("ppo_actor.py:115", "Broadcast actor weights to vLLM engines: using nccl group 'openrlhf', world_size 9")
        log.adv(2, 4)

    def broadcast(self, hang: bool = False) -> None:
        log = self.log
        for i in range(self.engines):
            pre = log.prefix("LLMRayActor", pid=log.pid(f"llm{i}"))
            log.vllm("INFO", "executor_base.py:224", f"It took {log.rng.uniform(0.2, 0.6):.6f} seconds to wake up tags ['weights'].", pre=pre)
        if hang:
            return
        log.adv(8, 15)
        for i in range(self.engines):
            pre = log.prefix("LLMRayActor", pid=log.pid(f"llm{i}"))
            log.vllm("INFO", "executor_base.py:224", f"It took {log.rng.uniform(0.5, 1.2):.6f} seconds to wake up tags ['kv_cache'].", pre=pre)

    def episode(self, hang_at: int | None = None, fail_at: int | None = None) -> None:
        log = self.log
        pre = log.prefix("PolicyModelActor", pid=log.pid("PolicyModelActor0"))
        el = 0.0
        for step in range(1, self.steps + 1):
            self.broadcast(hang=hang_at == step)
            if hang_at == step:
                return
            log.raw(tqdm_bar("Episode [1/1]", step - 1, self.steps, el))
            dt = log.rng.uniform(60, 90)
            log.adv(dt * 0.5)
            for i in range(self.engines):
                epre = log.prefix("LLMRayActor", pid=log.pid(f"llm{i}"))
                log.raw(epre + tqdm_bar("Processed prompts", 256, 256, 31.2, unit_rate="8.20it/s", postfix=f"est. speed input: {log.rng.uniform(1500, 2500):.2f} toks/s, output: {log.rng.uniform(5000, 8000):.2f} toks/s"))
            for i in range(self.engines):
                epre = log.prefix("LLMRayActor", pid=log.pid(f"llm{i}"))
                log.vllm("INFO", "executor_base.py:208", f"It took {log.rng.uniform(1, 2):.6f} seconds to fall asleep.", pre=epre)
            log.adv(dt * 0.2)
            log.raw(pre + tqdm_bar("Train epoch [1/1]", 16, 16, dt * 0.3, postfix=f"policy_loss=-0.0{log.rng.randint(10, 99)}, actor_lr=5e-7, ppo_clip_ratio=0.00{log.rng.randint(1, 9)}, kl=0.000{log.rng.randint(1, 9)}"))
            log.adv(dt * 0.3)
            el += dt
            log.raw(f"{pre}INFO {log.shifted():%m-%d %H:%M:%S} ppo_trainer.py:547] ✨ Global step {step}: {{'policy_loss': -0.0{log.rng.randint(10, 99)}, 'actor_lr': 5e-07, 'clip_ratio': 0.00{log.rng.randint(1, 9)}, 'kl': 0.000{log.rng.randint(1, 9)}, 'reward': {log.rng.uniform(-1, 1):.4f}, 'return': {log.rng.uniform(-1, 1):.4f}, 'response_length': {log.rng.uniform(300, 500):.1f}, 'total_length': {log.rng.uniform(400, 700):.1f}, 'critic_loss': 0.0{log.rng.randint(10, 99)}, 'values': {log.rng.uniform(-1, 1):.4f}}}")
        log.raw(tqdm_bar("Episode [1/1]", self.steps, self.steps, el))
        log.adv(20, 40)
        pre = log.prefix("PolicyModelActor", pid=log.pid("PolicyModelActor0"))
        log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [logging.py:128:log_dist] [Rank 0] [Torch] Checkpoint global_step{self.steps} is about to be saved!")
        log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [engine.py:3536:_save_zero_checkpoint] zero checkpoint saved ./ckpt/checkpoints_ppo/_actor/global_step{self.steps}/zero_pp_rank_0_mp_rank_00_optim_states.pt")
        log.raw(f"{pre}[{log.pylog_ts(True)}] [INFO] [torch_checkpoint_engine.py:43:commit] [Torch] Checkpoint global_step{self.steps} is ready now!")


# ---------------------------------------------------------------------------------------------
# EasyR1 (verl/trainer/main.py): config as JSON, 'Running step' tqdm, metrics as YAML blocks
# ---------------------------------------------------------------------------------------------
def easyr1(log: Log, *, steps: int = 15, fail_step: int | None = None) -> None:
    log.raw(f"{log.pylog_ts()}\tINFO worker.py:1852 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 ")
    runner = log.prefix("Runner", pid=log.pid("Runner"))
    cfg = ['{', '  "data": {', '    "train_files": "hiyouga/geometry3k@train",', '    "val_files": "hiyouga/geometry3k@test",', '    "prompt_key": "problem",', '    "answer_key": "answer",', '    "image_key": "images",', '    "max_prompt_length": 2048,', '    "max_response_length": 2048,', '    "rollout_batch_size": 512,', '    "format_prompt": "./examples/format_prompt/math.jinja"', '  },', '  "algorithm": {', '    "adv_estimator": "grpo",', '    "kl_coef": 0.01', '  },', '  "worker": {', '    "actor": {', '      "global_batch_size": 128,', '      "micro_batch_size_per_device_for_update": 4,', '      "micro_batch_size_per_device_for_experience": 16,', '      "model": {', '        "model_path": "Qwen/Qwen2.5-VL-7B-Instruct"', '      }', '    },', '    "rollout": {', '      "n": 5,', '      "gpu_memory_utilization": 0.6,', '      "tensor_parallel_size": 2', '    }', '  },', '  "trainer": {', '    "total_epochs": 15,', '    "max_steps": null,', '    "project_name": "easy_r1",', '    "experiment_name": "qwen2_5_vl_7b_geo_grpo",', '    "n_gpus_per_node": 8,', '    "nnodes": 1,', '    "save_freq": 5,', '    "val_freq": 5,', '    "val_before_train": true', '  }', '}']
    for c in cfg:
        log.raw(runner + c)
    log.adv(20, 40)
    for i in range(3):
        log.raw(runner + tqdm_bar("Generating train split", [0, 1100, 2101][i], 2101, i * 0.8 + 0.01, unit_rate="1402.33 examples/s"))
    log.raw(runner + f"Total training steps: {steps}")
    wk = log.prefix("WorkerDict", pid=log.pid("wd0"))
    log.adv(20, 40)
    for k in range(0, 6):
        log.raw(wk + tqdm_bar("Loading checkpoint shards", k, 5, k * 2.2 + 0.01))
    log.raw(wk + "Qwen2_5_VLForConditionalGeneration contains 8.29B parameters")
    log.adv(30, 50)
    log.vllm("INFO", "llm_engine.py:240", "Initializing a V0 LLM engine (v0.8.4) with config: model='Qwen/Qwen2.5-VL-7B-Instruct', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=2, enforce_eager=False", pre=wk)
    log.adv(10, 20)
    log.vllm("INFO", "model_runner.py:1146", "Model loading took 7.8123 GiB and 5.337829 seconds", pre=wk)
    log.vllm("INFO", "executor_base.py:112", "# cuda blocks: 21455, # CPU blocks: 4681", pre=wk)
    log.vllm("INFO", "model_runner.py:1598", "Graph capturing finished in 22 secs, took 0.75 GiB", pre=wk)
    log.vllm("INFO", "llm_engine.py:437", "init engine (profile, create kv cache, warmup model) took 39.81 seconds", pre=wk)
    log.raw(runner + "Start validation...")
    log.adv(60, 90)
    log.raw(runner + "Finish validation.")
    log.raw(runner + "Initial validation metrics:")
    log.raw(runner + "val:")
    log.raw(runner + f"  accuracy_reward: {log.rng.uniform(0.3, 0.4):.4f}")
    log.raw(runner + f"  format_reward: {log.rng.uniform(0.5, 0.9):.4f}")
    el = 0.0
    for step in range(1, steps + 1):
        log.raw(runner + tqdm_bar("Running step", step - 1, steps, el))
        log.raw(runner + "Start generating batch...")
        log.adv(60, 100)
        log.raw(wk + tqdm_bar("Processed prompts", 2560, 2560, 71.3, unit_rate="35.90it/s", postfix=f"est. speed input: 5211.22 toks/s, output: {log.rng.uniform(9000, 12000):.2f} toks/s"))
        log.raw(runner + "current_batch_size=512 >= rollout_batch_size=512. Finish generating.")
        if fail_step == step:
            _easyr1_ref_oom(log, runner, wk)
            return
        dt = log.rng.uniform(180, 260)
        log.adv(dt)
        el += dt + 80
        log.raw(runner + f"Step {step}")
        for blk in (["actor:", f"  entropy_loss: {log.rng.uniform(0.6, 0.9):.4f}", f"  grad_norm: {log.rng.uniform(0.1, 0.4):.4f}", f"  kl_loss: {log.rng.uniform(0.0, 0.01):.5f}", "  lr: 1.0e-06", f"  pg_loss: {log.rng.uniform(-0.02, 0.02):.5f}"],
                    ["reward:", f"  accuracy: {log.rng.uniform(0.3, 0.7):.4f}", f"  format: {log.rng.uniform(0.8, 1):.4f}", f"  overall: {log.rng.uniform(0.4, 0.8):.4f}"],
                    ["timing_s:", f"  adv: {log.rng.uniform(0.1, 0.4):.4f}", f"  gen: {log.rng.uniform(60, 100):.4f}", f"  old: {log.rng.uniform(20, 30):.4f}", f"  ref: {log.rng.uniform(15, 25):.4f}", f"  reward: {log.rng.uniform(2, 6):.4f}", f"  step: {dt + 80:.4f}", f"  update_actor: {log.rng.uniform(100, 150):.4f}"]):
            for b in blk:
                log.raw(runner + b)
        if step % 5 == 0:
            log.raw(runner + "Start validation...")
            log.adv(60, 90)
            log.raw(runner + "Finish validation.")
            log.adv(40, 60)
    log.raw(runner + tqdm_bar("Running step", steps, steps, el))
    log.raw(runner + "Final validation metrics:")
    log.raw(runner + "val:")
    log.raw(runner + f"  accuracy_reward: {log.rng.uniform(0.45, 0.5):.4f}")
    log.raw(runner + f"  format_reward: {log.rng.uniform(0.9, 1):.4f}")


def _easyr1_ref_oom(log: Log, runner: str, wk: str) -> None:
    log.adv(20, 30)
    log.raw("Traceback (most recent call last):")
    for fr in [
        ("/opt/EasyR1/verl/trainer/main.py", 115, "main", "ray.get(runner.run.remote(ppo_config))"),
        (f"{PY}/ray/_private/worker.py", 2822, "get", "values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)"),
        (f"{PY}/ray/_private/worker.py", 930, "get_objects", "raise value.as_instanceof_cause()"),
    ]:
        log.raw(f"  File \"{fr[0]}\", line {fr[1]}, in {fr[2]}")
        log.raw(f"    {fr[3]}")
    log.raw("ray.exceptions.RayTaskError(OutOfMemoryError): \x1b[36mray::Runner.run()\x1b[39m (pid=%d, ip=10.3.1.7, actor_id=a1b2c3d4e5f6a7b8c9d0e1f201000000, repr=<main.Runner object at 0x7f1b2c3d4e50>)" % log.pid("Runner"))
    for fr in [
        ("/opt/EasyR1/verl/trainer/ray_trainer.py", 617, "fit", "ref_output = self.actor_rollout_ref_wg.compute_ref_log_probs(batch)"),
        ("/opt/EasyR1/verl/single_controller/ray/base.py", 47, "func", "output = ray.get(output)"),
    ]:
        log.raw(f"  File \"{fr[0]}\", line {fr[1]}, in {fr[2]}")
        log.raw(f"    {fr[3]}")
    log.raw("ray.exceptions.RayTaskError(OutOfMemoryError): \x1b[36mray::WorkerDict.actor_rollout_ref_compute_ref_log_probs()\x1b[39m (pid=%d, ip=10.3.1.7, actor_id=9f8e7d6c5b4a39281706f5e401000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f3c2b1a0d90>)" % log.pid("wd0"))
    for fr in [
        ("/opt/EasyR1/verl/workers/fsdp_workers.py", 566, "compute_ref_log_probs", "output = self.ref_policy.compute_log_prob(data=data)"),
        ("/opt/EasyR1/verl/workers/actor/dp_actor.py", 186, "compute_log_prob", "log_probs = self._forward_micro_batch(model_inputs, temperature=temperature)"),
        ("/opt/EasyR1/verl/workers/actor/dp_actor.py", 129, "_forward_micro_batch", "log_probs = log_probs_from_logits(logits=logits_rmpad, labels=input_ids_rmpad_rolled)"),
    ]:
        log.raw(f"  File \"{fr[0]}\", line {fr[1]}, in {fr[2]}")
        log.raw(f"    {fr[3]}")
    log.raw("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.28 GiB. GPU 0 has a total capacity of 79.15 GiB of which 5.11 GiB is free. Process 81234 has 74.03 GiB memory in use. Of the allocated memory 61.30 GiB is allocated by PyTorch, and 10.22 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


# ---------------------------------------------------------------------------------------------
# TRL GRPO with `trl vllm-serve` (trl/generation/vllm_client.py); accelerate launch; HF Trainer logs
# ---------------------------------------------------------------------------------------------
def trl_grpo(log: Log, *, steps: int = 60, server_up: bool = True, host: str = "10.0.4.9", server_log: bool = False,
             n_params: int = 0, oom_at: int | None = None) -> None:
    """A GRPOTrainer run under `accelerate launch` (7 training GPUs, the 8th serves vLLM); `oom_at`:
    the step in whose loss rank 3 runs out of memory (GRPO's log-softmax over the whole vocabulary)."""
    log.raw("The following values were not passed to `accelerate launch` and had defaults used instead:")
    log.raw("\t`--num_processes` was set to a value of `7`")
    log.raw("\t\tMore than one GPU was found, enabling multi-GPU training.")
    log.raw("\t\tIf this was unintended please pass in `--num_processes=1`.")
    log.raw("\t`--dynamo_backend` was set to a value of `'no'`")
    log.raw("To avoid this warning pass in values for each of the problematic parameters or run `accelerate config`.")
    log.adv(10, 15)
    for i in range(0, 3):
        log.raw(tqdm_bar("Loading checkpoint shards", i * 2, 4, i * 1.4 + 0.01))
    log.raw(tqdm_bar("Map", 7473, 7473, 1.1, unit_rate="6793.21 examples/s"))
    log.adv(3, 6)
    if not server_up:
        for _ in range(int(240 / 2)):
            log.raw("INFO:trl.generation.vllm_client:Server is not up yet. Retrying in 2.0 seconds...")
            log.adv(2.0, 2.05)
        log.raw("[rank0]: Traceback (most recent call last):")
        for fr in [
            ("/workspace/grpo.py", 88, "<module>", "trainer = GRPOTrainer("),
            (f"{PY}/trl/trainer/grpo_trainer.py", 676, "__init__", "self.vllm_client = VLLMClient(base_url=base_url, connection_timeout=args.vllm_server_timeout)"),
            (f"{PY}/trl/generation/vllm_client.py", 122, "__init__", "self.check_server(connection_timeout)  # check server and fail after timeout"),
            (f"{PY}/trl/generation/vllm_client.py", 189, "check_server", "raise ConnectionError("),
        ]:
            log.raw(f"[rank0]:   File \"{fr[0]}\", line {fr[1]}, in {fr[2]}")
            log.raw(f"[rank0]:     {fr[3]}")
        log.raw(f"[rank0]: ConnectionError: The vLLM server can't be reached at http://{host}:8000 after 240.0 seconds. Make sure the server is running by running `trl vllm-serve`.")
        log.adv(1, 2)
        log.raw(f"E{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d} {log.pid('accel')} torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: {log.pid('r0')}) of binary: /usr/bin/python3")
        return
    log.raw("INFO:trl.generation.vllm_client:Server is up!")
    log.raw(f"[W{log.t:%m%d %H:%M:%S}.{log.t.microsecond:06d}412 socket.cpp:204] [c10d] The hostname of the client socket cannot be retrieved. err=-3")
    log.adv(2, 3)
    el = 0.0
    buf = "\r" + tqdm_bar("", 0, steps, 0)[2:]
    for step in range(1, steps + 1):
        dt = log.rng.uniform(25, 40)
        log.adv(dt)
        el += dt
        if server_log:
            # The server (started with `trl vllm-serve ... >> train.log &`) logs every request; the
            # trainer pushes each named parameter after its optimizer step, then resets the cache.
            log.raw(buf)
            buf = ""
            port = log.rng.randint(40000, 60000)
            log.raw(f"INFO:     {host}:{port} - \"POST /generate/ HTTP/1.1\" 200 OK")
            for _ in range(n_params):
                log.raw(f"INFO:     {host}:{port} - \"POST /update_named_param/ HTTP/1.1\" 200 OK")
            log.raw(f"INFO:     {host}:{port} - \"POST /reset_prefix_cache/ HTTP/1.1\" 200 OK")
        if step == oom_at:
            log.raw(buf)
            _trl_loss_oom(log, host)
            return
        buf += "\r" + tqdm_bar("", step, steps, el)[2:]
        if step % 5 == 0:
            log.raw(buf)
            buf = ""
            log.raw(str({"loss": round(log.rng.uniform(-0.01, 0.05), 4), "grad_norm": round(log.rng.uniform(0.1, 0.6), 4), "learning_rate": 1e-06, "num_tokens": step * 401234.0, "completions/mean_length": round(log.rng.uniform(200, 400), 1), "completions/clipped_ratio": 0.0, "rewards/accuracy_reward/mean": round(log.rng.uniform(0.3, 0.8), 4), "reward": round(log.rng.uniform(0.3, 0.8), 4), "reward_std": round(log.rng.uniform(0.2, 0.4), 4), "kl": round(log.rng.uniform(0, 0.01), 5), "clip_ratio/region_mean": 0.0, "epoch": round(step / steps, 2)}))
    log.raw(buf)
    log.raw(str({"train_runtime": round(el, 4), "train_samples_per_second": 7.21, "train_steps_per_second": 0.03, "train_loss": 0.0123, "epoch": 1.0}))
    log.raw("\r" + tqdm_bar("", steps, steps, el)[2:])


def _trl_loss_oom(log: Log, host: str) -> None:
    pre = "[rank3]: "
    log.raw(f"{pre}Traceback (most recent call last):")
    frame_lines(log, pre, [
        ("/workspace/grpo.py", 97, "<module>", "trainer.train()"),
        (f"{PY}/transformers/trainer.py", 2237, "train", "return inner_training_loop("),
        (f"{PY}/transformers/trainer.py", 2578, "_inner_training_loop", "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)"),
        (f"{PY}/transformers/trainer.py", 3792, "training_step", "loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)"),
        (f"{PY}/trl/trainer/grpo_trainer.py", 1596, "compute_loss", "return self._compute_loss(model, inputs)"),
        (f"{PY}/trl/trainer/grpo_trainer.py", 1612, "_compute_loss", "per_token_logps, entropies = self._get_per_token_logps_and_entropies("),
        (f"{PY}/trl/trainer/grpo_trainer.py", 873, "_get_per_token_logps_and_entropies", "logps = selective_log_softmax(logits, completion_ids)  # compute logprobs"),
        (f"{PY}/trl/trainer/utils.py", 1658, "selective_log_softmax", "row_logps = F.log_softmax(row_logits, dim=-1)"),
        (f"{PY}/torch/nn/functional.py", 2250, "log_softmax", "ret = input.log_softmax(dim)"),
    ])
    log.raw(f"{pre}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.07 GiB is free. Including non-PyTorch memory, this process has 78.07 GiB memory in use. Of the allocated memory 73.61 GiB is allocated by PyTorch, and 3.29 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    log.adv(3, 6)
    torchrun_child_failed(log, "/workspace/grpo.py", 3, 3, "gpu-h100-04", 1, nproc=7, launcher="accelerate")


def trl_vllm_server(log: Log, *, steps: int = 60) -> None:
    """`trl vllm-serve` on its own GPU, logged together with the trainer (server side only)."""
    log.vllm("INFO", "__init__.py:239", "Automatically detected platform cuda.")
    log.raw(f"INFO:     Started server process [{log.pid('srv')}]")
    log.raw("INFO:     Waiting for application startup.")
    log.vllm("INFO", "core.py:69", "Initializing a V1 LLM engine (v0.10.1.1) with config: model='Qwen/Qwen2.5-0.5B-Instruct', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1, enforce_eager=False, enable_prefix_caching=True", proc="EngineCore_0")
    log.vllm("INFO", "gpu_model_runner.py:1843", "Model loading took 0.9277 GiB and 1.204411 seconds", proc="EngineCore_0")
    log.vllm("INFO", "gpu_worker.py:255", "Available KV cache memory: 48.17 GiB", proc="EngineCore_0")
    log.vllm("INFO", "kv_cache_utils.py:833", "GPU KV cache size: 902,000 tokens", proc="EngineCore_0")
    log.vllm("INFO", "gpu_model_runner.py:2385", "Graph capturing finished in 17 secs, took 0.51 GiB", proc="EngineCore_0")
    log.vllm("INFO", "core.py:193", "init engine (profile, create kv cache, warmup model) took 52.20 seconds", proc="EngineCore_0")
    log.raw("INFO:     Application startup complete.")
    log.raw("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
    log.raw("INFO:     10.0.4.9:51244 - \"GET /health/ HTTP/1.1\" 200 OK")
    log.raw("INFO:     10.0.4.9:51246 - \"GET /get_world_size/ HTTP/1.1\" 200 OK")
    log.raw("INFO:     10.0.4.9:51248 - \"POST /init_communicator/ HTTP/1.1\" 200 OK")


# ---------------------------------------------------------------------------------------------
# LLaMA-Factory: '[INFO|2025-06-12 10:31:02] llamafactory.hparams.parser:406 >> ...' + HF Trainer
# ---------------------------------------------------------------------------------------------
def llamafactory(log: Log, *, steps: int = 300, nproc: int = 8) -> None:
    torchrun_banner(log, nproc)
    lf = lambda lvl, name, ln, msg: log.raw(f"[{lvl}|{log.t:%Y-%m-%d %H:%M:%S}] {name}:{ln} >> {msg}")  # noqa: E731
    for r in range(nproc):
        lf("INFO", "llamafactory.hparams.parser", 406, f"Process rank: {r}, world size: {nproc}, device: cuda:{r}, distributed training: True, compute dtype: torch.bfloat16")
    lf("INFO", "transformers.tokenization_utils_base", 2058, "loading file tokenizer.json")
    lf("INFO", "llamafactory.data.template", 143, "Add <|im_end|> to stop words.")
    lf("INFO", "llamafactory.data.loader", 143, "Loading dataset alpaca_en_demo.json...")
    log.raw(tqdm_bar("Converting format of dataset (num_proc=16)", 1000, 1000, 0.4, unit_rate="2311.42 examples/s"))
    log.raw(tqdm_bar("Running tokenizer on dataset (num_proc=16)", 1000, 1000, 2.1, unit_rate="474.12 examples/s"))
    log.raw("training example:")
    log.raw("input_ids:")
    log.raw("[151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198]")
    log.adv(5, 8)
    lf("INFO", "transformers.modeling_utils", 3723, "loading weights file /mnt/models/Qwen2.5-7B-Instruct/model.safetensors.index.json")
    log.raw(f"[{log.pylog_ts()}] [INFO] [config.py:734:__init__] Config mesh_device None world_size = {nproc}")
    for i in range(0, 5):
        log.raw(tqdm_bar("Loading checkpoint shards", i, 4, i * 3.2 + 0.01))
    lf("INFO", "llamafactory.model.model_utils.checkpointing", 143, "Gradient checkpointing enabled.")
    lf("INFO", "llamafactory.model.loader", 143, "trainable params: 7,615,616,512 || all params: 7,615,616,512 || trainable%: 100.0000")
    log.raw(f"[{log.pylog_ts()}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.16.9, git-hash=unknown, git-branch=unknown")
    log.raw(f"[{log.pylog_ts()}] [INFO] [logging.py:128:log_dist] [Rank 0] Creating ZeRO stage 3 optimizer")
    log.adv(20, 40)
    lf("INFO", "transformers.trainer", 2414, "***** Running training *****")
    lf("INFO", "transformers.trainer", 2415, "  Num examples = 1,000")
    lf("INFO", "transformers.trainer", 2416, "  Num Epochs = 3")
    lf("INFO", "transformers.trainer", 2417, "  Instantaneous batch size per device = 1")
    lf("INFO", "transformers.trainer", 2420, "  Total train batch size (w. parallel, distributed & accumulation) = 64")
    lf("INFO", "transformers.trainer", 2422, f"  Total optimization steps = {steps}")
    el = 0.0
    buf = ""
    for s in range(steps + 1):
        buf += "\r" + tqdm_bar("", s, steps, el)[2:]
        if s == steps:
            break
        dt = log.rng.uniform(4, 6)
        log.adv(dt)
        el += dt
        if (s + 1) % 10 == 0:
            log.raw(buf)
            buf = ""
            log.raw(str({"loss": round(log.rng.uniform(0.8, 1.4) * (1 - s / steps / 2), 4), "grad_norm": round(log.rng.uniform(1, 3), 6), "learning_rate": 1e-05, "epoch": round(3 * (s + 1) / steps, 2)}))
        if (s + 1) % 100 == 0:
            lf("INFO", "transformers.trainer", 3993, f"Saving model checkpoint to saves/qwen2.5-7b/full/sft/checkpoint-{s + 1}")
            lf("INFO", "transformers.configuration_utils", 424, f"Configuration saved in saves/qwen2.5-7b/full/sft/checkpoint-{s + 1}/config.json")
            log.adv(40, 60)
            log.raw(f"[{log.pylog_ts()}] [INFO] [torch_checkpoint_engine.py:43:commit] [Torch] Checkpoint global_step{s + 1} is ready now!")
    log.raw(buf)
    lf("INFO", "transformers.trainer", 2681, "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n")
    log.raw(str({"train_runtime": round(el, 4), "train_samples_per_second": 0.62, "train_steps_per_second": 0.01, "train_loss": 0.9123, "epoch": 3.0}))
    log.raw("\r" + tqdm_bar("", steps, steps, el)[2:])
    log.raw("***** train metrics *****")
    log.raw("  epoch                    =        3.0")
    log.raw(f"  train_runtime            = {int(el) // 3600}:{int(el) % 3600 // 60:02d}:{int(el) % 60:02d}.12")
    lf("INFO", "transformers.trainer", 3993, "Saving model checkpoint to saves/qwen2.5-7b/full/sft")
    lf("WARNING", "llamafactory.extras.ploting", 148, "No metric eval_loss to plot.")
    lf("INFO", "transformers.modelcard", 450, "Dropping the following result as it does not have all the necessary fields:")
