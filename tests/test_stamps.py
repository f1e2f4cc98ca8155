"""The stamp table (analysis/time.py): every form users' logs print, one by one, with the prefixes
printed before it, read to the right second; the year or day a short form lacks comes from the
line's reference time; a date that does not exist is no stamp."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gkdtop.analysis.lines import clean_line, parse_line
from gkdtop.analysis.time import parse_timestamp
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import load_config
from gkdtop.replay import replay


def local(*fields: int, micro: int = 0) -> float:
    return datetime(*fields, microsecond=micro).timestamp()  # type: ignore[misc]


REF = local(2026, 3, 27, 9, 0, 0)  # the file's mtime, say: 09:00 on March 27th

# (line, its epoch): shapes as users' issues show them, values of our own.
FORMS = [
    # ISO 8601 with a zone, as kubectl --timestamps and most JSON loggers print it.
    ("2026-03-26T17:26:13Z x", datetime.fromisoformat("2026-03-26T17:26:13+00:00").timestamp()),
    ("2026-03-26T17:26:13.123456789Z Traceback (most recent call last):",
     datetime.fromisoformat("2026-03-26T17:26:13+00:00").timestamp() + 0.123456789),
    ("[2026-03-26 22:36:28,884] [INFO] [engine.py:12:init] x", local(2026, 3, 26, 22, 36, 28, micro=884000)),
    # fvcore (detectron2): month first, no year (audit 16: 'no timestamps').
    ("[03/26 22:36:28 d2.engine.train_loop]: Starting training from iteration 0", local(2026, 3, 26, 22, 36, 28)),
    # open_clip: a comma between the date and the time (audit 15: read as no stamp at all).
    ("2026-03-26,22:36:28 | INFO | Start epoch 39", local(2026, 3, 26, 22, 36, 28)),
    # lm-evaluation-harness: a colon between the date and the time (audit 18: 'one stamped time' on 12 stamps).
    ("2026-03-26:22:36:28,417 INFO     [evaluator.py:305] Running generate_until requests",
     local(2026, 3, 26, 22, 36, 28, micro=417000)),
    # c10d through torch's elastic agent: a rank prefix, then glog in brackets with a one-digit month.
    ("[rank0]:[W326 22:36:28.884042812 socket.cpp:489] [c10d] The client socket has timed out",
     local(2026, 3, 26, 22, 36, 28) + 0.884042812),
    ("[E314 14:33:45.172094 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout",
     local(2026, 3, 14, 14, 33, 45, micro=172094)),
    ("I1124 14:46:32.103260 4242 core_worker.cc:12] x", local(2025, 11, 24, 14, 46, 32, micro=103260)),
    ("INFO 03-26 17:06:36 [llm_engine.py:240] Initializing a V1 LLM engine", local(2026, 3, 26, 17, 6, 36)),
    ("(AReaL) 20260304-10:31:13.128 Trainer INFO: step 3", local(2026, 3, 4, 10, 31, 13, micro=128000)),
    # Python logging as `%(levelname)s:%(asctime)s:%(message)s`; a logger's `[rank0] ` (a space, not torch's colon).
    ("WARNING:2026-03-26 09:17:09,551:agent loop started", local(2026, 3, 26, 9, 17, 9, micro=551000)),
    ("[rank0] 2026-03-26 09:10:10,100 INFO trainer.py:88 step 0 loss=1.000",
     local(2026, 3, 26, 9, 10, 10, micro=100000)),
    # Grafana Loki's export: the capture time with its zone offset, then a tab (a layer like kubectl's).
    ("2026-03-26T00:57:02+08:00\t[2026-03-25 16:57:02 TP3] Scheduler hit an exception",
     datetime(2026, 3, 25, 16, 57, 2, tzinfo=timezone.utc).timestamp()),
    ("08:31:13.128 [INFO:swift] global_step 12", local(2026, 3, 27, 8, 31, 13, micro=128000)),
    ("21:10:00 [SUCCESS] Step 2 | 9.5s", local(2026, 3, 26, 21, 10, 0)),  # yesterday evening
    ("18:45:00 [SUCCESS] Step 3 | 9.1s", local(2026, 3, 26, 18, 45, 0)),  # not later than its file: yesterday
    ("09:30:02 [INFO] a clock a little ahead", local(2026, 3, 27, 9, 30, 2)),
    # Megatron: its iteration lines indented, its milestones stamped after their name.
    (" [2026-03-26 03:11:41] iteration        1/   20000 | consumed samples:           16 |",
     local(2026, 3, 26, 3, 11, 41)),
    ("[after dataloaders are built] datetime: 2026-03-26 03:11:09 ", local(2026, 3, 26, 3, 11, 9)),
    # pdsh, DeepSpeed's multi-node launcher, puts the host first.
    ("node07: [2026-03-26 15:10:09,902] [INFO] [launch.py:142:main] WORLD INFO DICT: {'node07': [0]}",
     local(2026, 3, 26, 15, 10, 9, micro=902000)),
    ("10.0.0.7: [2026-03-26 15:10:09,902] [INFO] [launch.py:148:main] nnodes=2", local(2026, 3, 26, 15, 10, 9,
                                                                                       micro=902000)),
    # HF transformers' explicit format: the level and file:line first, then the stamp.
    ("[INFO|trainer.py:1786] 2026-03-16 09:02:51,770 >> ***** Running training *****",
     local(2026, 3, 16, 9, 2, 51, micro=770000)),
    ("[WARNING|modeling_utils.py:3010] 2026-03-03 11:40:33,067 >> Some weights of the model checkpoint were not used",
     local(2026, 3, 3, 11, 40, 33, micro=67000)),
    # LLaMA-Factory's logger: the stamp inside the level's bracket.
    ("[INFO|2026-03-03 11:40:12] llamafactory.data.loader:143 >> Loading dataset alpaca_en_demo.json...",
     local(2026, 3, 3, 11, 40, 12)),
    ("[WARNING|2026-03-03 11:40:12] llamafactory.hparams.parser:162 >> `ddp_find_unused_parameters` needs to be "
     "set as False for LoRA in DDP training.", local(2026, 3, 3, 11, 40, 12)),
    # Python logging's `%m/%d/%Y %H:%M:%S` (HF's example scripts, accelerate, older LLaMA-Factory).
    ("03/18/2026 09:12:53 - INFO - llamafactory.hparams.parser - Process rank: 0, device: cuda:0, n_gpu: 1",
     local(2026, 3, 18, 9, 12, 53)),
    ("03/18/2026 09:12:53 - WARNING - llmtuner.hparams.parser - ddp_find_unused_parameters needs to be set as False",
     local(2026, 3, 18, 9, 12, 53)),
    # torchrun's error summary (the failure's local time, `_` between date and time) and elastic's own lines.
    ("  time      : 2026-03-20_03:43:05", local(2026, 3, 20, 3, 43, 5)),
    ("[2026-03-20 03:43:05,123] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -6) "
     "local_rank: 0 (pid: 1234) of binary: /usr/bin/python", local(2026, 3, 20, 3, 43, 5, micro=123000)),
    # torchelastic's old logger: the level alone in brackets, then the stamp (audit 17: "no timestamps").
    ("[INFO] 2026-03-20 07:41:03,214 api: [default] Rendezvous'ing worker group",
     local(2026, 3, 20, 7, 41, 3, micro=214000)),
    # torchtitan (behind torch's rank prefix), NeMo, loguru.
    ("[rank0]:[titan] 2026-03-20 19:44:53,858 - root - INFO - Starting job: Llama 3 8B training",
     local(2026, 3, 20, 19, 44, 53, micro=858000)),
    ("[NeMo I 2026-03-20 02:51:43 nemo_logging:393] loading checkpoint /workspace/models/Llama-3.1-8B",
     local(2026, 3, 20, 2, 51, 43)),
    ("2026-03-20 12:00:00.123 | INFO     | train:main:12 - step 3", local(2026, 3, 20, 12, 0, 0, micro=123000)),
    # A line glued to a tqdm bar that lost its `\r` (pasted, or read without them): its stamp after the redraws.
    (" 35%|███▌      | 100/284 [41:07<1:15:39, 24.67s/it][INFO|trainer.py:2904] 2026-03-16 09:43:59,012 >> Saving "
     "model checkpoint to /scratch/out/checkpoint-100", local(2026, 3, 16, 9, 43, 59, micro=12000)),
    # ... at 100% (three digits: the `%|` test looked one character short, so the last redraw's stamp went unread)
    ("100%|██████████| 940/940 [4:51:42<00:00, 18.74s/it][INFO|trainer.py:3503] 2026-03-16 15:54:24,006 >> Saving "
     "model checkpoint to /scratch/out/checkpoint-940", local(2026, 3, 16, 15, 54, 24, micro=6000)),
    ("  2%|▏         | 8/376 [35:02<26:47:40, 262.12s/it]  2%|▏         | 9/376 [39:31<26:51:07, 263.40s/it]"
     "[rank2]:[E316 10:27:51.204419857 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation timeout",
     local(2026, 3, 16, 10, 27, 51) + 0.204419857),
    # Any text glued before a rank's prefix (a bar with its description, a print that lost its newline): the
    # rank's line begins at `[rank3]:`, its stamp after it. A stamp at the very start still comes first.
    ("Loading checkpoint shards: 100%|██████████| 2/2 [00:01<00:00,  1.20it/s][rank3]:[E316 10:27:51.204419857 "
     "ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout",
     local(2026, 3, 16, 10, 27, 51) + 0.204419857),
    ("a print that lost its newline[rank0]: [2026-03-16 10:27:51,204] [INFO] [launch.py:315:sigkill_handler] x",
     local(2026, 3, 16, 10, 27, 51, micro=204000)),
    ("2026-03-01 10:00:00,123 [rank3]:[E301 10:00:05.100 x.cpp:1] x", local(2026, 3, 1, 10, 0, 0, micro=123000)),
    # Slurm's kill names its time inside the line (audit 21: a run's span ended 22 minutes before it).
    ("slurmstepd: error: *** JOB 40217 ON gpu-a12 CANCELLED AT 2026-03-02T04:00:17 DUE TO TIME LIMIT ***",
     local(2026, 3, 2, 4, 0, 17)),
    ("slurmstepd: error: *** STEP 40217.0 ON gpu-a12 CANCELLED AT 2026-03-02T04:00:17 ***",
     local(2026, 3, 2, 4, 0, 17)),
    # A test harness's or subprocess wrapper's stream tag before the stamp (audit 26: 'no timestamps').
    ("stdout: [2026-03-02 04:10:52,006] [INFO] [engine.py:150:__init__] RANK=0 STAGE=0 LAYERS=4",
     local(2026, 3, 2, 4, 10, 52, micro=6000)),
    ("stderr: [after training is done] datetime: 2026-03-02 04:10:55 ", local(2026, 3, 2, 4, 10, 55)),
]


@pytest.mark.parametrize(("line", "epoch"), FORMS, ids=[f[0][:24] for f in FORMS])
def test_each_form_is_read_to_its_second(line: str, epoch: float) -> None:
    parsed = parse_line(line, "train.log", REF)
    assert parsed.ts == pytest.approx(epoch, abs=1e-3), line


@pytest.mark.parametrize("line", [
    "2026-02-30 10:00:00,000 INFO February has no 30th",  # was read as March 2nd
    "2026-13-01 10:00:00 x",
    "E1399 10:00:00.1 1 x.cc:1] month 13",
    "25:61:00 [INFO] no such time",
    "Epoch 3: 100%|██████████| 10/10 [00:12<00:00,  1.19s/it]",
    "[rank0]: Traceback (most recent call last):",
    "INFO: 2026-03-26 10:00:00 is not a host's line",
    "Traceback: 12:00:00 neither",
    # Near misses of the forms above: a day and month alone, a date without its time, a version before a
    # date, a level's bracket naming an address and no stamp after it, a path with a date, a field not the time.
    "03/18 shards loaded",
    "03/18/2026 the date alone",
    "13/13/2026 09:12:53 - INFO - no 13th month either way",
    "0.9.1.dev0 03/18/2026 09:12:53 - INFO - a version first",
    "[INFO|10.0.0.7:29500] connecting to the master",
    "[INFO|trainer.py:1786] >> a level and no stamp",
    "[INFO] 2026-03-20 the date alone after a level",
    "/ckpt/2026-03-20_03:43:05/model.safetensors saved",
    "2026-03-20_03-43-05/checkpoint-100 saved",
    "  time      : 0.51s per step",
    "(scheduler +16s) Tip: use `ray status` to view detailed cluster status.",
    " 35%|███▌      | 100/284 [41:07<1:15:39, 24.67s/it]",  # a bar's elapsed time is no time of day
    " 35%|███▌      | 100/284 [41:07<1:15:39, 24.67s/it][rank2]: Traceback (most recent call last):",
])
def test_what_is_no_stamp(line: str) -> None:
    assert parse_line(line, "train.log", REF).ts is None


def test_skypilot_s_task_prefixes_are_split_off_like_ray_s() -> None:
    """SkyPilot names a task's lines `(task, pid=N)`, on several nodes `(task, worker1, rank=1, pid=N, ip=…)`: the
    message after it is what rules read (block 14: axolotl's `{'loss': …}` and bars behind it started no loop)."""
    record = "{'loss': 2.0413, 'grad_norm': 0.7311, 'epoch': 0.0}"
    one = parse_line(f"(hi-moe-lora, pid=21873) {record}", "train.log", REF)
    assert (one.worker, one.pid, one.text) == ("hi-moe-lora", 21873, record)
    many = parse_line("(sft, worker1, rank=1, pid=22755, ip=172.31.81.91) [2026-04-17 06:12:44,902] [INFO] x",
                      "train.log", REF)
    assert (many.worker, many.pid, many.ip) == ("sft", 22755, "172.31.81.91")
    assert many.ts == pytest.approx(local(2026, 4, 17, 6, 12, 44) + 0.902, abs=1e-3)
    head = parse_line("(sft, head, rank=0, pid=23862)   0%|          | 1/1920 [09:31<304:48:11, 571.79s/it]",
                      "train.log", REF)
    assert (head.worker, head.pid, head.text[:4]) == ("sft", 23862, "  0%")


def test_a_ray_prefix_a_process_prefix_and_a_rank_before_the_stamp() -> None:
    line = parse_line("(WorkerDict pid=4242, ip=10.0.0.3) [rank1]:[W326 22:36:28.884042812 socket.cpp:489] x",
                      "train.log", REF)
    assert (line.worker, line.pid, line.ip) == ("WorkerDict", 4242, "10.0.0.3")
    assert line.ts == pytest.approx(local(2026, 3, 26, 22, 36, 28) + 0.884042812, abs=1e-3)
    assert line.text.startswith("[rank1]:[W326")  # the text keeps what the job printed


def test_a_slashed_date_is_month_first_unless_it_cannot_be() -> None:
    """logging's `%m/%d/%Y` is the common one; a first field over 12 is the day, and so is it when month first
    would put the line after its file was last written (REF, March 27th) while day first would not."""
    assert parse_timestamp("03/05/2026 09:12:53 - INFO - x", REF) == local(2026, 3, 5, 9, 12, 53)
    assert parse_timestamp("02/03/2026 09:12:53 - INFO - x", REF) == local(2026, 2, 3, 9, 12, 53)  # both past
    assert parse_timestamp("18/03/2026 09:12:53 - INFO - x", REF) == local(2026, 3, 18, 9, 12, 53)
    assert parse_timestamp("05/03/2026 09:12:53 - INFO - x", REF) == local(2026, 3, 5, 9, 12, 53)  # not May 3rd
    assert parse_timestamp("05/03/2026 09:12:53 - INFO - x", local(2026, 6, 1)) == local(2026, 5, 3, 9, 12, 53)


def test_ray_s_scheduler_events_are_split_off_as_its_autoscaler_s_are() -> None:
    line = parse_line("(scheduler +5m31s) Warning: The following resource request cannot be scheduled right now: "
                      "{'GPU': 1.0, 'CPU': 1.0}.", "train.log", REF)
    assert (line.worker, line.pid) == ("scheduler", 0)
    assert line.text.startswith("Warning: The following resource request")


def test_kubectl_s_capture_stamp_then_ray_s_prefix() -> None:
    line = parse_line("2026-03-26T17:26:13.123456789Z (WorkerDict pid=4242, ip=10.0.0.3) INFO 03-26 01:00:00 x",
                      "train.log", REF)
    assert (line.worker, line.pid) == ("WorkerDict", 4242)
    assert line.text == "INFO 03-26 01:00:00 x"  # the message, past both
    assert line.ts == pytest.approx(datetime.fromisoformat("2026-03-26T17:26:13+00:00").timestamp() + 0.123456789)


def test_the_time_of_day_alone_takes_the_latest_day_not_after_its_reference() -> None:
    just_after_midnight = local(2026, 3, 27, 0, 5, 0)
    assert parse_timestamp("23:58:00 [INFO] x", just_after_midnight) == local(2026, 3, 26, 23, 58, 0)
    assert parse_timestamp("00:04:00 [INFO] x", just_after_midnight) == local(2026, 3, 27, 0, 4, 0)
    assert parse_timestamp("00:50:00 [INFO] x", just_after_midnight) == local(2026, 3, 27, 0, 50, 0)  # a clock ahead
    assert parse_timestamp("08:00:00 [INFO] x", local(2026, 3, 27, 23, 0, 0)) == local(2026, 3, 27, 8, 0, 0)
    # The same minute asked with references a few minutes apart across the hour of slack: each its own day.
    assert parse_timestamp("10:30:00 x", local(2026, 3, 27, 9, 15, 0)) == local(2026, 3, 26, 10, 30, 0)
    assert parse_timestamp("10:30:00 x", local(2026, 3, 27, 9, 45, 0)) == local(2026, 3, 27, 10, 30, 0)


def test_the_follower_reads_the_new_forms_from_a_real_file(tmp_path: Path) -> None:
    """Written in the shapes, read back by the log collector as the dashboard reads them: every line
    carries its own stamp (none is 'no timestamps' or the file's mtime)."""
    now = datetime.now().replace(microsecond=0) - timedelta(minutes=5)
    lines = [
        now.strftime("%H:%M:%S.123 [INFO:swift] {'loss': 1.25, 'global_step/max_steps': '1/100'}"),
        "(AReaL) " + now.strftime("%Y%m%d-%H:%M:%S.500 Trainer INFO: step 1"),
        "[rank0]:[W" + f"{now.month}{now:%d %H:%M:%S}" + ".884042812 socket.cpp:489] [c10d] timed out",
    ]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    collector = LogCollector([str(log)], backlog=100)
    try:
        got = collector.collect().lines
    finally:
        collector.close()
    assert [line.ts is not None for line in got] == [True, True, True], [line.text for line in got]
    for line in got:
        assert abs(line.ts - now.timestamp()) < 1.0, line.text  # type: ignore[operator]
    assert time.time() - got[0].ts > 240  # type: ignore[operator]  # five minutes old, not the file's mtime


# Logs in each form a real stack prints, stamped a minute ago or less (live, a stamp further back than
# SKEW_MIN would read as the job's clock being behind): (seconds after the first line, line), `{t}` the stamp.
ISO_MS = ("%Y-%m-%d %H:%M:%S,{ms}", "%Y-%m-%d %H:%M:%S", "%m/%d/%Y %H:%M:%S", "%Y-%m-%d_%H:%M:%S")
TORCHRUN_SUMMARY = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                    "============================================================", "pretrain_gpt.py FAILED",
                    "------------------------------------------------------------", "Failures:",
                    "  <NO_OTHER_FAILURES>", "------------------------------------------------------------",
                    "Root Cause (first observed failure):", "[0]:"]
LOGS: dict[str, tuple[str, list[tuple[int | None, str]], dict[str, int]]] = {
    # name: (the stamp's strftime, lines, a phase and the second it starts at)
    "hf-transformers": (ISO_MS[0], [
        (0, "[INFO|modeling_utils.py:3341] {t} >> loading weights file /m/Llama-2-7b/model.safetensors.index.json"),
        (12, "[WARNING|modeling_utils.py:3010] {t} >> Some weights of the model checkpoint were not used"),
        (30, "[INFO|trainer.py:2134] {t} >> ***** Running training *****"),
        (40, "[INFO|trainer.py:2135] {t} >>   Num examples = 981"),
    ], {"model load": 0, "training loop": 30}),
    "llamafactory": (ISO_MS[1], [
        (0, "[INFO|{t}] llamafactory.hparams.parser:355 >> Process rank: 0, device: cuda:0, n_gpu: 1, distributed "
            "training: True, compute dtype: torch.bfloat16"),
        (10, "[INFO|{t}] llamafactory.data.loader:143 >> Loading dataset alpaca_en_demo.json..."),
        (30, "[WARNING|{t}] llamafactory.model.loader:143 >> trainable params: 20,971,520 || all params: "
             "8,051,232,768 || trainable%: 0.2605"),
        (40, "[INFO|{t}] llamafactory.model.loader:143 >> Gradient checkpointing enabled."),
    ], {"config": 0, "dataset generation": 10, "model load": 30}),
    "logging-us-date": (ISO_MS[2], [
        (0, "{t} - INFO - llamafactory.data.loader - Loading dataset alpaca_gpt4_data_zh.json..."),
        (12, "{t} - WARNING - llmtuner.hparams.parser - ddp_find_unused_parameters needs to be set as False"),
        (30, "{t} - INFO - transformers.trainer - ***** Running training *****"),
        (40, "{t} - INFO - transformers.trainer -   Num examples = 48,818"),
    ], {"dataset generation": 0, "training loop": 30}),
    "torchrun-summary": (ISO_MS[3], [
        (None, "[{d},000] [INFO] [real_accelerator.py:222:get_accelerator] Setting ds_accelerator to cuda"),
        (None, "  1%|          | 1/100 [00:05<08:15,  5.00s/it]"),
        (None, "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=612, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600077 "
               "milliseconds before timing out."),
        *((None, line) for line in TORCHRUN_SUMMARY),
        (40, "  time      : {t}"),
        (None, "  host      : node-1"), (None, "  rank      : 0 (local_rank: 0)"),
        (None, "  exitcode  : -6 (pid: 4242)"),
    ], {}),
    "hf-glued-to-a-bar": (ISO_MS[0], [
        (0, "[INFO|trainer.py:1786] {t} >> ***** Running training *****"),
        (None, "{{'loss': 1.4127, 'learning_rate': 9.82e-05, 'epoch': 0.35}}"),
        (40, " 35%|███▌      | 100/284 [00:40<01:15,  2.47s/it][INFO|trainer.py:2904] {t} >> Saving model checkpoint "
             "to /scratch/out/checkpoint-100"),
    ], {"training loop": 0}),  # the checkpoint save is inside the loop: its stamp is where the log ends
    "glued-before-a-rank": (ISO_MS[0], [  # text glued before `[rank0]:` (history's fast lines too)
        (0, "[rank0]: [{t}] [INFO] [engine.py:12:__init__] DeepSpeed info: version=0.14.0, git-hash=unknown"),
        (30, "Epoch 1:  10%|█         | 1/10 [00:05<00:45,  5.00s/it][rank0]: [{t}] [INFO] [logging.py:96:log_dist] "
             "step=1, skipped=0, lr=[1e-05]"),
        (40, "a print that lost its newline[rank1]: [{t}] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4"),
    ], {"model load": 0, "training loop": 30}),
    "torchtitan": (ISO_MS[0], [
        (0, "[rank0]:[titan] {t} - root - INFO - Starting job: Llama 3 8B training"),
        (40, "[rank0]:[titan] {t} - root - INFO - step:  1  loss: 12.2498  memory: 39.19GiB(41.23%)  tps: 1,238"),
    ], {}),
    "nemo": (ISO_MS[1], [
        (0, "[NeMo I {t} nemo_logging:393] loading checkpoint /workspace/models/Llama-3.1-8B"),
        (40, "[NeMo W {t} rnnt_models:224] Setting up the model with a default tokenizer"),
    ], {}),
}


def written(name: str, base: datetime) -> tuple[str, list[float]]:
    """The log `name` stamped from `base`, and the time of each stamped line."""
    form, lines, _ = LOGS[name]
    out, times = [], []
    for at, line in lines:
        if at is None:  # unstamped, or stamped by a form read before (DeepSpeed's) at `base`
            out.append(line.format(d=base.strftime("%Y-%m-%d %H:%M:%S")))
            if "{d}" in line:
                times.append(base.timestamp())
            continue
        when = base + timedelta(seconds=at, milliseconds=at * 7)  # a fraction where the form prints one
        stamp = when.strftime(form.format(ms=f"{when.microsecond // 1000:03d}"))
        times.append(when.timestamp() if "{ms}" in form else when.replace(microsecond=0).timestamp())
        out.append(line.format(t=stamp))
    return "".join(line + "\n" for line in out), times


@pytest.mark.parametrize("name", list(LOGS))
def test_each_form_dates_replay_history_and_the_live_follower(name: str, tmp_path: Path) -> None:
    """Before, replay said 'no timestamps: duration unknown' of these logs (or took the last stamp it could
    read as the end): now replay's JSON, history's phases and the follower's lines carry each line's stamp."""
    import json
    import subprocess
    import sys

    from gkdtop.config import builtin_phases
    from tests.verlrun import live_and_history

    base = datetime.now().replace(microsecond=0) - timedelta(seconds=55)
    text, times = written(name, base)
    phases = LOGS[name][2]
    log = tmp_path / "train.log"
    log.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", str(log)], capture_output=True,
                          text=True, timeout=120, check=True)
    doc = json.loads(proc.stdout)
    assert (doc["started"], doc["ended"]) == (pytest.approx(times[0], abs=1e-3), pytest.approx(times[-1], abs=1e-3))
    starts = {span["name"]: span["start"] for span in doc["timeline"]}
    for phase, at in phases.items():
        assert starts[phase] == pytest.approx(base.timestamp() + at * 1.007 if "{ms}" in LOGS[name][0]
                                              else base.timestamp() + at, abs=1e-3), (phase, starts)

    history, store = live_and_history(tmp_path, text, lambda s: s.total_lines >= len(LOGS[name][1]))
    plain = {rule.name: rule.plain for rule in builtin_phases() if rule.plain}  # replay's names: no RL trainer here
    for engine in (history, store.phases):
        spans = {plain.get(span.name, span.name): span.start for span in engine.spans()}
        for phase in phases:
            assert spans[phase] == pytest.approx(starts[phase], abs=1e-3), (phase, spans)
    live = [line.ts for line in store.lines_since(0) if line.ts is not None]
    assert live == pytest.approx(times, abs=1e-3), [line.text for line in store.lines_since(0)]


def test_a_copied_log_dated_month_first_lends_its_year_to_glog_stamps(tmp_path: Path) -> None:
    """LLaMA-Factory 0.8 stamps `03/18/2024 09:12:53`, torch's watchdog `[E318 …]` with no year: in a log
    copied in 2026 the watchdog is from the run's March (2024), not from March 2026."""
    import os

    from gkdtop.config import load_config
    from gkdtop.replay import replay

    log = tmp_path / "copied.log"
    log.write_text("03/18/2024 09:12:53 - INFO - llamafactory.data.loader - Loading dataset alpaca.json...\n"
                   "[rank1]:[E318 09:22:53.204419857 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                   "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.\n")
    copied = local(2026, 11, 24, 10, 0)
    os.utime(log, (copied, copied))
    report = replay([str(log)], load_config(None))
    assert report.started == local(2024, 3, 18, 9, 12, 53)
    assert report.ended == pytest.approx(local(2024, 3, 18, 9, 22, 53) + 0.204419857)


@pytest.mark.parametrize("written", [(3, 28, 0, 10), (3, 28, 1, 31), (3, 28, 15, 0), (3, 28, 23, 59)])
def test_a_run_across_midnight_stamped_with_the_time_alone_goes_on_into_the_next_day(
        tmp_path: Path, written: tuple[int, int, int, int]) -> None:
    """Audit 15: SGLang's `[23:59:50 TP0]` … `[01:30:10 TP0]`, each stamp placed alone on the latest day before the
    file's mtime: with the mtime's time of day inside the run's span, "23h00m from 01:30:10 to 00:30:10" and a false
    STALLED. Now the last stamp is placed by the mtime, the first the span before it, the rest in order."""
    import os

    from gkdtop.config import load_config
    from gkdtop.replay import replay

    lines = ["[23:58:45] The server is fired up and ready to roll!"] + [
        f"[{hh}:{mm}:10 TP0] Decode batch. #running-req: 1, #token: 41{i}1, token usage: 0.00, gen throughput "
        "(token/s): 396.85, #queue-req: 0" for i, (hh, mm) in enumerate([("23", "59"), ("00", "00"), ("00", "30"),
                                                                          ("01", "30")])]
    log = tmp_path / "serve.log"
    log.write_text("".join(line + "\n" for line in lines))
    month, day, hour, minute = written
    mtime = local(2026, month, day, hour, minute, 0)
    os.utime(log, (mtime, mtime))
    report = replay([str(log)], load_config(None))
    assert report.ended - report.started == pytest.approx(3600 + 31 * 60 + 25)  # 23:58:45 to 01:30:10
    starts = [span.start for span in report.status.timeline]
    assert starts == sorted(starts) and report.status.state != "stalled"


@pytest.mark.parametrize(("tods", "span"), [
    # busy in the evening, idle overnight, busy in the morning: a gap over 12 hours (review of session 22)
    (["17:00:00", "17:40:00", "08:00:00", "08:20:00"], 15 * 3600 + 20 * 60),
    # a 13-hour gap within one day
    (["09:00:00", "09:40:00", "22:50:00", "22:59:00"], 13 * 3600 + 59 * 60),
    # over a day: 10:00 on day 1 to 15:52 on day 2
    (["10:00:00", "18:00:00", "02:00:00", "09:00:00", "15:52:00"], 29 * 3600 + 52 * 60),
    # a line 15 s out of order just after midnight: not 23h59m45s ahead (the span and the clock share day_shift)
    (["23:59:50", "00:00:10", "23:59:55", "00:00:20"], 30),
])
def test_time_of_day_stamps_go_forward_whatever_the_gaps(tmp_path: Path, tods: list[str], span: int) -> None:
    """Each time of day that goes back is a new day; the last stamp lies just before the file's mtime. Before: a gap
    over 12 hours ran the stamps backwards ('9h40m from 08:00:00 to 17:40:00'), a log over a day ended a day past
    its mtime (a false 'no progress for 23h59m')."""
    import os

    from gkdtop.config import load_config
    from gkdtop.replay import replay

    lines = ["[" + tods[0] + "] The server is fired up and ready to roll!"] + [
        f"[{tod} TP0] Decode batch. #running-req: 2, #token: 1000, token usage: 0.01, gen throughput (token/s): "
        "100.00, #queue-req: 0" for tod in tods[1:]]
    log = tmp_path / "serve.log"
    log.write_text("".join(line + "\n" for line in lines))
    hh, mm, _ = map(int, tods[-1].split(":"))
    mtime = local(2026, 3, 2, hh, mm, 5)
    os.utime(log, (mtime, mtime))
    report = replay([str(log)], load_config(None))
    assert report.ended - report.started == pytest.approx(span) and report.ended == pytest.approx(mtime - 5)


@pytest.mark.parametrize("stamp", ["[2026-04-02 18:07:31] ", "【2026-04-02 18:07:31】", "【2026-04-02 18:07:31】 "])
def test_a_capture_stamp_before_rays_prefix_is_the_lines_time_and_the_prefix_is_split(
        tmp_path: Path, stamp: str) -> None:
    """A viewer's or a platform's stamp before every line, Ray's prefix after it (audit 20: `【date time】(main_task
    pid=N) …` read as no stamp at all, and the Ray prefix not as one: framework "Ray", no rule's `^` matched)."""
    lines = [f"{stamp}(TaskRunner pid=6120) Total training steps: 40",
             f"{stamp.replace('18:07:31', '18:12:02')}(WorkerDict pid=6377) Loading checkpoint shards: 100%|█| 4/4",
             "[2026-04-02 18:12:03] Loading checkpoint shards: 100%|██████████| 4/4 [00:02<00:00,  1.61it/s]"]
    path = tmp_path / "train.log"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    report = replay([str(path)], load_config(None))
    assert report.started == pytest.approx(local(2026, 4, 2, 18, 7, 31))
    assert report.ended == pytest.approx(local(2026, 4, 2, 18, 12, 3))
    assert report.framework is not None and report.framework.name == "verl"
    one = parse_line(clean_line(lines[0].encode()), "train.log", REF)
    assert (one.worker, one.pid, one.text) == ("TaskRunner", 6120, "Total training steps: 40")
    assert one.ts == pytest.approx(local(2026, 4, 2, 18, 7, 31))
    # a program's own `[date time] message` keeps its text: only a Ray prefix after it makes the stamp a layer
    own = parse_line("[2026-04-02 18:07:31] Decode batch. #running-req: 3", "train.log", REF)
    assert own.text.startswith("[2026-04-02") and own.ts == pytest.approx(local(2026, 4, 2, 18, 7, 31))
