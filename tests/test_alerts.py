"""The events themselves: what is told and when, on real-shaped logs, read at the pace of their own
stamps (`gkdtop replay --alerts`) and live in the dashboard (the real app in the Pilot, a real webhook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gkdtop.alerts.paced import paced_events
from gkdtop.config import load_config
from tests.alerting import Webhook
from tests.gkdlog import asctime, startup

CORPUS = Path(__file__).resolve().parent / "corpus"


def healthy_logs() -> list[Path]:
    """Every corpus log of a run that was fine (retired held-out ones included; the blind ones are scored once,
    unseen, and no test reads gkdtop's output on them). Not a run the posted set's SOURCES.md calls `slow`: its
    silences (SGLang's 14-minute prefill of a full KV cache) are worth a page and its recovery."""
    from tests.corpus_eval import held_out_names

    left_out = {row[7].strip() for line in (CORPUS / "posted" / "SOURCES.md").read_text().splitlines()
                if line.startswith("| ") and len(row := line.split("|")) > 8 and row[4].strip().startswith("slow")}
    left_out |= held_out_names(CORPUS / "posted")
    found = []
    for expect in sorted([*CORPUS.glob("*.expect.yaml"), *(CORPUS / "posted").glob("*.expect.yaml")]):
        name = expect.name.replace(".expect.yaml", "")
        if yaml.safe_load(expect.read_text()).get("state") in ("done", "running") and name not in left_out:
            found.append(expect.with_name(name + ".log"))
    return found


async def first_post(pilot, hook: Webhook, timeout: float = 90.0) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """The webhook's first message, the app running meanwhile (its loop sends it)."""
    deadline = time.monotonic() + timeout
    while hook.posts.empty() and time.monotonic() < deadline:
        await pilot.pause(0.2)
    return hook.next(timeout=1)


def test_no_healthy_corpus_run_would_have_paged_anyone() -> None:
    config = load_config(None)
    logs = healthy_logs()
    assert len(logs) >= 12
    told = {log.name: [e.kind for e in paced_events(str(log), config)] for log in logs}
    alarms = {name: kinds for name, kinds in told.items() if {"stalled", "failed"} & set(kinds)}
    assert not alarms, alarms
    assert sum(kinds == ["finished"] for kinds in told.values()) >= 8  # the finished ones say so, once


def test_a_stall_in_the_middle_is_told_once_with_its_recovery_and_a_crash_as_failed(tmp_path: Path) -> None:
    t0 = time.time() - 5000
    lines, t = startup(t0, upto="training", steps=3, step_s=30)
    lines.append(f"{asctime(t + 600)} root INFO step:4 - timing_s/step:30.000")  # ten minutes of silence
    lines.append(f"{asctime(t + 630)} root INFO step:5 - timing_s/step:30.000")
    lines += ["Traceback (most recent call last):", '  File "main_ppo.py", line 3, in <module>',
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    events = paced_events(str(log), load_config(None))
    assert [e.kind for e in events] == ["stalled", "recovered", "failed"]
    stalled, recovered, failed = events
    assert stalled.phase == "training loop" and stalled.steps == 3
    assert 120 <= (stalled.seconds or 0) < 600
    # told as the step that ended the stall came, not at the next check that found none (audit 19: five hours late)
    assert abs(recovered.time - (t + 600)) < 1
    assert "OutOfMemoryError" in failed.culprit


def test_a_loop_whose_bars_carry_no_stamp_is_no_stall(tmp_path: Path) -> None:
    """Audit 16: HF Trainer's bars carry no stamp and its stamped lines are minutes apart: each bar was placed at the
    last stamp before it, so a healthy run read 'STALLED in training loop for 10m01s' 20 minutes into its steps.
    A bar's redraw is now dated by its first one and the elapsed time it shows since."""
    lines = ["[INFO|trainer.py:2128] 2024-06-03 09:00:02,441 >> ***** Running training *****"] + [
        f"{n:3d}%|█         | {n}/100 [{n * 15 // 60:02d}:{n * 15 % 60:02d}<{(100 - n) * 15 // 60:02d}:00, 15.00s/it]"
        for n in range(5, 85, 5)] + [
        "[INFO|trainer.py:3478] 2024-06-03 09:20:10,004 >> Saving model checkpoint to ./out/checkpoint-80"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    end = time.mktime(time.strptime("2024-06-03 09:20:11", "%Y-%m-%d %H:%M:%S"))
    os.utime(log, (end, end))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []


def test_a_steady_bar_glued_before_a_later_stamp_covers_the_gap_since_the_last(tmp_path: Path) -> None:
    """Audit 18: HF Trainer under DeepSpeed: after the last stamp only unstamped dicts, then, 1h40m later, the bar's
    redraw glued before DeepSpeed's step line (`][[`: its stamp unread), its clock showing steady steps all along.
    Before: 'STALLED in training loop for 2m01s' two minutes after the last stamp. A bar that stood still for most
    of its time still lets the stall be told."""
    def lines(done: int, pace: str) -> list[str]:
        return ["[2025-05-12 06:00:03,118] [INFO] [engine.py:210:__init__] DeepSpeed Flops Profiler Enabled: False",
                "***** Running training *****",
                "[2025-05-12 06:00:20,551] [INFO] [stage3.py:1812:_overflow_clean_up] [deepspeed] OVERFLOW! Rank 0 "
                "Skipping step. Attempted loss scale: 65536, reducing to 32768",
                "{'loss': 3.1, 'learning_rate': 0.0005, 'epoch': 0.03}",
                "{'loss': 2.8, 'learning_rate': 0.0005, 'epoch': 0.06}",
                f" 12%|█▏        | {done}/15000 [1:40:00<12:10:00, {pace}s/it][[2025-05-12 07:40:21,909] [INFO] "
                f"[logging.py:60:log_dist] [Rank 0] step={done + 1}, skipped=3, lr=[0.0005], mom=[0.9]",
                f"[2025-05-12 07:40:21,950] [INFO] [timer.py:181:stop] 0/{done + 1}, SamplesPerSec=9.61"]

    log = tmp_path / "train.log"
    end = time.mktime(time.strptime("2025-05-12 07:40:22", "%Y-%m-%d %H:%M:%S"))
    for done, pace, told in ((1799, "3.33", []), (300, "3.33", ["stalled", "recovered"])):
        log.write_text("\n".join(lines(done, pace)) + "\n")
        os.utime(log, (end, end))
        assert [e.kind for e in paced_events(str(log), load_config(None))] == told, (done, pace)


def test_an_alert_names_the_phase_as_replays_verdict_does(tmp_path: Path) -> None:
    """Audit 17: replay said `FAILED, likely in checkpoint save` (a save's words, then the watchdog), the alert `FAILED
    in training loop`: the loop in place of the part, and no hedge on a guess."""
    from gkdtop.replay import replay, report_text

    lines = ["  0%|          | 0/90 [00:00<?, ?it/s]",
             "1|90|Loss: 0.8801: 100%|██████████| 90/90 [40:30<00:00, 27.00s/it]",
             "Now saving the merged LoRA weights to /ckpt/final ...",  # (words only: torchtune's own lines are a rule)
             "[rank1]:[E0301 12:41:02.114221002 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
             "operation "
             "timeout: WorkNCCL(SeqNum=9120, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
             "600044 milliseconds before timing out."]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    config = load_config(None)
    assert "FAILED, likely in checkpoint save" in report_text(replay([str(log)], config)).splitlines()
    failed = [e for e in paced_events(str(log), config) if e.kind == "failed"]
    assert [e.title for e in failed] == ["gkdtop: train.log FAILED, likely in checkpoint save"], failed
    assert failed[0].as_json()["guess"] is True and "failed, likely in checkpoint save" in failed[0].message


def test_a_run_whose_log_ends_in_its_final_save_is_told_finished_when_the_save_ends_or_with_a_note(
        tmp_path: Path) -> None:
    """Audits 16, 18 and 19: `finished` was sent as the final save began, for a save that might hang (it would never
    say so) or end three minutes later. Now a finished run whose log ends in its final save waits for the save's end
    (SAVE_WAIT); one still saving then is told with the note that it may still run."""
    lines = []
    for i in range(1, 31):
        lines += [f"{{'loss': {2.0 - i / 30:.4f}, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': {i / 30:.2f}}}",
                  f" {i * 100 // 30}%|██        | {i}/30 [00:{i:02d}<00:30,  1.00s/it]"]
    lines += ["[INFO|trainer.py:2653] 2026-03-02 10:00:50,123 >> Training completed. Do not forget to share your model",
              "{'train_runtime': 30.1, 'train_samples_per_second': 8.0, 'train_steps_per_second': 1.0, 'epoch': 1.0}",
              "[INFO|trainer.py:3984] 2026-03-02 10:00:51,001 >> Saving model checkpoint to /out/final"]
    log = tmp_path / "sft.log"
    saved = "[INFO|modeling_utils.py:818] 2026-03-02 10:03:40,022 >> Model weights saved in /out/final/model.bin"
    log.write_text("".join(line + "\n" for line in [*lines, saved]))
    events = paced_events(str(log), load_config(None))
    assert [(e.kind, e.title, e.saving, int(e.time) % 3600) for e in events] == [
        ("finished", "gkdtop: sft.log finished", False, 220)]  # at 10:03:40, as the save ended
    warned = ("2026-03-02 10:16:00,100 - py.warnings - WARNING - /venv/lib/python3.11/site-packages/torch/utils/"
              "checkpoint.py:90: UserWarning: None of the inputs have requires_grad=True")
    log.write_text("".join(line + "\n" for line in [*lines, warned]))
    events = paced_events(str(log), load_config(None))
    assert [(e.kind, e.title) for e in events] == [
        ("finished", "gkdtop: sft.log finished training; its log ends in the final save")]
    assert events[0].as_json()["saving"] is True and "still saving" in events[0].message
    log.write_text("".join(line + "\n" for line in lines))  # the log ends as the save begins: nothing told yet
    assert paced_events(str(log), load_config(None)) == []


def test_unstamped_lines_through_a_gap_between_two_stamps_are_no_stall_the_file_shows(tmp_path: Path) -> None:
    """Audit 17 (rllm): an agent's sandbox printed unstamped lines all through an 11-minute gap between two stamped
    lines; dated at the first stamp, they read as a 10-minute STALLED. Lines that could have split the gap into
    silences under the limit leave no stall the file shows; a gap with one line in it still does."""
    t0 = time.time() - 5000
    lines, t = startup(t0, upto="training", steps=3, step_s=30)
    filled = lines + [f"sandbox: ran test case {i}: ok" for i in range(40)]
    filled.append(f"{asctime(t + 700)} root INFO step:4 - timing_s/step:30.000")
    log = tmp_path / "agent.log"
    log.write_text("".join(line + "\n" for line in filled))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []
    sparse = [*lines, "sandbox: ran test case 0: ok", f"{asctime(t + 700)} root INFO step:4 - timing_s/step:30.000"]
    log.write_text("".join(line + "\n" for line in sparse))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled", "recovered"]


def test_a_bar_glued_to_a_stamp_says_the_run_went_on_through_the_gap_before_it(tmp_path: Path) -> None:
    """A 100% bar glued to a stamped line (`…[1:48:31<00:00, 16.96s/it][INFO|trainer.py:2316] 2026-… >>`), after 1h48m
    of unstamped metric dicts: its own clock covers the gap, no stall (it was no stamp at all before: `%|` looked
    for one character short)."""
    lines = ["[INFO|trainer.py:2048] 2026-04-26 08:02:15,381 >> ***** Running training *****",
             "[INFO|trainer.py:2054] 2026-04-26 08:02:15,381 >>   Total optimization steps = 384"]
    lines += [f"{{'loss': {2.1 - i / 40:.4f}, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': {i / 10:.2f}}}"
              for i in range(1, 20)]
    lines += ["100%|██████████| 384/384 [1:48:31<00:00, 16.96s/it][INFO|trainer.py:2316] 2026-04-26 09:50:47,106 >> ",
              "Training completed. Do not forget to share your model on huggingface.co/models =)",
              "{'train_runtime': 6511.7, 'train_samples_per_second': 0.94, 'train_steps_per_second': 0.06, "
              "'epoch': 2.0}"]
    log = tmp_path / "pt.log"
    log.write_text("".join(line + "\n" for line in lines))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["finished"]


def test_a_loop_that_logs_every_fifty_iterations_is_no_stall_between_its_lines(tmp_path: Path) -> None:
    """Audit 19 (a DeepSpeed/Megatron fp16 run): the first `iteration 50/ 10000 | elapsed time per iteration (ms):
    13281.3` came 11 minutes into the loop (its fp16 loss-scale OVERFLOW lines), the next 12 minutes later; the limit
    was twice one iteration's time (2 min) and a STALLED came between every two lines. The first line's distance into
    the loop is one log interval."""
    def stamp(hh: int, mm: int, ss: int) -> str:
        return f"[2024-09-11 {hh:02d}:{mm:02d}:{ss:02d},210] [INFO]"

    lines = [f"{stamp(17, 50, 2)} [checkpointing.py:546:forward] ----Profiling time in checkpointing False"]
    lines += [f"{stamp(17, 50 + k, 56)} [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
              f"Attempted loss scale: {2 ** (32 - k)}, reducing to {2 ** (31 - k)}" for k in range(3)]
    for n, (hh, mm) in enumerate([(18, 1), (18, 13), (18, 25)], 1):
        lines.append(f"{stamp(hh, mm, 56)} [RANK 0] iteration {50 * n:>7}/   10000 | elapsed time per iteration (ms): "
                     f"{13281.3 + n:.1f} | learning rate 1.000E-05 | total loss 1.3E-01 | loss scale: 33554432.0 |")
    log = tmp_path / "sat.log"
    log.write_text("".join(line + "\n" for line in lines))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []


def test_replay_alerts_json_from_the_command_line(tmp_path: Path) -> None:
    lines, _ = startup(time.time() - 4000, upto="sync")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--alerts", "--json", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []  # the log's end is not a silence: it stops where it was written


async def test_the_dashboard_tells_a_webhook_and_shows_a_toast_when_its_log_stalls(tmp_path: Path) -> None:
    from argparse import Namespace

    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp

    hook = Webhook()
    now = time.time()
    lines, _ = startup(now - 100, upto="sync")
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    config = load_config(None)
    config.stall_after, config.stall_stacks, config.stack_phase, config.notify = 2.0, False, False, [hook.url]
    app = GkdtopApp(config, Monitor(config, logs=[str(log)]), alert_args=Namespace(job_name="gkd-run"))
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            message = await first_post(pilot, hook)
            assert message["title"].startswith("gkdtop: gkd-run STALLED in weight sync"), message
            assert any("gkd-run STALLED in weight sync" in str(n.message) for n in app._notifications)
    finally:
        hook.close()


async def test_gkdtop_run_tells_a_webhook_how_the_job_it_started_ended(tmp_path: Path) -> None:
    """`gkdtop run --notify URL -- CMD`: the job's own exit status is a `failed` message naming it."""
    from argparse import Namespace

    from gkdtop import jobrun
    from gkdtop.monitor import Monitor
    from gkdtop.tui.app import GkdtopApp

    hook = Webhook()
    script = tmp_path / "job.py"
    script.write_text("import sys\nprint('step:1 - loss:0.5', flush=True)\nsys.exit(3)\n")
    plan = jobrun.plan_run(jobrun.RunOptions([sys.executable, str(script)], probe=False), run_dir=tmp_path / "run")
    job = jobrun.start(plan)
    config = load_config(None)
    config.stall_stacks = config.stack_phase = False
    app = GkdtopApp(config, Monitor(config, logs=[str(plan.log_path)], root_pids=(job.pid,)), job=job,
                    alert_args=Namespace(notify=[hook.url], job_name="sft"))
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            message = await first_post(pilot, hook)
            assert message["type"] == "failure" and message["title"].startswith("gkdtop: sft FAILED"), message
            assert "culprit: the job exited with code 3" in message["message"], message
    finally:
        hook.close()
        job.wait(10)


def test_a_flapping_job_is_told_once_per_window_and_a_stall_that_lasts_is_told_when_it_opens(tmp_path: Path) -> None:
    from gkdtop.alerts.events import AlertWatcher
    from gkdtop.analysis.lines import parse_line
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.model import LogFileState
    from gkdtop.store import Store

    config = load_config(None)
    config.stall_after, config.stall_fixed = 60.0, True
    store = Store(config)
    store.log_polls = 2
    watcher = AlertWatcher(store, "job", every=600.0, heartbeat=1000.0)
    watcher.started = 0.0
    files = [LogFileState("train.log", "following")]

    def step(n: int, t: float) -> None:
        line = parse_line(f"step:{n} - timing_s/step:10.0", "train.log", t)
        store.write_logs(LogBatch([line], {}, files), local=False)

    t0 = 1_700_000_000.0
    watcher.started = t0
    step(1, t0)
    assert [e.kind for e in watcher.check(t0 + 30)] == []
    assert [e.kind for e in watcher.check(t0 + 61)] == ["stalled"]
    step(2, t0 + 100)
    assert [e.kind for e in watcher.check(t0 + 101)] == ["recovered"]
    # Stalled again within the window: not told yet (one message per kind per 600 s) ...
    assert [e.kind for e in watcher.check(t0 + 200)] == []
    # ... and told once the window opens, since it still holds (no recovered was owed meanwhile).
    assert [e.kind for e in watcher.check(t0 + 662)] == ["stalled"]
    assert [e.kind for e in watcher.check(t0 + 663)] == []
    # The heartbeat: every 1000 s when nothing else was told.
    step(3, t0 + 1100)
    kinds = [e.kind for e in watcher.check(t0 + 1101)]
    assert kinds == ["recovered"]
    assert [e.kind for e in watcher.check(t0 + 1150)] == []
    assert [e.kind for e in watcher.check(t0 + 2102)] == ["stalled"]  # (no step since: stalled again)
    beat = AlertWatcher(store, "job", every=600.0, heartbeat=1000.0)
    beat.started = t0
    step(4, t0 + 2200)
    assert [e.kind for e in beat.check(t0 + 2201)] == ["heartbeat"]
    assert [e.kind for e in beat.check(t0 + 2202)] == []


def test_a_look_that_fails_is_said_once_and_the_loop_goes_on(tmp_path: Path) -> None:
    from gkdtop.alerts.events import AlertWatcher
    from gkdtop.alerts.loop import Alerts
    from gkdtop.store import Store

    store = Store(load_config(None))
    store.log_polls = 2
    said: list[str] = []
    alerts = Alerts(store, AlertWatcher(store, "job"), on_error=said.append)
    broken = store.phase_status
    store.phase_status = lambda now=None: (_ for _ in ()).throw(KeyError("gone"))  # type: ignore[method-assign]
    assert alerts.tick(1.0) == [] and alerts.tick(2.0) == []
    assert said == ["alerts: KeyError: 'gone'"]  # once, not every second
    store.phase_status = broken  # type: ignore[method-assign]
    assert alerts.tick(3.0) == []  # and it goes on


def test_a_message_redacts_a_block_scalar_opened_above_its_lines_and_cuts_after(tmp_path: Path) -> None:
    """The last lines are redacted as one text with the lines before them (a YAML block's key is above
    them), and a long line is redacted before it is cut (a cut token is one the redactor no longer knows)."""
    from gkdtop.alerts.events import AlertWatcher
    from gkdtop.analysis.lines import parse_line
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.model import LogFileState
    from gkdtop.store import Store

    store = Store(load_config(None))
    store.log_polls = 2
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    texts = ["config:", "  db_password: |", "    Tr0ub4dor&3horse", "  other: 1", "x" * 280 + " " + token,
             "step:1 - loss:1.0"]
    now = time.time()
    lines = [parse_line(text, "train.log", now) for text in texts]
    store.write_logs(LogBatch(lines, {}, [LogFileState("train.log", "following")]), local=False)
    watcher = AlertWatcher(store, "job")
    event = watcher._event("failed", store.phase_status(now), now, culprit="x" * 590 + " " + token)
    sent = "\n".join([event.message, *event.lines])
    assert "Tr0ub4dor" not in sent and "hf_AbCdEfGh" not in sent, sent
    assert "db_password" in sent  # the key stays, its value does not


def test_a_job_that_ended_is_told_once_and_its_silent_log_is_no_stall(tmp_path: Path) -> None:
    from gkdtop.alerts.events import AlertWatcher
    from gkdtop.analysis.lines import parse_line
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.model import LogFileState
    from gkdtop.store import Store

    config = load_config(None)
    config.stall_after, config.stall_fixed = 5.0, True
    store = Store(config)
    store.log_polls = 2
    t0 = 1_700_000_000.0
    line = parse_line("step:1 - loss:1.0", "train.log", t0)
    store.write_logs(LogBatch([line], {}, [LogFileState("train.log", "following")]), local=False)
    for code, told in ((0, ["finished"]), (1, ["failed"])):
        ended: list[tuple[int, str]] = []
        watcher = AlertWatcher(store, "job", job_ended=lambda e=ended: e[0] if e else None)
        assert watcher.check(t0 + 1) == []
        ended.append((code, f"exited with code {code}"))
        assert [e.kind for e in watcher.check(t0 + 2)] == told
        assert [e.kind for t in (3, 10, 60, 600) for e in watcher.check(t0 + t)] == []  # no stall, no recovered


def test_an_evaluation_bar_that_moved_steadily_is_no_stall_whatever_its_redraws_the_file_kept(tmp_path: Path) -> None:
    """Audit 21: lm-eval's bars (`Running loglikelihood requests:   0%|`, then `…: 100%|`): tqdm right-aligns the
    percentage, so the two redraws were two bars, and a bar seen only at its 100% was dated at the stamp before it:
    'STALLED in validation for 2m01s' citing a bar whose clock says it ran steadily for an hour (the minutes after
    it, scoring, are covered as before, by the bar's steady clock: _steady_bar)."""
    def bar(what: str, pct: int, done: int, total: int, clock: str, rate: str) -> str:
        return f"Running {what} requests: {pct:3d}%|{'█' * (pct // 10):<10}| {done}/{total} [{clock}<00:00, {rate}it/s]"

    cases = {"both redraws": [bar("loglikelihood", 0, 0, 90000, "00:00", "?"),
                              bar("loglikelihood", 100, 90000, 90000, "1:02:30", "24.00")],
             "its last only": [bar("generate_until", 100, 2700, 2700, "30:00", " 1.50")]}
    for name, bars in cases.items():
        what = "loglikelihood" if "loglikelihood" in bars[0] else "generate_until"
        lines = [f"2025-03-04:11:00:00,010 INFO     [evaluator.py:470] Running {what} requests", *bars,
                 "2025-03-04:12:06:40,221 INFO     [evaluation_tracker.py:200] Saving results aggregated"
                 if what == "loglikelihood" else
                 "2025-03-04:11:35:05,221 INFO     [evaluation_tracker.py:200] Saving results aggregated"]
        log = tmp_path / "eval.log"
        log.write_text("\n".join(lines) + "\n")
        assert [e.kind for e in paced_events(str(log), load_config(None))] == [], name


def test_replay_tells_a_finished_run_when_its_wait_is_over_not_at_the_next_stamp(tmp_path: Path) -> None:
    """Audit 21: Lightning's `Trainer.fit` stopped at max_steps, then minutes of silence as the job failed to exit,
    then a watchdog line: replay --alerts told 'finished' at the watchdog's stamp, in the same second as 'failed',
    where watch tells it FINISH_WAIT after the end was seen."""
    from gkdtop.alerts.events import FINISH_WAIT

    lines = ["[NeMo I 2025-06-02 14:30:10 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 40",
             "[INFO     | pytorch_lightning.utilities.rank_zero]: `Trainer.fit` stopped: `max_steps=40` reached.",
             "[NeMo I 2025-06-02 14:30:12 nemo_logging:393] Async finalization time took 0.004 s",
             "[rank2]:[E0602 14:41:12.500100200 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
             "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
             "collectives."]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    events = paced_events(str(log), load_config(None))
    assert [e.kind for e in events] == ["finished", "failed"]
    end = time.mktime(time.strptime("2025-06-02 14:30:10", "%Y-%m-%d %H:%M:%S"))
    assert end <= events[0].time <= end + FINISH_WAIT + 1 < events[1].time


def test_a_slowdown_that_went_away_and_came_back_is_told_again() -> None:
    """Review of session 21: an anomaly was told once per (kind, metric) for the whole run, so generation slowing
    again after it had recovered went unsaid. Now it is told while it lasts, and again once it comes back."""
    import random

    from gkdtop.alerts.events import AlertWatcher
    from gkdtop.analysis.lines import parse_line
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.model import LogFileState
    from gkdtop.store import Store

    store = Store(load_config(None))
    store.log_polls = 2
    watcher = AlertWatcher(store, "job", every=600.0)
    files = [LogFileState("train.log", "following")]
    rng = random.Random(3)
    t = 1_700_000_000.0
    watcher.started = t

    def steps(first: int, last: int, gen: float) -> list[str]:
        nonlocal t
        for n in range(first, last):
            seconds = rng.gauss(gen, 0.5)
            t += seconds + 20
            line = parse_line(f"step:{n} - timing_s/gen:{seconds:.2f} - timing_s/step:{seconds + 20:.2f}", "train.log",
                              t)
            store.write_logs(LogBatch([line], {}, files), local=False)
        return [e.culprit for e in watcher.check(t) if e.kind == "anomaly"]

    assert steps(1, 80, 10.0) == []
    told = steps(80, 160, 20.0)
    assert len(told) == 1 and "2.0x slower since step 8" in told[0], told
    assert steps(160, 170, 20.0) == []  # while it lasts: once
    assert steps(170, 400, 10.0) == []  # it went away
    again = steps(400, 480, 20.0)
    assert len(again) == 1 and "slower since step 40" in again[0], again


def test_a_finished_runs_slowdown_is_not_served_as_a_live_anomaly() -> None:
    """/metrics served gkdtop_anomaly_since_step after the run finished, which `watch` keeps quiet about: a ticket for
    a run that is over."""
    import random
    import urllib.request

    from gkdtop.alerts.metrics import MetricsExporter
    from gkdtop.analysis.lines import parse_line
    from gkdtop.collectors.logs import LogBatch
    from gkdtop.model import LogFileState
    from gkdtop.store import Store

    store = Store(load_config(None))
    files = [LogFileState("train.log", "following")]
    rng = random.Random(5)
    t = 1_700_000_000.0
    for n in range(1, 161):
        seconds = rng.gauss(10.0 if n < 80 else 20.0, 0.5)
        t += seconds + 20
        line = parse_line(f"step:{n} - timing_s/gen:{seconds:.2f} - timing_s/step:{seconds + 20:.2f}", "train.log", t)
        store.write_logs(LogBatch([line], {}, files), local=False)
    exporter = MetricsExporter()
    try:
        served = []
        for ending in ("", "Training finished"):
            if ending:
                store.write_logs(LogBatch([parse_line(ending, "train.log", t + 1)], {}, files), local=False)
            status = store.phase_status(t + 2)
            exporter.update(store, status)
            with urllib.request.urlopen(exporter.url, timeout=30) as response:
                served.append((status.state, "gkdtop_anomaly_since_step{" in response.read().decode()))
        assert served == [("running", True), ("done", False)]
    finally:
        exporter.close()


def _verl_steps(first: int, last: int, every: float = 141.2) -> list[str]:
    return [f"2026-03-04 21:{(k * 141) // 60 % 60:02d}:{(k * 141) % 60:02d},100\tINFO -- (TaskRunner pid=5120) "
            f"step:{k} - critic/score/mean:0.51 - timing_s/gen:70.1 - timing_s/step:{every}"
            for k in range(first, last + 1)]


def test_a_signal_after_the_run_finished_is_its_teardown_not_a_failure(tmp_path: Path) -> None:
    """Audit 20: `Final validation metrics`, then Ray's workers get SIGTERM as the driver exits. Before: replay
    'INTERRUPTED after training finished … most likely the run had hung', and a FAILED alert."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-03-04 21:00:00,100\tINFO worker.py:1832 -- Started a local Ray instance.",
        *_verl_steps(1, 3),
        "(TaskRunner pid=5120) (\"Final validation metrics: {'val/test_score/gsm8k': 0.7713}\")",
        "(WorkerDict pid=5388) *** SIGTERM received at time=1772658471 on cpu 31 ***",
    ]) + "\n")
    from gkdtop.replay import replay

    assert replay([str(log)], load_config(None)).status.state == "done"
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["finished"]


def test_a_run_stopped_while_it_stepped_at_its_pace_is_interrupted_not_hung(tmp_path: Path) -> None:
    """Audit 20: steady 141 s steps, then a SIGTERM 30 s after the last. Before: 'most likely the run had hung or
    slowed here' with the stuck-step hints, and an alert titled FAILED where replay said INTERRUPTED."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        *_verl_steps(1, 5),
        "2026-03-04 21:12:15,100\tINFO -- *** SIGTERM received at time=1772658735 on cpu 88 ***",
    ]) + "\n")
    from gkdtop.replay import replay, report_text

    result = replay([str(log)], load_config(None))
    said = report_text(result)
    assert "INTERRUPTED in training loop" in said and "while its steps still came at their pace" in said
    assert "hung" not in said and "stuck" not in said, said
    [event] = paced_events(str(log), load_config(None))
    assert event.kind == "failed" and event.title.endswith("INTERRUPTED in training loop"), event.title


def test_steps_read_in_bulk_after_an_error_the_run_survived_clear_it(tmp_path: Path) -> None:
    """Audit 20: Ray's OOM killer took one worker (the raylet's summary line), Ray retried the task and steps 4-6
    followed. One step after the line cleared the failure; two or more, read in bulk by history, left 'FAILED'."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-03-04 21:00:00,100\tINFO worker.py:1832 -- Started a local Ray instance.",
        "(TaskRunner pid=5120) step:3 - critic/score/mean:0.61 - timing_s/gen:70.1 - timing_s/step:141.2",
        "(raylet) [2026-03-04 21:07:01,117 E 5011 5011] (raylet) node_manager.cc:3193: 1 Workers (tasks / actors) "
        "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 9f0c1d2e, IP: "
        "10.2.0.7) over the last time period.",
        *(f"(TaskRunner pid=5120) step:{k} - critic/score/mean:0.62 - timing_s/gen:70.3 - timing_s/step:140.8"
          for k in (4, 5, 6)),
    ]) + "\n")
    from gkdtop.replay import replay, report_text

    result = replay([str(log)], load_config(None))
    assert result.status.state != "failed" and result.status.current == "training loop", report_text(result)


def test_an_interrupt_under_one_stamp_with_its_steps_says_nothing_of_their_pace(tmp_path: Path) -> None:
    """Review of session 25: HF's metric dicts carry no stamp, so their pace was never measured; a Ctrl+C in an
    all_reduce under the same stamp is no 'still came at their pace', and keeps the hang's advice."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "[INFO|trainer.py:2128] 2026-11-20 09:00:01,100 >> ***** Running training *****",
        *(f"{{'loss': {1.9 - k / 50:.4f}, 'grad_norm': 0.61, 'learning_rate': 1e-05, 'epoch': {k / 40:.2f}}}"
          for k in range(1, 6)),
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, in '
        "all_reduce",
        "    work.wait()",
        "KeyboardInterrupt",
    ]) + "\n")
    from gkdtop.replay import replay, report_text

    said = report_text(replay([str(log)], load_config(None)))
    assert "INTERRUPTED in training loop" in said and "still came at their pace" not in said, said


def test_a_failure_the_run_went_on_from_is_corrected_by_a_recovered_message(tmp_path: Path) -> None:
    """Review of session 25: the raylet's worker-death line, then steps 6-8 (Ray retried the task): a watcher told
    FAILED and never said the run went on."""
    log = tmp_path / "train.log"
    steps = [f"2026-11-20 09:{k:02d}:00,100\tINFO -- (TaskRunner pid=5120) step:{k} - critic/score/mean:0.5 - "
             f"timing_s/gen:30.1 - timing_s/step:60.0" for k in range(1, 6)]
    log.write_text("\n".join([
        *steps,
        "(raylet) [2026-11-20 09:05:30,117 E 5011 5011] A worker died or was killed while executing a task by an "
        "unexpected system error. Worker exit type: SYSTEM_ERROR",
        *(line.replace(f"step:{k} ", f"step:{k + 5} ").replace(f"09:{k:02d}:", f"09:{k + 5:02d}:")
          for k, line in enumerate(steps[:3], 1)),
    ]) + "\n")
    events = paced_events(str(log), load_config(None))
    assert [e.kind for e in events] == ["failed", "recovered"], events
    assert events[1].culprit.startswith("it went on after: ") and "A worker died" in events[1].culprit


def test_a_crash_is_told_after_its_stack_block_with_replays_verdict_at_the_blocks_own_stamp(tmp_path: Path) -> None:
    """Audit 22: Ray's unstamped `*** SIGSEGV received at time=N` line, then its native frames, the stamped logging.cc
    echo 3 minutes after the last stamp, and the faulthandler stack that places it in the rollout's build. Before: a
    "failed" at that last stamp, `FAILED in actor init` (the rules' phase at the signal's line), where replay says
    `FAILED, likely in rollout init`. The `time=N` epoch is UTC, not the log's clock: it dates nothing."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-05-11 08:10:04,512\tINFO worker.py:2003 -- Started a local Ray instance.",
        "(WorkerDict pid=4410) Model config after override: Qwen2Config {",
        "(WorkerDict pid=4410) Actor use_remove_padding=True",
        "(WorkerDict pid=4411) *** SIGSEGV received at time=1778400000 on cpu 5 ***",
        "(WorkerDict pid=4411) PC: @     0x7f11aa02b1c0  (unknown)  cuMemCreate",
        "(WorkerDict pid=4411)     @     0x7f11a90e77c4        480  ncclCommInitRank",
        "(WorkerDict pid=4411) [2026-05-11 08:13:40,201 E 4411 4411] logging.cc:460: *** SIGSEGV received at "
        "time=1778400000 on cpu 5 ***",
        "(WorkerDict pid=4411) Fatal Python error: Segmentation fault",
        "(WorkerDict pid=4411) ",
        "(WorkerDict pid=4411) Stack (most recent call first):",
        '(WorkerDict pid=4411)   File "/opt/vllm/distributed/device_communicators/pynccl.py", line 99 in __init__',
        '(WorkerDict pid=4411)   File "/opt/verl/workers/fsdp_workers.py", line 604 in _build_rollout',
        '(WorkerDict pid=4411)   File "/opt/verl/workers/fsdp_workers.py", line 771 in init_model',
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker PID: 4411",
    ]) + "\n")
    from gkdtop.replay import replay, report_text

    config = load_config(None)
    said = report_text(replay([str(log)], config))
    assert "FAILED, likely in rollout init" in said.splitlines(), said
    [failed] = paced_events(str(log), config)
    assert failed.kind == "failed" and failed.title.endswith("FAILED, likely in rollout init"), failed.title
    assert abs(failed.time - time.mktime(time.strptime("2026-05-11 08:13:40", "%Y-%m-%d %H:%M:%S"))) < 1


def test_a_start_ups_unstamped_lines_and_a_first_bar_at_zero_are_no_silence_the_file_shows(tmp_path: Path) -> None:
    """Audit 22: one stamp, then the start-up's unstamped lines and the loop's bar at `0/24 [00:00<?` (dated at that
    stamp: its clock reckons no time), then a stamp 15 minutes on. Before: STALLED for 10m01s at the first stamp."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "2026-04-02 07:00:05,311\tINFO worker.py:1879 -- Started a local Ray instance.",
        "(TaskRunner pid=3120) dataset len: 768",
        "(TaskRunner pid=3120) Total training steps: 24",
        "(WorkerDict pid=3301) Qwen2ForCausalLM contains 7.62B parameters",
        "(WorkerDict pid=3301) Actor use_remove_padding=True",
        "(TaskRunner pid=3120) Training Progress:   0%|          | 0/24 [00:00<?, ?it/s]",
        "(TaskRunner pid=3120) [2026-04-02 07:15:10] Starting 16 agent episodes for batch 0",
        "(TaskRunner pid=3120) [2026-04-02 07:16:40] 16/16 episodes finished",
    ]) + "\n")
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []


def test_a_first_step_that_launched_many_long_jobs_is_allowed_longer_than_a_bare_first_step(tmp_path: Path) -> None:
    """Audit 22: `Starting N … trajectories`, then nothing until they are done 11 minutes later, before any step
    measured their pace. Before: STALLED for 10m01s, then recovered. A first step with no such line still pages."""
    def lines(said: str) -> str:
        return "\n".join([
            "2026-04-02 07:00:05,311\tINFO worker.py:1879 -- Started a local Ray instance.",
            "(TaskRunner pid=3120) Training Progress:   0%|          | 0/24 [00:00<?, ?it/s]",
            f"(TaskRunner pid=3120) [2026-04-02 07:01:10] {said}",
            "(TaskRunner pid=3120) [2026-04-02 07:12:30] 48/48 trajectories finished",
        ]) + "\n"

    log = tmp_path / "train.log"
    log.write_text(lines("Starting 48 sandbox trajectories for batch 0"))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []
    log.write_text(lines("building the batch"))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled", "recovered"]


def test_repeated_counts_with_idle_lines_between_are_no_progress_in_history_as_live(tmp_path: Path) -> None:
    """Review 26: `52/64 … finished` again and again, an idle `Waiting for … to be ready` before each repeat: live read
    a stall, history (snapshot, replay's verdict) stopped its walk back at the idle line and read the run as going."""
    from gkdtop.replay import replay

    log = tmp_path / "train.log"
    log.write_text("\n".join([
        *_verl_steps(1, 3),
        "(TaskRunner pid=5120) [2026-03-04 21:07:10] Starting 40 agent episodes for batch 3",
        *(f"(TaskRunner pid=5120) [2026-03-04 21:{8 + 2 * k:02d}:{s:02d}] {said}" for k in range(10)
          for s, said in ((5, "Waiting for reward server to be ready"), (10, "31/40 episodes finished"))),
    ]) + "\n")
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled"]
    assert replay([str(log)], load_config(None)).status.state == "stalled"


def test_two_writers_saying_the_same_counts_in_turn_are_no_progress(tmp_path: Path) -> None:
    """Review 26: one slot for the whole engine, so two writers printing their own unchanged count in turn each
    read as progress, however long the rollout hung."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        *_verl_steps(1, 3),
        "(TaskRunner pid=5120) [2026-03-04 21:07:10] Starting 40 agent episodes for batch 3",
        *(f"(AgentLoopWorker pid={pid}) [2026-03-04 21:{8 + 2 * k:02d}:{s:02d}] {n}/20 episodes finished"
          for k in range(10) for s, pid, n in ((5, 6101, 17), (10, 6102, 12))),
    ]) + "\n")
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled"]


def test_a_status_line_that_says_the_same_count_again_is_no_progress(tmp_path: Path) -> None:
    """Audit 22: `52/64 trajectories finished`, and the same count again and again while the rollout hung: each
    repeat read as progress, so no STALLED came however long it lasted. A count that moves is progress."""
    def lines(counts: list[int]) -> str:
        return "\n".join([
            *_verl_steps(1, 3),
            "(TaskRunner pid=5120) [2026-03-04 21:07:10] Starting 40 agent episodes for batch 3",
            *(f"(TaskRunner pid=5120) [2026-03-04 21:{8 + 2 * k:02d}:10] {n}/40 episodes finished"
              for k, n in enumerate(counts)),
        ]) + "\n"

    from gkdtop.replay import replay

    log = tmp_path / "train.log"
    log.write_text(lines([31] * 10))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled"]
    assert replay([str(log)], load_config(None)).status.state == "stalled"  # (history reads the file in bulk)
    log.write_text(lines(list(range(30, 40))))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []
    assert replay([str(log)], load_config(None)).status.state == "running"


def test_a_step_line_whose_stated_time_covers_the_gap_before_it_is_no_stall(tmp_path: Path) -> None:
    """Audit 23: Megatron logs every 10 iterations; the first 10 took 95 s each, and the line says so (`elapsed time
    per iteration (ms): 95012.0`). Before: STALLED for 10m01s inside that first interval, then recovered. Where the
    stated time leaves the gap unexplained (1.2 s an iteration), the silence is still told."""
    def lines(first_ms: float) -> str:
        its = [(10, "09:20:01", first_ms), (20, "09:20:13", 1190.4), (30, "09:20:25", 1201.7)]
        return "\n".join([
            "training ...",
            "[before the start of training step] datetime: 2023-02-07 09:04:10 ",
            *(f" [2023-02-07 {at}] iteration {n:>9}/  300000 | consumed samples: {n * 16:>12} | elapsed time per "
              f"iteration (ms): {ms:.1f} | learning rate: 1.000E-06 | global batch size:    16 | lm loss: "
              f"{10.9 - n / 100:.6E} |" for n, at, ms in its),
        ]) + "\n"

    log = tmp_path / "train.log"
    log.write_text(lines(95012.0))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []
    log.write_text(lines(1200.0))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled", "recovered"]


def test_a_plain_files_failure_is_told_within_its_blocks_wait_not_at_a_later_stamp(tmp_path: Path) -> None:
    """Review 26: in a file with no per-writer prefix every line has one writer, so the held "failed" waited for a
    later stamp: an unstamped traceback after step 5, then a watchdog line 30 minutes on, was told 30 minutes late;
    where the steps went on after it, nothing was told at all (watch tells FAILED, then recovered)."""
    def lines(after: list[str]) -> str:
        return "\n".join([
            *(f"[2026-06-03 14:0{k}:00] INFO step {k}: loss 1.{k}" for k in range(1, 6)),
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "run.py", line 41, in <module>',
            "[rank0]:     loss.backward()",
            "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered",
            *after,
        ]) + "\n"

    failed_at = time.mktime(time.strptime("2026-06-03 14:05:00", "%Y-%m-%d %H:%M:%S"))
    log = tmp_path / "train.log"
    log.write_text(lines(["[2026-06-03 14:40:12] ERROR torch.distributed.elastic: failed (exitcode: 1) local_rank: 0"]))
    [failed] = paced_events(str(log), load_config(None))
    assert failed.kind == "failed" and failed.time - failed_at <= 5.0, failed
    log.write_text(lines([f"[2026-06-03 14:{k:02d}:30] INFO step {k}: loss 0.{k}" for k in range(6, 12)]))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["failed", "recovered"]


def test_a_resumed_runs_first_step_line_credits_no_steps_it_does_not_count(tmp_path: Path) -> None:
    """Review 26: resumed at iteration 8000, the first line `iteration 8010` at 9 s an iteration after a 15-minute
    silence. Before: taken as 100 iterations (900 s) of work, so no STALLED; where the run resumed it does not say."""
    log = tmp_path / "train.log"
    log.write_text("\n".join([
        "  successfully loaded checkpoint from /ckpt/run7 [ t 0/1, p 0/1 ] at iteration 8000",
        "training ...",
        "[before the start of training step] datetime: 2026-07-14 06:30:00 ",
        *(f" [2026-07-14 06:{45 + k}:00] iteration {8010 + 10 * k:>9}/   20000 | consumed samples: "
          f"{(801 + k) * 640:>12} | elapsed time per iteration (ms): 9000.0 | learning rate: 1.000E-05 | global "
          f"batch size:    64 | lm loss: 2.10000{k}" for k in range(3)),
    ]) + "\n")
    assert [e.kind for e in paced_events(str(log), load_config(None))] == ["stalled", "recovered"]


def test_an_unstamped_last_progress_line_is_silent_only_since_the_first_stamp_after_it(tmp_path: Path) -> None:
    """Audit 24: verl's unstamped `colocated worker base class` line, dated at the Ray start's stamp, then its
    stamped `Waiting for register center actor … Elapsed time: 0 seconds` 3 minutes on. Before: "no progress for
    20m15s" and STALLED at 2 minutes into verl's own wait; the line came no later than that first stamp after it."""
    from gkdtop.replay import replay, report_text

    def lines(waits: int) -> str:
        return "\n".join([
            "2026-02-11 09:30:12,004\tINFO worker.py:2003 -- Started a local Ray instance.",
            "(TaskRunner pid=71200) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
            *(f"(TaskRunner pid=71200) WARNING:2026-02-11 09:{34 + 2 * k:02d}:20,118:Waiting for register center "
              f"actor Qx7_register_center to be ready. Elapsed time: {120 * k} seconds out of 300 seconds."
              for k in range(waits)),
        ]) + "\n"

    log = tmp_path / "train.log"
    log.write_text(lines(2))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []
    log.write_text(lines(8))
    [stalled] = paced_events(str(log), load_config(None))
    assert stalled.time >= time.mktime(time.strptime("2026-02-11 09:39:20", "%Y-%m-%d %H:%M:%S")), stalled
    said = report_text(replay([str(log)], load_config(None)))
    assert "no progress for 14m00s before the log ended" in said, said


def test_a_first_step_that_compiles_after_a_bare_starting_training_is_no_stall(tmp_path: Path) -> None:
    """Audit 26 #2: an XLA trainer says `Starting training`, then its step 0 comes 2m20s later (`trace time: …`: the
    step compiled), step 5 as long after, then every few seconds. Before: 'STALLED for 2m01s' on a run that ran fine:
    the bare line opened no phase, so the plain 120 s applied instead of the loop's first-step allowance."""
    head = "[2025-02-11 08:{:02d}:{:02d},100][xla_trainer.base][INFO] - "
    lines = [head.format(0, 5) + "Starting training", head.format(0, 5) + "    Max step: 40",
             head.format(2, 25) + "Epoch: 0.0000, step: 0, loss: 1.4100, lr: 1.00e-05, trace time: 138211.40 ms",
             head.format(4, 44) + "Epoch: 0.0500, step: 5, loss: 1.3800, lr: 2.00e-05, trace time: 1104.10 ms",
             head.format(4, 49) + "Epoch: 0.1000, step: 10, loss: 1.2900, lr: 3.00e-05, trace time: 807.70 ms"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    end = time.mktime(time.strptime("2025-02-11 08:04:50", "%Y-%m-%d %H:%M:%S"))
    os.utime(log, (end, end))
    assert [e.kind for e in paced_events(str(log), load_config(None))] == []


def test_a_year_less_first_stamp_takes_the_year_of_the_files_full_dates(tmp_path: Path) -> None:
    """Audit 26 #4: torchrun's glog warning (`W0514 …`, no year) opens a log whose own stamps say 2024, copied in a
    later year: the first line was placed in the mtime's year, no 2024 stamp could come after it (a stamp never
    rewinds), and the failure was dated at the log's first second, in the wrong year."""
    lines = ["W0514 08:10:02.101000 5511 torch/distributed/run.py:779] *****************************************",
             "[INFO|trainer.py:2134] 2024-05-14 08:10:40,310 >> ***** Running training *****",
             " 40%|████      | 200/500 [20:26<30:39,  6.13s/it][INFO|trainer.py:3478] 2024-05-14 08:31:09,020 >> "
             "Saving model checkpoint to /out/checkpoint-200",
             "[rank0]: RuntimeError: Some tensors share memory, this will lead to duplicate memory on disk",
             "E0514 08:31:30.288000 5511 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1)"
             " local_rank: 0 (pid: 5600) of binary: /usr/bin/python"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    events = paced_events(str(log), load_config(None))
    assert [e.kind for e in events] == ["failed"]
    assert time.strftime("%Y-%m-%d %H:%M", time.localtime(events[0].time)) == "2024-05-14 08:31"


def test_a_failure_after_unstamped_steps_is_told_no_earlier_than_their_own_times(tmp_path: Path) -> None:
    """Audit 24 (verl605): after the last stamp, unstamped step lines whose steps state their own times (timing_s/step),
    then a failure: it came at least those times after the stamp. Before: told at the last stamp, as if the steps
    took no time; now at the stamp plus the steps' times, marked as a bound."""
    lines = ["2025-05-06 07:10:00,010\tINFO worker.py:1821 -- Started a local Ray instance.",
             *[f"(main_task pid=4411) step:{n} - actor/pg_loss:0.0{n} - timing_s/step:{60 + n}.0" for n in (1, 2, 3)],
             "Traceback (most recent call last):", '  File "main_ppo.py", line 9, in <module>',
             "TypeError: save() takes 2 positional arguments but 4 were given"]
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines))
    end = time.mktime(time.strptime("2025-05-06 07:30:00", "%Y-%m-%d %H:%M:%S"))
    os.utime(log, (end, end))
    stamp = time.mktime(time.strptime("2025-05-06 07:10:00", "%Y-%m-%d %H:%M:%S"))
    failed = [e for e in paced_events(str(log), load_config(None)) if e.kind == "failed"]
    assert len(failed) == 1 and failed[0].at_least and abs(failed[0].time - (stamp + 186.01)) < 1
