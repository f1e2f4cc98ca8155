"""The stamp table (analysis/time.py): every form users' logs print, one by one, with the prefixes
printed before it, read to the right second; the year or day a short form lacks comes from the
line's reference time; a date that does not exist is no stamp."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gkdtop.analysis.lines import parse_line
from gkdtop.analysis.time import parse_timestamp
from gkdtop.collectors.logs import LogCollector


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
    # c10d through torch's elastic agent: a rank prefix, then glog in brackets with a one-digit month.
    ("[rank0]:[W326 22:36:28.884042812 socket.cpp:489] [c10d] The client socket has timed out",
     local(2026, 3, 26, 22, 36, 28) + 0.884042812),
    ("[E314 14:33:45.172094 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout",
     local(2026, 3, 14, 14, 33, 45, micro=172094)),
    ("I1124 14:46:32.103260 4242 core_worker.cc:12] x", local(2025, 11, 24, 14, 46, 32, micro=103260)),
    ("INFO 03-26 17:06:36 [llm_engine.py:240] Initializing a V1 LLM engine", local(2026, 3, 26, 17, 6, 36)),
    ("(AReaL) 20260304-10:31:13.128 Trainer INFO: step 3", local(2026, 3, 4, 10, 31, 13, micro=128000)),
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
])
def test_what_is_no_stamp(line: str) -> None:
    assert parse_line(line, "train.log", REF).ts is None


def test_a_ray_prefix_a_process_prefix_and_a_rank_before_the_stamp() -> None:
    line = parse_line("(WorkerDict pid=4242, ip=10.0.0.3) [rank1]:[W326 22:36:28.884042812 socket.cpp:489] x",
                      "train.log", REF)
    assert (line.worker, line.pid, line.ip) == ("WorkerDict", 4242, "10.0.0.3")
    assert line.ts == pytest.approx(local(2026, 3, 26, 22, 36, 28) + 0.884042812, abs=1e-3)
    assert line.text.startswith("[rank1]:[W326")  # the text keeps what the job printed


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
