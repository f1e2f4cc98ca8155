"""Servers, launchers and bars of other stacks (SGLang's soft watchdog, datasets/DeepSpeed, vLLM offline, Lightning,
torchrun elastic restarts, fairseq, HF Trainer's evaluation), audit 23's shapes with invented values."""

from __future__ import annotations

from pathlib import Path

from gkdtop.replay import report_text
from tests.test_phase_nesting import run


def test_sglangs_soft_watchdog_reports_a_hang_and_kills_nothing(tmp_path: Path) -> None:
    """SGLang's `self.soft=True` watchdog only reports: the server lives on, hung in its graph capture, and its health
    check retries. Before: 'FAILED in engine init' and a failed alert. Its hard watchdog (`self.soft=False`) and the
    older form without the flag still end the run."""
    start = [
        "[2026-03-04 09:00:10 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=50 GB",
        "Capturing batches (bs=256 avail_mem=49.80 GB):   3%|▎         | 1/36 [00:03<01:50,  3.16s/it]",
    ]
    soft = [f"[2026-03-04 09:{m:02d}:13 DP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)"
            for m in (5, 10, 15)]
    retry = "[2026-03-04 09:16:40] Health check failed: server not ready after 990 s. Retrying..."
    report = run(tmp_path, [*start, *soft, retry])
    assert report.status.state == "stalled" and report.status.current == "engine init", report.status
    said = report_text(report, why=True)
    assert "FAILED" not in said and "Capturing batches" in said.split("last known line:")[1].splitlines()[0]
    for hard in ("[2026-03-04 09:05:13 DP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                 "self.soft=False)", "[2026-03-04 09:05:13 TP1] Watchdog timeout (self.watchdog_timeout=300)"):
        assert run(tmp_path, [*start, hard]).status.state == "failed", hard


def test_a_datasets_map_bar_prepares_data_and_does_not_open_the_loop(tmp_path: Path) -> None:
    """An undescribed bar in datasets' units (`ba/s`, `examples/s`) is its map or filter, at any pace; DeepSpeed's
    older `Creating fp16 ZeRO stage 3 optimizer` is the model's engine being built. Before: 'FAILED in training
    loop · A step raised · the loop's bar is at 305/305' for an OOM raised while ZeRO-3 built its flat buffers."""
    for bar in ("100%|██████████| 305/305 [00:22<00:00, 13.62ba/s]",
                "100%|██████████| 4096/4096 [00:09<00:00, 421.07 examples/s]"):
        lines = [
            "Some weights of the model checkpoint were not used when initializing BartForConditionalGeneration.",
            bar,
            "[2022-05-11 07:41:52,310] [INFO] [engine.py:611:_configure_zero_optimizer] Creating fp16 ZeRO stage 3 "
            "optimizer",
            "Traceback (most recent call last):",
            '  File "train.py", line 212, in main',
            "    trainer.train()",
            '  File "/opt/ds/deepspeed/runtime/zero/stage3.py", line 640, in __init__',
            "    self.fp16_groups_flat.append(self.flatten_dense_tensors_aligned(",
            "RuntimeError: CUDA out of memory. Tried to allocate 2.10 GiB (GPU 0; 15.78 GiB total capacity)",
        ]
        report = run(tmp_path, lines)
        said = report_text(report, why=True)
        assert report.status.state == "failed" and report.status.current != "training loop", said
        assert "training loop" not in said and "loop's bar" not in said, said


def test_vllms_offline_bar_at_its_total_ends_the_generation(tmp_path: Path) -> None:
    """vLLM's offline `Processed prompts` bar at N/N, then the script's own lines: every prompt was answered.
    Before: 'ended in generation' with 'Check max_tokens and stop tokens' (and, silent, 'a request that never
    ends'). A bar tqdm rounds to 100% one short of its total has not ended it."""
    lines = [
        "INFO 07-02 14:20:11 model_runner.py:1060] Graph capturing finished in 11 secs.",
        "Processed prompts:   0%|          | 0/300 [00:00<?, ?it/s]",
        "Processed prompts: 100%|██████████| 300/300 [00:52<00:00,  5.71it/s]",
        "elapsed: 52.6 s, throughput 5.70 req/s",
        "wrote ./outputs/gen_300.jsonl",
    ]
    report = run(tmp_path, lines)
    said = report_text(report, why=True)
    assert report.status.state != "failed" and report.status.current == "generation" and report.status.since
    assert "max_tokens" not in said and "never ends" not in said and "old log-prob" not in said, said
    short = run(tmp_path, [*lines[:2], "Processed prompts: 100%|█████████▉| 299/300 [00:52<00:00,  5.71it/s]"])
    assert "max_tokens" in report_text(short, why=True)


def test_lightnings_registered_group_ends_nccl_init_and_an_op_build_is_the_models_load(tmp_path: Path) -> None:
    """Lightning's `All distributed processes registered` ends the process group's making; torch's JIT op build
    (`… as PyTorch extensions root`) that follows is the model's load, told with the build lock's advice. Before:
    'ended in nccl init' with 'A rank never joined' and NCCL P2P advice on a run of one process. A world of one
    stalled before its registration is not told of missing ranks either."""
    lines = [
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/1",
        "All distributed processes registered. Starting with 1 processes",
        "Using /home/me/.cache/torch_extensions/py311_cu121 as PyTorch extensions root...",
    ]
    report = run(tmp_path, lines)
    said = report_text(report, why=True)
    assert report.status.current == "model load" and "lock" in said, said
    assert "never joined" not in said and "NCCL_P2P_DISABLE" not in said
    one = report_text(run(tmp_path, lines[:1]), why=True)
    assert "nccl init" in one and "never joined" not in one and "NCCL_P2P_DISABLE" not in one, one


def test_a_torchrun_restart_whose_rendezvous_closed_leaves_the_first_failure_the_runs(tmp_path: Path) -> None:
    """A worker lost its peer in the loop; torchrun's agent would restart the group, but its new rendezvous was
    closed. Before: 'FAILED in nccl init · RendezvousClosedError' (nccl init opened by the agent's own `_rendezvous`
    frame) while the alert said 'FAILED in training loop'; the restart was never told."""
    agent = "I0514 08:{} 4411 torch/distributed/elastic/agent/server/api.py:{}] [default] {}"
    site = "/usr/lib/python3.10/site-packages/torch/distributed/elastic"
    lines = [
        agent.format("10:02.100000", 677, "Rendezvous'ing worker group"),
        agent.format("10:03.200000", 685, "Starting worker group"),
        "[rank1] step 40 loss 0.9120",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/srv/train.py", line 88, in <module>',
        "[rank1]:     dist.all_reduce(grad)",
        "[rank1]: torch.distributed.DistBackendError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Connection closed by peer [10.0.3.9]:41812",
        agent.format("12:30.400000", 889, "Worker group FAILED. 2/2 attempts left; will restart worker group"),
        agent.format("12:30.500000", 677, "Rendezvous'ing worker group"),
        "Traceback (most recent call last):",
        f'  File "{site}/agent/server/api.py", line 541, in _rendezvous',
        "    rdzv_info = spec.rdzv_handler.next_rendezvous()",
        f'  File "{site}/rendezvous/dynamic_rendezvous.py", line 1150, in next_rendezvous',
        "torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
    ]
    report = run(tmp_path, lines)
    said = report_text(report, why=True)
    assert (report.status.state, report.status.current) == ("failed", "training loop"), said
    assert "DistBackendError" in report.status.failure and "nccl init" not in said
    assert "restarted the workers" in said and "rendezvous was closed" in said


def test_fairseqs_train_inner_lines_are_its_steps(tmp_path: Path) -> None:
    """fairseq (0.10 on) logs its progress as `| train_inner | epoch 001:  57 / 4100 loss=…, num_updates=50, …`,
    text or json. Before: 'ended in training loop after begin training epoch 1' and 'N lines no rule knows follow'
    with no steps. Its text-format validation record ends the epoch's validation."""
    head = ["2020-03-02 10:00:05 | INFO | fairseq.trainer | begin training epoch 1"]
    text = [f"2020-03-02 10:0{k}:10 | INFO | train_inner | epoch 001:     {10 * k + 7} / 4100 loss=9.{k}41, "
            f"ppl=700.1, wps=5120, ups=0.31, wpb=16384, bsz=128, num_updates={10 * k}, lr=0.0001, gnorm=1.2, "
            f"wall={60 * k}" for k in range(1, 5)]
    json = [f'2020-03-02 10:0{k}:10 | INFO | train_inner | {{"epoch": 1, "update": 0.00{k}, "loss": "9.{k}41", '
            f'"num_updates": "{10 * k}", "lr": "0.0001", "wall": "{60 * k}"}}' for k in range(1, 5)]
    for lines in (text, json):
        report = run(tmp_path, head + lines)
        said = report_text(report, why=True)
        assert report.status.current == "training loop" and "no rule knows" not in said, said
        assert report.status.steps_done == 4 and report.status.last_step.step == 40, said
    valid = [*head, *text, '2020-03-02 10:05:00 | INFO | fairseq_cli.train | begin validation on "valid" subset',
             "2020-03-02 10:05:40 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.912 | ppl 481.7 | "
             "num_updates 40"]
    assert run(tmp_path, valid).status.current == "training loop"


def test_hf_running_evaluation_starts_the_validation_and_its_bar_is_not_the_loops(tmp_path: Path) -> None:
    """HF Trainer's `***** Running Evaluation *****` starts the validation; its undescribed bar (another total) is
    the evaluation's, not the loop's. Before: the validation only guessed from a frame's words, and 'the loop's bar
    is at 40/63'. Its metrics record, or the loop's own bar again, ends it."""
    head = [
        "[INFO|trainer.py:2130] 2025-01-08 09:10:00,101 >> ***** Running training *****",
        "{'loss': 0.7012, 'grad_norm': 2.1, 'learning_rate': 4.8e-05, 'epoch': 0.1}",
        " 20%|██        | 200/1000 [02:10<08:40,  1.54it/s][INFO|trainer.py:3790] 2025-01-08 09:12:10,400 >> ",
        "***** Running Evaluation *****",
        "[INFO|trainer.py:3792] 2025-01-08 09:12:10,401 >>   Num examples = 2000",
        "  0%|          | 0/63 [00:00<?, ?it/s]",
        " 63%|██████▎   | 40/63 [00:09<00:05,  4.30it/s]",
    ]
    crash = [
        "Traceback (most recent call last):",
        '  File "/srv/train.py", line 301, in <module>',
        "    trainer.train()",
        "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 39.39 GiB total capacity)",
    ]
    report = run(tmp_path, head + crash)
    said = report_text(report, why=True)
    assert (report.status.state, report.status.current) == ("failed", "validation") and "a guess" not in said, said
    assert "bar is at 200/1000" in said and "40/63" not in said.split("errors:")[0]
    assert run(tmp_path, head).status.current == "validation"
    for end in ("{'eval_loss': 0.6120, 'eval_runtime': 14.2, 'eval_samples_per_second': 140.8, 'epoch': 0.2}",
                " 20%|██        | 201/1000 [02:26<10:10,  1.31it/s]"):
        assert run(tmp_path, [*head, " 100%|██████████| 63/63 [00:14<00:00,  4.41it/s]", end]).status.current == (
            "training loop"), end


def test_a_launchers_report_of_its_ranks_exit_does_not_replace_the_ranks_error(tmp_path: Path) -> None:
    """DeepSpeed's (or torch.distributed.launch's) launcher raises CalledProcessError naming the rank's command once
    the rank died: the rank's own error stays the headline (audit 23, ds845: the alert quoted the rank's error and
    replay the launcher's)."""
    lines = [
        "{'loss': 1.9021, 'learning_rate': 3e-05, 'epoch': 0.1}",
        "Traceback (most recent call last):",
        '  File "train.py", line 40, in <module>',
        "KeyError: 'labels'",
        "Traceback (most recent call last):",
        '  File "/opt/ds/deepspeed/launcher/launch.py", line 171, in sigkill_handler',
        "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=3', "
        "'--deepspeed', 'ds.json']' returned non-zero exit status 1.",
    ]
    assert run(tmp_path, lines).status.failure == "KeyError: 'labels'"
