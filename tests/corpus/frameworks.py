# ruff: noqa: E501, UP031  (log lines are as long as the frameworks print them; %-format where the text has braces)
"""Whole-job writers for each framework, phase by phase (format strings: docs/real-logs.md)."""

from __future__ import annotations

import pprint

from .logkit import Log, nccl_init, tqdm_bar

PY = "/usr/local/lib/python3.10/dist-packages"


# =============================================================================================
# Ray
# =============================================================================================
def ray_start_local(log: Log) -> None:
    log.raw(f"{log.pylog_ts()}\tINFO worker.py:1852 -- Started a local Ray instance. View the dashboard at 127.0.0.1:8265 ")


def ray_connect(log: Log, head: str) -> None:
    log.raw(f"{log.pylog_ts()}\tINFO worker.py:1660 -- Connecting to existing Ray cluster at address: {head}:6379...")
    log.adv(0.3, 0.8)
    log.raw(f"{log.pylog_ts()}\tINFO worker.py:1843 -- Connected to Ray cluster. View the dashboard at {head}:8265 ")


def ray_pending(log: Log, demand: str, minutes: int, since_s: int = 5, infeasible: bool = False,
                default_dict: bool = False, between=None) -> None:
    """The autoscaler's demand lines, every ~30 s while a request waits (driver stdout)."""
    age = since_s
    for i in range(minutes * 2):
        stamp = f"+{age // 60}m{age % 60}s" if age >= 60 else f"+{age}s"
        if infeasible:
            d = f"defaultdict(<class 'float'>, {demand})" if default_dict else demand
            log.raw(f"(autoscaler {stamp}) Error: No available node types can fulfill resource request {d}. Add suitable node types to this cluster to resolve this issue.")
        else:
            log.raw(f"(autoscaler {stamp}) Tip: use `ray status` to view detailed cluster status. To disable these messages, set RAY_SCHEDULER_EVENTS=0.")
            log.raw(f"(autoscaler {stamp}) Warning: The following resource request cannot be scheduled right now: {demand}. This is likely due to all cluster resources being claimed by actors. Consider creating fewer actors or adding more nodes to this Ray cluster.")
        if between and i % 6 == 5:
            between(log)
        log.adv(30, 31)
        age += 30


# =============================================================================================
# verl (main_ppo / main_gkd) with FSDP or Megatron workers, vLLM or SGLang rollout
# =============================================================================================
class Verl:
    def __init__(self, log: Log, *, algo: str = "grpo", engine: str = "vllm", strategy: str = "fsdp",
                 nodes: int = 1, gpus: int = 8, model: str = "Qwen2.5-7B-Instruct", steps: int = 20,
                 ips: list[str] | None = None, hostnames: list[str] | None = None, critic: bool = False,
                 reward_model: bool = False, entry: str = "verl.trainer.main_ppo", ref: bool = True,
                 nccl_debug: bool = False, ifname: str = "eth0", verbose: bool = False, vllm_info: bool = False,
                 sglang_info: bool = False, gpu_memory_utilization: float = 0.6) -> None:
        self.log = log
        self.gpu_memory_utilization = gpu_memory_utilization  # verl passes it to SGLang as mem_fraction_static
        self.algo, self.engine, self.strategy = algo, engine, strategy
        self.nodes, self.gpus, self.model, self.steps = nodes, gpus, model, steps
        self.ips = ips or [f"10.{log.rng.randint(0, 200)}.{log.rng.randint(0, 250)}.{11 + i}" for i in range(nodes)]
        self.hosts = hostnames or [f"gpu-node-{log.rng.randint(100, 899)}" for _ in range(nodes)]
        self.critic, self.reward_model, self.entry, self.ref = critic, reward_model, entry, ref
        # verbose: the user ran with VERL_LOGGING_LEVEL=INFO and a root log handler, so verl's own
        # logger.info / log_gpu_memory_usage lines print; vllm_info: VLLM_LOGGING_LEVEL=INFO exported.
        self.nccl_debug, self.ifname, self.verbose = nccl_debug, ifname, verbose
        self.vllm_info = vllm_info
        self.sglang_info = sglang_info
        log.vllm_quiet = not vllm_info
        self.world = nodes * gpus
        self.step = 0
        self.runner = log.pid("TaskRunner")
        self.worker_pids = [[log.rng.randint(20000, 90000) for _ in range(gpus)] for _ in range(nodes)]

    # -- helpers -------------------------------------------------------------------------------
    def tr(self, text: str) -> None:
        self.log.ray("TaskRunner", text, pid=self.runner)

    def wpre(self, node: int = 0, rank: int = 0) -> str:
        ip = self.ips[node] if self.nodes > 1 and node > 0 else None
        return self.log.prefix("WorkerDict", ip, self.worker_pids[node][rank])

    def w(self, text: str, node: int = 0, rank: int = 0) -> None:
        for part in text.split("\n"):
            self.log.raw(self.wpre(node, rank) + part)

    def wall(self, text: str, ranks: int = 2) -> None:
        """A line every worker prints; Ray shows the first few and then dedups the rest."""
        for node in range(self.nodes):
            for r in range(min(ranks, self.gpus)):
                self.w(text, node, r)
        if self.world > ranks:
            self.log.raw(f"{self.wpre(0, 0)}{text} [repeated {self.world - ranks}x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html#log-deduplication for more options.)")

    # -- phases -----------------------------------------------------------------------------------
    def config(self) -> None:
        log = self.log
        env = {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN", "VLLM_LOGGING_LEVEL": "WARN",
               "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_CUMEM_ENABLE": "0"}
        if self.nccl_debug:
            env.pop("NCCL_DEBUG")  # exported by the user: verl leaves it out of the runtime_env
        if self.vllm_info:
            env.pop("VLLM_LOGGING_LEVEL")
        log.raw(f"ray init kwargs: {{'num_cpus': None, 'runtime_env': {{'env_vars': {env!r}, 'working_dir': None}}}}")
        if self.nodes > 1:
            ray_connect(log, self.ips[0])
        else:
            ray_start_local(log)
        log.adv(2, 5)
        self.tr(f"TaskRunner hostname: {self.hosts[0]}, PID: {self.runner}")
        cfg = [
            "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.FSDPActorConfig',",
            "                                 'checkpoint': {'async_save': False,",
            "                                                'load_contents': ['model', 'optimizer', 'extra'],",
            "                                                'save_contents': ['model', 'optimizer', 'extra']},",
            "                                 'clip_ratio': 0.2,",
            "                                 'entropy_coeff': 0,",
            "                                 'fsdp_config': {'fsdp_size': -1, 'offload_policy': False, 'param_offload': False, 'optimizer_offload': False},",
            "                                 'grad_clip': 1.0,",
            "                                 'kl_loss_coef': 0.001,",
            "                                 'kl_loss_type': 'low_var_kl',",
            "                                 'optim': {'lr': 1e-06, 'lr_warmup_steps_ratio': 0.0, 'weight_decay': 0.01},",
            "                                 'ppo_epochs': 1,",
            "                                 'ppo_micro_batch_size_per_gpu': 16,",
            "                                 'ppo_mini_batch_size': 256,",
            f"                                 'strategy': '{self.strategy}',",
            "                                 'use_dynamic_bsz': False,",
            "                                 'use_kl_loss': True},",
            f"                       'model': {{'enable_gradient_checkpointing': True, 'path': '/mnt/models/{self.model}', 'use_remove_padding': True}},",
            "                       'rollout': {'dtype': 'bfloat16',",
            "                                   'enforce_eager': False,",
            "                                   'free_cache_engine': True,",
            f"                                   'gpu_memory_utilization': {self.gpu_memory_utilization},",
            "                                   'load_format': 'dummy',",
            "                                   'max_model_len': None,",
            "                                   'max_num_batched_tokens': 8192,",
            "                                   'mode': 'async',",
            "                                   'n': 5,",
            f"                                   'name': '{self.engine}',",
            "                                   'prompt_length': 1024,",
            "                                   'response_length': 2048,",
            "                                   'temperature': 1.0,",
            "                                   'tensor_model_parallel_size': 2}},",
            f" 'algorithm': {{'adv_estimator': '{'gae' if self.critic else 'grpo'}', 'gamma': 1.0, 'kl_ctrl': {{'kl_coef': 0.001, 'type': 'fixed'}}, 'lam': 1.0, 'use_kl_in_reward': False}},",
            f" 'critic': {{'enable': {self.critic}, 'ppo_micro_batch_size_per_gpu': 16, 'strategy': '{self.strategy}'}},",
            " 'data': {'max_prompt_length': 1024,",
            "          'max_response_length': 2048,",
            "          'prompt_key': 'prompt',",
            "          'train_batch_size': 512,",
            "          'train_files': '/mnt/data/gsm8k/train.parquet',",
            "          'val_files': '/mnt/data/gsm8k/test.parquet'},",
            f" 'reward_model': {{'enable': {self.reward_model}, 'model': {{'path': '/mnt/models/Skywork-Reward-Llama-3.1-8B'}}}},",
            " 'trainer': {'critic_warmup': 0,",
            f"             'experiment_name': '{self.algo}_{self.model.lower()}_{self.strategy}',",
            "             'logger': ['console', 'wandb'],",
            f"             'n_gpus_per_node': {self.gpus},",
            f"             'nnodes': {self.nodes},",
            "             'project_name': 'verl_rl',",
            "             'save_freq': 10,",
            "             'test_freq': 5,",
            "             'total_epochs': 15,",
            f"             'total_training_steps': {self.steps},",
            "             'val_before_train': True}}",
        ]
        self.tr("\n".join(cfg))
        log.adv(0.5, 1.5)
        if self.algo == "gkd":
            self.tr(f"resource_pool_spec: {{'rollout_pool': {[self.gpus // 2] * self.nodes}, 'actor_pool': {[self.gpus // 2] * self.nodes}}}")
        else:
            self.tr("[validate_config] All configuration checks passed successfully!")

    def dataset(self) -> None:
        log = self.log
        self.tr("Using dataset class: RLHFDataset")
        log.adv(1, 3)
        self.tr("dataset len: 7473")
        log.adv(2, 6)
        self.tr("filter dataset len: 7473")
        self.tr("Using dataset class: RLHFDataset")
        self.tr("dataset len: 1319")
        self.tr("filter dataset len: 1319")
        self.tr(f"Size of train dataloader: {self.steps}, Size of val dataloader: 1")
        self.tr(f"Total training steps: {self.steps}")

    def worker_group(self) -> None:
        log = self.log
        self.tr("colocated worker base class <class 'verl.single_controller.base.worker.Worker'>")
        log.adv(3, 8)

    def model_load(self, finish: bool = True) -> None:
        log = self.log
        self.wall("You are attempting to use Flash Attention 2.0 without specifying a torch dtype. This might lead to unexpected behaviour")
        log.adv(5, 15)
        self.w("Model config after override: Qwen2Config {\n  \"architectures\": [\n    \"Qwen2ForCausalLM\"\n  ],\n  \"attention_dropout\": 0.0,\n  \"eos_token_id\": 151645,\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": 3584,\n  \"intermediate_size\": 18944,\n  \"max_position_embeddings\": 32768,\n  \"model_type\": \"qwen2\",\n  \"num_attention_heads\": 28,\n  \"num_hidden_layers\": 28,\n  \"num_key_value_heads\": 4,\n  \"pad_token_id\": 151643,\n  \"torch_dtype\": \"bfloat16\",\n  \"transformers_version\": \"4.53.2\",\n  \"vocab_size\": 152064\n}\n")
        if self.strategy == "fsdp":
            for i in range(0, 5):
                self.w(tqdm_bar("Loading checkpoint shards", i, 4, i * 6.1))
                log.adv(5, 8)
            self.w("Qwen2ForCausalLM contains 7.62B parameters")
            self.w("wrap_policy: functools.partial(<function _or_policy at 0x7f2c5d1b7d90>, policies=[functools.partial(<function transformer_auto_wrap_policy at 0x7f2c5d1b7c70>, transformer_layer_cls={<class 'transformers.models.qwen2.modeling_qwen2.Qwen2DecoderLayer'>})])")
            if self.verbose:
                self.w("After init actor_rollout from HF AutoModel, memory allocated (GB): 0.00, memory reserved (GB): 0.00, device memory used/total (GB): 1.82/79.11")
        else:
            self.w("> building GPT2BPETokenizer tokenizer ...")
            self.w(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1904517632")
            self.w("Loading dist checkpoint from /mnt/ckpt/mcore_dist/Qwen2.5-7B-Instruct ...")
            log.adv(40, 90)
            self.w("  loading distributed checkpoint from /mnt/ckpt/mcore_dist/Qwen2.5-7B-Instruct at iteration 1")
        if not finish:
            return
        log.adv(10, 40)
        if self.strategy == "fsdp" and self.verbose:
            self.w("After actor_rollout FSDP init, memory allocated (GB): 3.55, memory reserved (GB): 4.02, device memory used/total (GB): 6.27/79.11")
        self.w(f"Total steps: {self.steps}, num_warmup_steps: 0")
        self.w("Actor use_remove_padding=True")
        self.w("Actor use_fused_kernels=False")

    def nccl(self, complete: bool = True, ranks_shown: int = 2, peer_fail: str | None = None) -> None:
        if not self.nccl_debug:
            return
        for node in range(self.nodes):
            for r in range(min(ranks_shown, self.gpus)):
                pre = self.wpre(node, r)
                nccl_init(self.log, pre, self.hosts[node], self.worker_pids[node][r], r, node * self.gpus + r,
                          self.world, self.ifname, self.ips[node], ib=self.nodes > 1 and self.ifname != "docker0",
                          complete=complete)
                self.log.adv(0.01, 0.05)

    # -- rollout engines ---------------------------------------------------------------------------
    def rollout_init(self, stop: str | None = None, enforce_eager: bool = False) -> None:
        """vLLM or SGLang start-up inside the rollout actors. stop: where to stop early."""
        if self.engine == "vllm":
            self._vllm_init(stop, enforce_eager)
        else:
            self._sglang_init(stop)

    def _vllm_pre(self, replica: int = 0, node: int = 0) -> str:
        ip = self.ips[node] if self.nodes > 1 and node > 0 else None
        return self.log.prefix("vLLMHttpServer", ip, 50000 + replica * 7 + node)

    def _vllm_init(self, stop: str | None, enforce_eager: bool) -> None:
        log = self.log
        replicas = min(2, self.world // 2)
        for rep in range(replicas):
            pre = self._vllm_pre(rep)
            if self.verbose:
                log.raw(f"{pre}vLLMHttpServer, replica_rank: {rep}, node_rank: 0, CUDA_VISIBLE_DEVICES: {rep * 2},{rep * 2 + 1}, master_address: {self.ips[0]}, master_port: {37000 + rep}, data_parallel_rpc_port: {38000 + rep}, data_parallel_master_port: {39000 + rep}")
                log.raw(f"{pre}enable_sleep_mode: True")
            log.vllm("INFO", "__init__.py:244", "Automatically detected platform cuda.", pre=pre)
            log.vllm("INFO", "config.py:841", "This model supports multiple tasks: {'generate', 'classify', 'embed', 'reward'}. Defaulting to 'generate'.", pre=pre)
            log.vllm("INFO", "config.py:1472", "Using max model len 3072", pre=pre)
            log.vllm("INFO", "config.py:2285", "Chunked prefill is enabled with max_num_batched_tokens=8192.", pre=pre)
            log.adv(1, 3)
            log.vllm("INFO", "core.py:526", "Waiting for init message from front-end.", pre=pre, proc="EngineCore_0")
            log.vllm("INFO", "core.py:69", f"Initializing a V1 LLM engine (v0.9.2) with config: model='/mnt/models/{self.model}', speculative_config=None, tokenizer='/mnt/models/{self.model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, override_neuron_config={{}}, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=3072, download_dir=None, load_format=LoadFormat.DUMMY, tensor_parallel_size=2, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager={enforce_eager}, kv_cache_dtype=auto,  device_config=cuda, decoding_config=DecodingConfig(backend='auto', disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, reasoning_backend=''), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, served_model_name=/mnt/models/{self.model}, num_scheduler_steps=1, multi_step_stream_outputs=True, enable_prefix_caching=True, chunked_prefill_enabled=True, use_async_output_proc=False, pooler_config=None, compilation_config={{\"level\":3,\"debug_dump_path\":\"\",\"cache_dir\":\"\",\"backend\":\"\",\"custom_ops\":[\"none\"],\"splitting_ops\":[\"vllm.unified_attention\",\"vllm.unified_attention_with_output\"],\"use_inductor\":true,\"compile_sizes\":[],\"inductor_compile_config\":{{\"enable_auto_functionalized_v2\":false}},\"use_cudagraph\":true,\"cudagraph_num_of_warmups\":1,\"cudagraph_capture_sizes\":[512,504,496,488,480,472,464,456,448,440,432,424,416,408,400,392,384,376,368,360,352,344,336,328,320,312,304,296,288,280,272,264,256,248,240,232,224,216,208,200,192,184,176,168,160,152,144,136,128,120,112,104,96,88,80,72,64,56,48,40,32,24,16,8,4,2,1],\"max_capture_size\":512}}", pre=pre, proc="EngineCore_0")
            log.vllm("WARNING", "multiproc_worker_utils.py:307", "Reducing Torch parallelism from 24 threads to 1 to avoid unnecessary CPU contention. Set OMP_NUM_THREADS in the external environment to tune this value as needed.", pre=pre, proc="EngineCore_0")
            log.vllm("INFO", "shm_broadcast.py:289", "vLLM message queue communication handle: Handle(local_reader_ranks=[0, 1], buffer_handle=(2, 16777216, 10, 'psm_3c1b2a77'), local_subscribe_addr='ipc:///tmp/1f6c0e2a-4b8d-4d7e-9a11-0f6b1a2c3d4e', remote_subscribe_addr=None, remote_addr_ipv6=False)", pre=pre, proc="EngineCore_0")
            for tp in range(2):
                log.vllm("INFO", "parallel_state.py:1076", f"rank {tp} in world size 2 is assigned as DP rank 0, PP rank 0, TP rank {tp}, EP rank {tp}", pre=pre, proc=f"VllmWorker rank={tp}")
            if stop == "nccl":
                return
            log.vllm("INFO", "gpu_model_runner.py:1770", f"Starting to load model /mnt/models/{self.model}...", pre=pre, proc="VllmWorker rank=0")
            log.vllm("INFO", "gpu_model_runner.py:1775", "Loading model from scratch...", pre=pre, proc="VllmWorker rank=0")
            log.vllm("INFO", "cuda.py:284", "Using Flash Attention backend on V1 engine.", pre=pre, proc="VllmWorker rank=0")
            log.adv(1, 4)
            log.vllm("INFO", "gpu_model_runner.py:1801", f"Model loading took 7.1217 GiB and {log.rng.uniform(1.5, 4):.6f} seconds", pre=pre, proc="VllmWorker rank=0")
            log.vllm("INFO", "gpu_model_runner.py:1801", f"Model loading took 7.1217 GiB and {log.rng.uniform(1.5, 4):.6f} seconds", pre=pre, proc="VllmWorker rank=1")
            if stop == "weights":
                return
            if not enforce_eager:
                log.vllm("INFO", "backends.py:508", f"Using cache directory: /root/.cache/vllm/torch_compile_cache/{log.rng.getrandbits(40):010x}/rank_0_0/backbone for vLLM's torch.compile", pre=pre, proc="VllmWorker rank=0")
                log.vllm("INFO", "backends.py:519", "Dynamo bytecode transform time: 9.84 s", pre=pre, proc="VllmWorker rank=0")
                log.adv(8, 20)
                log.vllm("INFO", "backends.py:181", "Cache the graph of shape None for later use", pre=pre, proc="VllmWorker rank=0")
                if stop == "compile":
                    return
                log.adv(20, 40)
                log.vllm("INFO", "backends.py:193", "Compiling a graph for dynamic shape takes 27.31 s", pre=pre, proc="VllmWorker rank=0")
                log.vllm("INFO", "monitor.py:34", "torch.compile takes 37.15 s in total", pre=pre, proc="VllmWorker rank=0")
            log.adv(2, 5)
            log.vllm("INFO", "gpu_worker.py:232", "Available KV cache memory: 38.64 GiB", pre=pre, proc="VllmWorker rank=0")
            if stop == "kv":
                return
            log.vllm("INFO", "kv_cache_utils.py:716", "GPU KV cache size: 1,447,168 tokens", pre=pre, proc="EngineCore_0")
            log.vllm("INFO", "kv_cache_utils.py:720", "Maximum concurrency for 3,072 tokens per request: 471.08x", pre=pre, proc="EngineCore_0")
            if not enforce_eager:
                n = 67
                for k in (0, 9, 23, 41, 55, 64, 67) if stop != "graphs" else (0, 9, 23, 31):
                    log.raw(pre + "\r" + tqdm_bar("Capturing CUDA graph shapes", k, n, k * 0.42 + 0.01))
                    log.adv(2, 5)
                if stop == "graphs":
                    return
                log.vllm("INFO", "custom_all_reduce.py:196", "Registering 8643 cuda graph addresses", pre=pre, proc="VllmWorker rank=0")
                log.vllm("INFO", "gpu_model_runner.py:2326", "Graph capturing finished in 29 secs, took 0.56 GiB", pre=pre, proc="VllmWorker rank=0")
            log.vllm("INFO", "core.py:172", f"init engine (profile, create kv cache, warmup model) took {log.rng.uniform(55, 90):.2f} seconds", pre=pre, proc="EngineCore_0")
            log.vllm("INFO", "gpu_worker.py:81", "Sleep mode freed 47.29 GiB memory, 4.11 GiB memory is still in use.", pre=pre, proc="VllmWorker rank=0")
            log.vllm("INFO", "executor_base.py:210", f"It took {log.rng.uniform(1, 3):.6f} seconds to fall asleep.", pre=pre, proc="EngineCore_0")

    def _sglang_init(self, stop: str | None) -> None:
        log = self.log
        pre = self.wpre(0, 0)
        def ts() -> str:
            return log.pylog_ts(True)

        # verl starts SGLang with log_level='error' (async_sglang_server.py): its INFO lines only
        # print when sglang_info (e.g. MTP runs set 'info'); the capture tqdm bar prints either way.
        real_raw = log.raw

        def info(line: str) -> None:
            if self.sglang_info or "\r" in line or "%|" in line:
                real_raw(line)

        log.raw = info  # type: ignore[method-assign]
        try:
            self._sglang_lines(stop, pre, ts)
        finally:
            log.raw = real_raw  # type: ignore[method-assign]

    def _sglang_lines(self, stop: str | None, pre: str, ts) -> None:
        log = self.log
        log.raw(f"{pre}[{ts()[:19]}] server_args=ServerArgs(model_path='/mnt/models/{self.model}', tokenizer_path='/mnt/models/{self.model}', tokenizer_mode='auto', load_format='dummy', trust_remote_code=False, dtype='bfloat16', kv_cache_dtype='auto', mem_fraction_static={self.gpu_memory_utilization}, max_running_requests=None, chunked_prefill_size=8192, tp_size=2, stream_interval=1, random_seed=0, log_level='info', enable_memory_saver=True, disable_cuda_graph=False, cuda_graph_max_bs=160, triton_attention_reduce_in_fp32=False)")
        for tp in range(2):
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Attention backend not explicitly specified. Use flashinfer backend by default.")
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Init torch distributed begin.")
        log.adv(1, 3)
        if stop == "dist":
            return
        for tp in range(2):
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Init torch distributed ends. mem usage=0.31 GB")
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Load weight begin. avail mem=72.48 GB")
        log.adv(2, 6)
        if stop == "weights":
            return
        for tp in range(2):
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=65.33 GB, mem usage=7.15 GB.")
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] KV Cache is allocated. #tokens: 1138224, K size: 21.71 GB, V size: 21.71 GB")
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Memory pool end. avail mem=20.17 GB")
        log.adv(1, 2)
        for tp in range(2):
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Capture cuda graph begin. This can take up to several minutes. avail mem=20.09 GB")
        if stop == "graphs":
            for k in (0, 3, 7):
                log.raw(pre + "\r" + tqdm_bar("Capturing batches (bs=160 avail_mem=19.88 GB)", k, 23, k * 1.3 + 0.1))
                log.adv(1, 2)
            return
        log.raw(pre + tqdm_bar("Capturing batches (bs=1 avail_mem=19.31 GB)", 23, 23, 17.4))
        log.adv(15, 25)
        for tp in range(2):
            log.raw(f"{pre}[{ts()[:19]} TP{tp}] Capture cuda graph end. Time elapsed: 18.92 s. mem usage=0.78 GB. avail mem=19.31 GB.")
        log.raw(f"{pre}[{ts()[:19]} TP0] max_total_num_tokens=1138224, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=32768, available_gpu_mem=19.31 GB")

    # -- trainer-side init -----------------------------------------------------------------------------
    def ref_init(self) -> None:
        if not self.ref:
            return
        self.w("reference model: /mnt/models/" + self.model)
        self.log.adv(20, 40)
        self.w("Qwen2ForCausalLM contains 7.62B parameters")

    def critic_init(self) -> None:
        if not self.critic:
            return
        self.log.adv(10, 20)
        self.w("Critic overriding config {'bos_token_id': None, 'eos_token_id': 151645, 'pad_token_id': 151643}")
        self.w("Qwen2ForTokenClassification contains 7.07B parameters")
        self.log.adv(20, 40)
        self.w(f"Total steps: {self.steps}, num_warmup_steps: 0")
        self.w("Critic use_remove_padding=True")

    def reward_init(self) -> None:
        if not self.reward_model:
            return
        self.log.adv(10, 30)
        self.w("LlamaForSequenceClassification contains 7.50B parameters")

    def ckpt_load(self, resume_step: int | None = None) -> None:
        self.tr(f"Checkpoint tracker file does not exist: /mnt/ckpt/verl_rl/{self.algo}/latest_checkpointed_iteration.txt" if resume_step is None else f"Load from checkpoint folder: /mnt/ckpt/verl_rl/{self.algo}/global_step_{resume_step}")
        if resume_step is None:
            self.tr("Training from scratch")
        else:
            self.tr(f"Setting global step to {resume_step}")
            self.tr(f"Resuming from /mnt/ckpt/verl_rl/{self.algo}/global_step_{resume_step}")
            self.step = resume_step

    # -- per step ---------------------------------------------------------------------------------
    def wake(self, ok: bool = True) -> None:
        log = self.log
        for rep in range(min(2, self.world // 2)):
            pre = self._vllm_pre(rep)
            if self.engine == "vllm":
                log.vllm("INFO", "executor_base.py:226", f"It took {log.rng.uniform(0.2, 0.9):.6f} seconds to wake up tags ['weights'].", pre=pre, proc="EngineCore_0")
        if self.verbose:
            self.w("After resume weights, memory allocated (GB): 15.24, memory reserved (GB): 16.02, device memory used/total (GB): 27.91/79.11")
        log.adv(2, 6)
        if not ok:
            return
        if self.verbose:
            self.w(f"update_weights done, time cost: {log.rng.uniform(2, 6):.2f}s")
        for rep in range(min(2, self.world // 2)):
            pre = self._vllm_pre(rep)
            if self.engine == "vllm":
                log.vllm("INFO", "executor_base.py:226", f"It took {log.rng.uniform(0.5, 1.9):.6f} seconds to wake up tags ['kv_cache'].", pre=pre, proc="EngineCore_0")
        if self.verbose:
            self.w("After resume kv_cache, memory allocated (GB): 3.11, memory reserved (GB): 3.87, device memory used/total (GB): 61.44/79.11")

    def generate(self, n_prompts: int = 2560, stop_at: int | None = None) -> float:
        """Generation: vLLM engine stats every ~10 s; returns seconds taken."""
        log = self.log
        total = 0.0
        done = 0
        pre = self._vllm_pre(0)
        while done < n_prompts:
            dt = log.rng.uniform(9.5, 10.5)
            log.adv(dt)
            total += dt
            if stop_at is not None and done >= stop_at:
                running, waiting, gen_tp = log.rng.randint(3, 9), 0, 0.0
            else:
                inc = log.rng.randint(200, 420)
                done = min(n_prompts, done + inc)
                running, waiting, gen_tp = log.rng.randint(300, 700), max(0, n_prompts - done - 600), log.rng.uniform(9000, 14000)
            if self.engine == "vllm":
                log.vllm("INFO", "loggers.py:118", f"Engine 000: Avg prompt throughput: {log.rng.uniform(0, 900):.1f} tokens/s, Avg generation throughput: {gen_tp:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {log.rng.uniform(5, 60) if running else 0:.1f}%, Prefix cache hit rate: {log.rng.uniform(60, 80):.1f}%", pre=pre, proc="")
            elif self.sglang_info:
                log.raw(f"{self.wpre(0, 0)}[{log.pylog_ts(True)[:19]} TP0] Decode batch. #running-req: {running}, #token: {running * 700}, token usage: {log.rng.uniform(0.05, 0.6):.2f}, cuda graph: {running <= 160}, gen throughput (token/s): {gen_tp:.2f}, #queue-req: {waiting}")
            if stop_at is not None and done >= stop_at and total > 3600:
                return total
        return total

    def sleep(self) -> None:
        log = self.log
        for rep in range(min(2, self.world // 2)):
            pre = self._vllm_pre(rep)
            if self.engine == "vllm":
                log.vllm("INFO", "gpu_worker.py:81", f"Sleep mode freed {log.rng.uniform(45, 50):.2f} GiB memory, 4.11 GiB memory is still in use.", pre=pre, proc="VllmWorker rank=0")
                log.vllm("INFO", "executor_base.py:210", f"It took {log.rng.uniform(1, 3):.6f} seconds to fall asleep.", pre=pre, proc="EngineCore_0")

    def metrics(self, t: dict[str, float], nan: bool = False) -> str:
        r = self.log.rng
        loss = "nan" if nan else f"{r.uniform(-0.05, 0.05):.6f}"
        parts = [
            f"step:{self.step}",
            f"actor/entropy:{r.uniform(0.3, 0.6):.6f}",
            f"actor/kl_loss:{'nan' if nan else f'{r.uniform(0.0005, 0.004):.7f}'}",
            "actor/kl_coef:0.001",
            f"actor/pg_loss:{loss}",
            f"actor/pg_clipfrac:{r.uniform(0.001, 0.006):.7f}",
            f"actor/ppo_kl:{r.uniform(-0.0004, 0.0004):.9f}",
            "actor/pg_clipfrac_lower:0.0",
            f"actor/grad_norm:{'nan' if nan else f'{r.uniform(0.05, 0.4):.6f}'}",
            "perf/mfu/actor:0.31" if not nan else "perf/mfu/actor:0.30",
            f"perf/max_memory_allocated_gb:{r.uniform(40, 60):.4f}",
            f"perf/max_memory_reserved_gb:{r.uniform(60, 70):.4f}",
            f"perf/cpu_memory_used_gb:{r.uniform(90, 140):.4f}",
            "actor/lr:1e-06",
            f"training/global_step:{self.step}",
            "training/epoch:0",
            f"critic/score/mean:{r.uniform(0.2, 0.9):.6f}",
            "critic/score/max:1.0",
            "critic/score/min:0.0",
            f"critic/rewards/mean:{r.uniform(0.2, 0.9):.6f}",
            f"critic/advantages/mean:{r.uniform(-0.01, 0.01):.9f}",
            f"critic/advantages/max:{r.uniform(1.5, 1.8):.7f}",
            f"critic/advantages/min:-{r.uniform(1.5, 1.8):.7f}",
            f"response_length/mean:{r.uniform(250, 600):.3f}",
            "response_length/max:2048.0",
            "response_length/min:41.0",
            f"response_length/clip_ratio:{r.uniform(0, 0.01):.7f}",
            f"prompt_length/mean:{r.uniform(100, 130):.3f}",
            "prompt_length/max:226.0",
            "prompt_length/min:68.0",
        ]
        parts += [f"timing_s/{k}:{v:.9f}" for k, v in t.items()]
        parts += [
            f"timing_per_token_ms/gen:{r.uniform(0.02, 0.05):.9f}",
            f"perf/total_num_tokens:{r.randint(1_200_000, 1_900_000)}",
            f"perf/time_per_step:{t['step']:.9f}",
            f"perf/throughput:{r.uniform(800, 1900):.9f}",
        ]
        return " - ".join(parts)

    def gkd_step(self, *, stop: str | None = None, save: bool = False) -> None:
        """One step of verl-recipe gkd/megatron (one-step-off scheduler; separate rollout pool, so
        no sleep/wake: the actor broadcasts weights to the rollout in sync_rollout_weights)."""
        log = self.log
        r = log.rng
        t: dict[str, float] = {}
        t["sync_rollout_weights"] = r.uniform(4, 9)
        if stop == "weight sync":
            return
        log.adv(t["sync_rollout_weights"])
        t["wait_prev_gen"] = self.generate()
        t["wait_prev_teacher"] = r.uniform(0.5, 6)
        log.adv(t["wait_prev_teacher"])
        if stop == "generation":
            return
        self.tr("INFO: generate text done.")
        self.tr("DEBUG: <|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                "How many clips did Natalia sell altogether in April and May? Let's think step by step and output "
                "the final answer after \"####\".<|im_end|>\n<|im_start|>assistant\nIn April she sold 48 clips.\n"
                "In May she sold 48 / 2 = 24 clips.\nAltogether: 48 + 24 = 72.\n#### 72<|im_end|>")
        t["update_actor"] = r.uniform(50, 90)
        if stop == "actor update":
            return
        log.adv(t["update_actor"])
        self.tr("INFO: update actor done.")
        t["step"] = sum(t.values())
        if save:
            t["save_checkpoint"] = self.save()
        parts = [f"step:{self.step}", f"actor/kl_loss:{r.uniform(0.05, 0.4):.6f}", f"actor/grad_norm:{r.uniform(0.2, 1.2):.6f}",
                 "actor/lr:1e-06", f"response_seq_len/average:{r.uniform(200, 500):.3f}", "response_seq_len/max:2048",
                 "response_seq_len/min:37", f"training/global_step:{self.step}", "training/epoch:0"]
        parts += [f"timing_s/{k}:{v:.9f}" for k, v in t.items()]
        parts += [f"perf/total_num_tokens:{r.randint(900_000, 1_400_000)}", f"perf/time_per_step:{t['step']:.9f}",
                  f"perf/throughput:{r.uniform(900, 1600):.9f}"]
        self.tr(" - ".join(parts))
        self.tr(tqdm_bar("Training Progress", self.step, self.steps, self.step * t["step"]))

    def train_step(self, *, nan: bool = False, stop: str | None = None, save: bool = False, validate: bool = False) -> None:
        """One PPO/GRPO step. stop names the sub-phase in which the step stops producing output."""
        log = self.log
        self.step += 1
        if self.algo == "gkd":
            self.gkd_step(stop=stop, save=save)
            return
        t: dict[str, float] = {}
        if self.engine == "vllm":
            self.wake(ok=stop != "weight sync")
        if stop == "weight sync":
            return
        t["gen"] = self.generate(stop_at=1200 if stop == "generation" else None)
        if stop == "generation":
            return
        self.sleep()
        if stop == "after-gen":
            return
        t["reward"] = log.rng.uniform(1, 4)
        log.adv(t["reward"])
        t["old_log_prob"] = log.rng.uniform(20, 40)
        if self.verbose:
            self.w("After offload actor model during compute_log_prob, memory allocated (GB): 0.02, memory reserved (GB): 0.74, device memory used/total (GB): 5.11/79.11")
        if stop == "old log-prob":
            return
        log.adv(t["old_log_prob"])
        if self.ref:
            t["ref"] = log.rng.uniform(15, 30)
            log.adv(t["ref"])
        if self.critic:
            t["values"] = log.rng.uniform(15, 30)
            log.adv(t["values"])
        t["adv"] = log.rng.uniform(0.1, 0.6)
        if self.critic:
            t["update_critic"] = log.rng.uniform(40, 80)
            log.adv(t["update_critic"])
        t["update_actor"] = log.rng.uniform(60, 120)
        if stop == "actor update":
            return
        log.adv(t["update_actor"])
        if self.verbose:
            self.w("After offload actor model during update_actor, memory allocated (GB): 0.02, memory reserved (GB): 0.74, device memory used/total (GB): 5.11/79.11")
        t["update_weights"] = log.rng.uniform(3, 8)
        t["step"] = sum(t.values())
        if save:
            if stop == "checkpoint save":
                self.tr(f"local_global_step_folder: /mnt/ckpt/verl_rl/{self.algo}/global_step_{self.step}")
                return
            t["save_checkpoint"] = self.save()
        if validate:
            t["testing"] = self.validate()
        self.tr(self.metrics(t, nan=nan))
        self.tr(tqdm_bar("Training Progress", self.step, self.steps, self.step * t["step"]))

    def save(self) -> float:
        log = self.log
        self.tr(f"local_global_step_folder: /mnt/ckpt/verl_rl/{self.algo}/global_step_{self.step}")
        d = log.rng.uniform(40, 90)
        log.adv(d * 0.6)
        base = f"/mnt/ckpt/verl_rl/{self.algo}/global_step_{self.step}/actor"
        self.w(f"[Rank 0] Saved model to {base}/model_world_size_{self.world}_rank_0.pt")
        self.w(f"[Rank 0] Saved optim to {base}/optim_world_size_{self.world}_rank_0.pt")
        self.w(f"[Rank 0] Saved extra_state to {base}/extra_state_world_size_{self.world}_rank_0.pt")
        self.w(f"[Rank 0] Saved model config and tokenizer class to {base}/huggingface")
        log.adv(d * 0.4)
        return d

    def validate(self, initial: bool = False, stop: bool = False) -> float:
        log = self.log
        self.tr("test_gen_batch meta info: {'eos_token_id': 151645, 'pad_token_id': 151643, 'recompute_log_prob': False, 'do_sample': False, 'validate': True, 'global_steps': %d}" % self.step)
        if self.engine == "vllm":
            self.wake()
        d = self.generate(n_prompts=1319, stop_at=None if not stop else 700)
        if stop:
            return d
        self.tr("validation generation end")
        self.sleep()
        acc = log.rng.uniform(0.55, 0.9)
        msg = f"{{'val-aux/openai/gsm8k/reward/mean@1': {acc}, 'val-core/openai/gsm8k/acc/mean@1': {acc}, 'val-aux/num_turns/min': 2, 'val-aux/num_turns/max': 2, 'val-aux/num_turns/mean': 2.0}}"
        if initial:
            self.tr(pprint.pformat(f"Initial validation metrics: {msg}"))
        return d

    def finish(self, acc: float = 0.78) -> None:
        msg = f"{{'val-aux/openai/gsm8k/reward/mean@1': {acc}, 'val-core/openai/gsm8k/acc/mean@1': {acc}, 'val-aux/num_turns/min': 2, 'val-aux/num_turns/max': 2, 'val-aux/num_turns/mean': 2.0}}"
        self.tr(pprint.pformat(f"Final validation metrics: {msg}"))
        self.log.adv(1, 3)


def verl_startup(v: Verl, *, until: str = "done") -> None:
    """config -> dataset -> worker groups -> model load -> nccl -> rollout init -> ref -> ckpt -> val."""
    v.config()
    if until == "config":
        return
    v.log.adv(2, 5)
    v.dataset()
    v.log.adv(2, 5)
    v.worker_group()
    v.model_load()
    v.nccl()
    v.critic_init()
    v.ref_init()
    v.reward_init()
    v.log.adv(5, 10)
    v.rollout_init()
    v.log.adv(2, 5)
    v.ckpt_load()


def verl_traceback_ray(v: Verl, method: str, inner_frames: list[tuple[str, int, str, str]], final: str,
                       wg: str = "actor_rollout") -> None:
    """How a worker's exception reaches the driver: TaskRunner's traceback wrapping the worker's."""
    log = v.log
    tr = log.prefix("TaskRunner", pid=v.runner)
    wk = v.worker_pids[0][0]
    final_first = final.split("\n")[0]
    exc_name = final_first.split(":")[0].split(".")[-1]
    log.raw(f"Error executing job with overrides: ['algorithm.adv_estimator={'gae' if v.critic else 'grpo'}', 'data.train_batch_size=512', 'actor_rollout_ref.rollout.name={v.engine}', 'trainer.n_gpus_per_node={v.gpus}', 'trainer.nnodes={v.nodes}']")
    log.raw("Traceback (most recent call last):")
    log.raw("  File \"/workspace/verl/verl/trainer/main_ppo.py\", line 42, in main")
    log.raw("    run_ppo(config)")
    log.raw("  File \"/workspace/verl/verl/trainer/main_ppo.py\", line 96, in run_ppo")
    log.raw("    ray.get(runner.run.remote(config))")
    log.raw(f"  File \"{PY}/ray/_private/auto_init_hook.py\", line 21, in auto_init_wrapper")
    log.raw("    return fn(*args, **kwargs)")
    log.raw(f"  File \"{PY}/ray/_private/client_mode_hook.py\", line 103, in wrapper")
    log.raw("    return func(*args, **kwargs)")
    log.raw(f"  File \"{PY}/ray/_private/worker.py\", line 2849, in get")
    log.raw("    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)")
    log.raw(f"  File \"{PY}/ray/_private/worker.py\", line 937, in get_objects")
    log.raw("    raise value.as_instanceof_cause()")
    log.raw(f"ray.exceptions.RayTaskError({exc_name}): \x1b[36mray::TaskRunner.run()\x1b[39m (pid={v.runner}, ip={v.ips[0]}, actor_id=7f6b2c1d9e8a4b3c2d1e0f9a01000000, repr=<main_ppo.TaskRunner object at 0x7f9a1c3e2b50>)")
    log.raw("  File \"/workspace/verl/verl/trainer/main_ppo.py\", line 331, in run")
    if method.endswith("init_model"):
        log.raw("    trainer.init_workers()")
        log.raw("  File \"/workspace/verl/verl/trainer/ppo/ray_trainer.py\", line 812, in init_workers")
        log.raw(f"    self.{wg}_wg.init_model()")
    else:
        log.raw("    trainer.fit()")
        log.raw("  File \"/workspace/verl/verl/trainer/ppo/ray_trainer.py\", line 1089, in fit")
        log.raw(f"    gen_batch_output = self.{wg}_wg.generate_sequences(gen_batch_output)" if method == "generate_sequences" else f"    self.{wg}_wg.{method}(batch)")
    log.raw("  File \"/workspace/verl/verl/single_controller/ray/base.py\", line 48, in __call__")
    log.raw("    output = ray.get(output)")
    log.raw(f"ray.exceptions.RayTaskError({exc_name}): \x1b[36mray::WorkerDict.{wg}_{method}()\x1b[39m (pid={wk}, ip={v.ips[0]}, actor_id=3a1e5c7d9b2f4e6a8c0d1f3b01000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f0b8c2d4e10>)")
    for path, line, fn, src in inner_frames:
        log.raw(f"  File \"{path}\", line {line}, in {fn}")
        if src:
            log.raw(f"    {src}")
    for ln in final.split("\n"):
        log.raw(ln)
    log.raw("")
    log.raw("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.")
    _ = tr
