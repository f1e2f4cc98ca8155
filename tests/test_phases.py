"""The phase engine on realistic verl/GKD logs, read through the real log follower from real files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gkdtop.analysis.engine import Analysis as PhaseEngine
from gkdtop.collectors.logs import LogCollector
from gkdtop.config import Config, builtin_phases, load_config
from gkdtop.model import LogLine
from gkdtop.store import Store
from tests.gkdlog import asctime, ray, startup


def write(path: Path, lines: list[str], mtime: float | None = None) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def read_into(store: Store, path: Path, backlog: int = 1000) -> None:
    collector = LogCollector([str(path)], backlog=backlog)
    try:
        store.put("logs", collector.collect())
    finally:
        collector.close()


def status_after(tmp_path: Path, lines: list[str]):  # type: ignore[no-untyped-def]
    """The phase verdict on a file of `lines` read through the real follower, now."""
    log = tmp_path / "train.log"
    write(log, lines)
    store = Store(config())
    read_into(store, log)
    return store.phase_status()


def config(**overrides: object) -> Config:
    cfg = Config(phases=builtin_phases())
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def test_full_startup_timeline_steps_and_timings(tmp_path: Path) -> None:
    t0 = time.time() - 400
    lines, last = startup(t0, steps=3, step_s=30.0)
    log = tmp_path / "train.log"
    write(log, lines, mtime=last)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status(now=last + 5)

    names = [s.name for s in status.timeline]
    assert names[:7] == ["config", "dataset generation", "resource pool", "actor init", "rollout init",
                         "weight sync", "training loop"]
    spans = {s.name: s for s in status.timeline}
    # Durations come from the lines' own timestamps, not from when gkdtop read them.
    assert spans["dataset generation"].duration == pytest.approx(20.0, abs=0.01)
    assert spans["resource pool"].duration == pytest.approx(5.0, abs=0.01)
    assert spans["actor init"].status == "done"
    assert status.current == "training loop"
    assert status.state == "running"
    assert status.steps_done == 3
    assert status.last_step is not None and status.last_step.step == 3
    assert status.last_step.timings["update_actor"] == pytest.approx(10.5)
    assert status.last_step.metrics["actor/kl_loss"] == pytest.approx(1 / 3, abs=1e-3)
    assert status.step_time == pytest.approx(30.0)


def test_log_already_silent_at_startup_is_stalled_at_once(tmp_path: Path) -> None:
    """Opening gkdtop on a job that went quiet ten minutes ago shows STALLED immediately."""
    t0 = time.time() - 900
    lines, last = startup(t0, upto="sync")
    log = tmp_path / "train.log"
    write(log, lines, mtime=last)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status()
    assert status.current == "weight sync"
    assert status.state == "stalled"
    assert status.stalled_for is not None and status.stalled_for > 600
    hint = " ".join(status.hint.actions + status.hint.causes) if status.hint else ""
    # The playbook's wrong tip is corrected, not repeated.
    assert "NCCL_TIMEOUT is read by nothing" in hint
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in hint


def test_lines_without_timestamps_use_file_mtime(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    write(log, ["Initializing Actor Worker...", "loading shards 1/4"], mtime=time.time() - 3600)
    store = Store(config(stall_after=60.0))
    read_into(store, log)
    status = store.phase_status()
    assert status.current == "actor init"
    # actor init allows 600 s; an hour of silence is a stall either way.
    assert status.state == "stalled"
    assert status.stalled_for == pytest.approx(3600, abs=30)


def test_finished_phase_points_at_the_next_one(tmp_path: Path) -> None:
    """'✓ Actor Worker initialized' and then silence: the rollout init is what hangs (playbook case C)."""
    lines, last = startup(time.time() - 2000, upto="actor-done")
    log = tmp_path / "train.log"
    write(log, lines, mtime=last)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status()
    assert status.state == "stalled"
    assert status.current == "actor init"
    assert status.expected == "rollout init"
    assert status.stall_after == 600
    # What to check; no memory advice, since no line said memory ran out (issue 25: a hint needs its evidence).
    assert any("engine process" in a for a in status.hint.actions)
    assert not any("memory" in line for line in [*status.hint.causes, *status.hint.actions])


def test_memory_advice_needs_a_line_that_says_memory_ran_out(tmp_path: Path) -> None:
    """A stall in the engine's start-up after it said memory ran short (SGLang's message, which ends nothing
    by itself): now the memory cause and fix are shown."""
    lines, last = startup(time.time() - 2000, upto="actor-done")
    log = tmp_path / "train.log"
    write(log, [*lines, "(WorkerDict pid=2003) Not enough memory. Please try to increase --mem-fraction-static."],
          mtime=last)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status()
    assert (status.state, status.current) == ("stalled", "rollout init")
    assert any("gpu_memory_utilization" in a for a in status.hint.actions)
    assert any("already holds" in c for c in status.hint.causes)


def test_tqdm_redraws_with_only_the_clock_moving_are_not_progress() -> None:
    from gkdtop.model import LogLine

    engine = PhaseEngine(config(stall_after=60.0).rules())
    t = time.time() - 300
    engine.feed([LogLine(source="a", text="Starting dataset generation...", seen=t)])
    for i in range(10):  # tqdm keeps redrawing "0 examples" with a new elapsed time
        engine.feed_progress(LogLine(source="a", text=f"Generating train split: 0 examples [00:{i:02d}, ? examples/s]",
                                     seen=t + 30 * i, progress=True))
    status = engine.status(now=t + 400)  # dataset generation may be silent 300 s
    assert status.current == "dataset generation"
    assert status.state == "stalled"
    assert status.last_progress == pytest.approx(t, abs=1)
    engine.feed_progress(LogLine(source="a", text="Generating train split: 500 examples [04:59, 2 examples/s]",
                                 seen=t + 299, progress=True))
    assert engine.status(now=t + 400).state == "running"


def test_traceback_fails_the_phase_with_the_exception_line(tmp_path: Path) -> None:
    lines, _last = startup(time.time() - 100, upto="rollout")
    lines += [
        ray("TaskRunner", 133947, "Traceback (most recent call last):"),
        ray("TaskRunner", 133947, '  File "verl/trainer/main_ppo.py", line 64, in run'),
        ray("TaskRunner", 133947, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing."),
    ]
    log = tmp_path / "train.log"
    write(log, lines)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status()
    assert status.state == "failed"
    assert status.current == "rollout init"
    assert status.failure.startswith("ray.exceptions.ActorDiedError")
    assert status.timeline[-1].status == "failed"


def test_an_exception_that_names_a_later_phase_fails_that_phase_and_stays_the_root_cause(tmp_path: Path) -> None:
    """verl runs SGLang at log_level='error': its scheduler's traceback is the first thing it prints,
    after the reference model loaded. The exception line says where it failed (rollout init: the
    KV pool), the reference init its first line came in stays done, and the WorkerDict's death
    that follows is its consequence, not the root cause."""
    lines, _last = startup(time.time() - 100, upto="actor-done")
    w = 20210
    lines += [
        ray("WorkerDict", w, "reference model: /mnt/models/Qwen2.5-7B-Instruct"),
        ray("WorkerDict", w, "[2025-06-17 13:21:41 TP0] Scheduler hit an exception: "
            "Traceback (most recent call last):"),
        ray("WorkerDict", w, '  File "sglang/srt/model_executor/model_runner.py", line 1268, in init_memory_pool'),
        ray("WorkerDict", w, "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
        ray("WorkerDict", w, "[2025-06-17 13:21:43] Received sigquit from a child process. "
            "It usually means the child failed."),
        ray("TaskRunner", 133947, "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
            "ray::WorkerDict.actor_rollout_init_model() (pid=20210, ip=10.0.0.1)"),
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ]
    status = status_after(tmp_path, lines)
    assert (status.state, status.current) == ("failed", "rollout init")
    assert status.failure == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    spans = {s.name: s.status for s in status.timeline}
    assert spans["reference init"] == "done" and spans["rollout init"] == "failed"


def test_a_ranks_prefixed_exception_is_the_failure_not_its_traceback_header(tmp_path: Path) -> None:
    """torch's elastic launcher (torchrun, accelerate launch) prefixes each child line with `[rank3]: `:
    the exception behind it is the root cause, not the header, nor the launcher's ChildFailedError."""
    lines, _last = startup(time.time() - 100)
    lines += [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "transformers/trainer.py", line 3792, in training_step',
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB.",
        "Traceback (most recent call last):",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    status = status_after(tmp_path, lines)
    assert (status.state, status.current) == ("failed", "actor update")
    assert status.failure == "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB."


def test_done_when_training_finishes(tmp_path: Path) -> None:
    lines, last = startup(time.time() - 500, steps=2)
    lines.append(ray("TaskRunner", 133947, f"{asctime(last + 1)} root INFO ✓ Training finished: 2 steps"))
    log = tmp_path / "train.log"
    write(log, lines)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status(now=time.time() + 10_000)  # long after: still done, never stalled
    assert status.state == "done"
    assert status.current == "finished"


def test_verl_progress_bar_at_100_percent_finishes_though_it_also_names_the_training_loop(tmp_path: Path) -> None:
    """`Training Progress: 100%|` matches the training loop's start as well as `finished`: the terminal
    rule wins, so a verl run whose log ends on its full bar is done, not a stalled training loop."""
    lines, _ = startup(time.time() - 500, steps=2)
    lines.append(ray("TaskRunner", 133947, "Training Progress: 100%|██████████| 2/2 [00:40<00:00, 20.00s/it]"))
    log = tmp_path / "train.log"
    write(log, lines)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status(now=time.time() + 10_000)
    assert (status.state, status.current) == ("done", "finished")


def test_user_phase_extends_builtins_with_its_own_stall_after(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(
        "stall_after: 30\n"
        "phases:\n"
        "  - name: load checkpoint\n"
        "    start: 'Loading checkpoint'\n"
        "    stall_after: 600\n"
    )
    cfg = load_config(cfg_file)
    assert [r.name for r in cfg.phases][:2] == ["load checkpoint", "config"]
    log = tmp_path / "train.log"
    write(log, [f"{asctime(time.time() - 120)} Loading checkpoint from /ckpt/global_step_100"])
    store = Store(cfg)
    read_into(store, log)
    status = store.phase_status()
    assert status.current == "load checkpoint"
    assert status.state == "running"  # 120 s of silence is fine for a phase allowed 600 s
    assert status.stall_after == 600


def test_live_lines_advance_the_phase(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    collector = LogCollector([str(log)])
    store = Store(config())
    try:
        store.put("logs", collector.collect())
        with log.open("a") as fh:
            fh.write(ray("TaskRunner", 1, "Creating ResourcePool...") + "\n")
        store.put("logs", collector.collect())
        assert store.phase_status().current == "resource pool"
        with log.open("a") as fh:
            fh.write(ray("TaskRunner", 1, "Initializing Actor Worker...") + "\n")
        store.put("logs", collector.collect())
        status = store.phase_status()
        assert status.current == "actor init"
        assert [s.name for s in status.timeline] == ["resource pool", "actor init"]
        assert status.state == "running"
    finally:
        collector.close()


def per_step_sync_log(t0: float, steps: int, hang_in_step: int | None = None) -> tuple[list[str], float]:
    """The demo's own shape: a start-up sync, then one sync per step; optionally one that never ends."""
    lines, t = startup(t0, steps=0)
    for step in range(1, steps + 1):
        t += 1
        lines.append(ray("TaskRunner", 133947, f"step:{step} - timing_s/step:2.0 - actor/kl_loss:0.5"))
        t += 1
        lines.append(ray("OnPolicyDistillActor", 2001, f"{asctime(t)} [SYNC] Starting weight synchronization"))
        if step == hang_in_step:
            return lines, t
        lines.append(ray("OnPolicyDistillActor", 2001, f"{asctime(t)} [SYNC] ✓ Broadcast 5 tensors"))
        lines.append(ray("RolloutWorker", 2002, f"{asctime(t)} [SYNC] ✓ Rollout weights updated"))
    return lines, t


def test_per_step_weight_sync_is_a_sub_phase_not_a_new_span(tmp_path: Path) -> None:
    lines, last = per_step_sync_log(time.time() - 400, steps=5)
    log = tmp_path / "train.log"
    write(log, lines, mtime=last)
    store = Store(config())
    read_into(store, log)
    status = store.phase_status(now=last + 1)
    names = [s.name for s in status.timeline]
    assert names.count("training loop") == 1 and names.count("weight sync") == 1, names
    assert names[-1] == "training loop"
    assert status.current == "training loop" and status.within is None and status.steps_done == 5
    assert status.state == "running"


def test_a_hang_in_a_per_step_sync_names_weight_sync_inside_the_loop(tmp_path: Path) -> None:
    lines, last = per_step_sync_log(time.time() - 400, steps=5, hang_in_step=4)
    log = tmp_path / "train.log"
    write(log, lines, mtime=last)
    store = Store(config(stall_after=60.0))
    read_into(store, log)
    status = store.phase_status(now=last + 300)
    assert status.state == "stalled"
    assert status.current == "weight sync" and status.within == "training loop"
    assert status.since == pytest.approx(last, abs=1.0)  # the sub-phase's own start, not the loop's
    assert status.hint is not None and any("collective" in c for c in status.hint.causes)
    assert [s.name for s in status.timeline].count("training loop") == 1


def test_a_slower_ranks_done_line_does_not_reopen_a_finished_phase() -> None:
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    for dt, text in [(0, "Initializing Actor Worker..."), (1, "[ACTOR] init_model DONE | rank=0"),
                     (2, "Initializing Rollout Worker..."), (3, "[ACTOR] init_model DONE | rank=1"),
                     (4, "[ROLLOUT] init_model DONE")]:
        engine.feed([line_at(t + dt, text)])
    names = [s.name for s in engine.status(t + 5).timeline]
    assert names == ["actor init", "rollout init"], names


def line_at(t: float, text: str) -> LogLine:
    return LogLine(source="train.log", text=text, seen=t, ts=t)


def test_a_workers_late_delivered_line_does_not_move_the_phase_back() -> None:
    """Ray's log monitor writes a worker's lines after the driver's: order by the lines' own stamps."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    for stamp, text in [(t, "Initializing Teacher..."), (t + 0.5, "[TEACHER] init_model START"),
                        (t + 2.0, "✓ Teacher initialized in 2.0s"), (t + 2.1, "Starting weight synchronization..."),
                        (t + 1.9, "[TEACHER] ✓ Teacher model loaded"), (t + 1.95, "Initializing Teacher (late echo)")]:
        engine.feed([line_at(stamp, text)])
    status = engine.status(t + 3)
    assert [s.name for s in status.timeline] == ["teacher", "weight sync"]
    assert status.current == "weight sync"


def test_the_end_said_twice_is_one_finished_span() -> None:
    """verl's `Training Progress: 100%` bar finishes the run, and its last lines say so again
    (`Training finished`): the timeline ends with one `finished`, not two."""
    engine = PhaseEngine(load_config(None).rules())
    t = 1_000.0
    for dt, text in [(0, "step:1 - actor/loss:1.0 - timing_s/step:1.0"),
                     (1, "Training Progress: 100%|##########| 3/3 [00:03<00:00,  1.0it/s]"),
                     (2, "step:3 - actor/loss:0.5 - timing_s/step:1.0"), (3, "Training finished")]:
        engine.feed([line_at(t + dt, text)])
    status = engine.status(t + 4)
    assert [s.name for s in status.timeline] == ["training loop", "finished"]
    assert status.state == "done"


def test_a_crash_in_a_step_gets_the_phases_failure_hint_and_a_stall_its_hang_hint(tmp_path: Path) -> None:
    """The training loop's hint is about a hang (generation stuck, a rank in all_reduce): for an
    assertion raised in a step it would send the user to the engine, so a failure shows the phase's
    `fail_hint` instead; a stall in the same place still shows the hang's causes."""
    lines, last = startup(time.time() - 500, steps=2)
    stalled = tmp_path / "stalled"
    stalled.mkdir()
    write(stalled / "train.log", lines, mtime=last)
    store = Store(config(stall_after=60.0))
    read_into(store, stalled / "train.log")
    status = store.phase_status(now=last + 300)
    assert (status.state, status.current) == ("stalled", "training loop")
    assert status.hint is not None and any("A part of the step is stuck" in c for c in status.hint.causes)
    lines += [
        ray("TaskRunner", 133947, "Traceback (most recent call last):"),
        ray("TaskRunner", 133947, '  File "verl/trainer/ppo/ray_trainer.py", line 1146, in fit'),
        ray("TaskRunner", 133947, "AssertionError: batch size 96 is not divisible by ppo_mini_batch_size 64"),
    ]
    status = status_after(tmp_path, lines)
    assert (status.state, status.current) == ("failed", "training loop")
    hint = " ".join((status.hint.causes + status.hint.actions) if status.hint else [])
    assert "A step raised" in hint and "assert" in hint and "A part of the step is stuck" not in hint, hint


def test_a_fail_hint_with_an_unknown_key_is_a_one_line_error_naming_the_line(tmp_path: Path) -> None:
    from gkdtop.config import ConfigError

    cfg = tmp_path / "gkdtop.yaml"
    cfg.write_text("phases:\n  - name: load\n    start: 'Loading'\n    fail_hint:\n      cause: ['typo']\n")
    with pytest.raises(ConfigError) as err:
        load_config(str(cfg))
    assert "gkdtop.yaml:5" in str(err.value) and "fail_hint" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("frames", "where"), [
    (['  File "verl/trainer/ppo/ray_trainer.py", line 1123, in fit',
      "    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)"], "old log-prob"),
    (['  File "verl/trainer/ppo/ray_trainer.py", line 1502, in fit',
      '  File "verl/trainer/ppo/ray_trainer.py", line 1219, in _compute_old_log_prob',
      "    output = self.actor_rollout_wg.compute_log_prob(batch_td)"], "old log-prob"),
    (['  File "verl/trainer/ppo/ray_trainer.py", line 1089, in fit',
      '  File "vllm/v1/engine/async_llm.py", line 582, in wake_up',
      "    await self.engine_core.wake_up_async(tags)"], "weight sync"),
    (['  File "verl/trainer/ppo/ray_trainer.py", line 1650, in fit',
      '  File "verl/trainer/ppo/ray_trainer.py", line 608, in _validate',
      "    test_output_gen_batch_padded = self.async_rollout_manager.generate_sequences(test_gen_batch_padded)"],
     "validation"),
])
def test_a_traceback_from_a_step_fails_the_part_of_the_step_its_frames_name(
        tmp_path: Path, frames: list[str], where: str) -> None:
    """verl prints nothing inside a step; a crash there is placed by its traceback's frames (verl's
    trainer calls, the engine's wake_up), not charged to the training loop as a whole. A validation's
    generate_sequences is the validation's, not the step's generation."""
    lines, _last = startup(time.time() - 500, steps=2)
    lines += [ray("TaskRunner", 133947, "Traceback (most recent call last):")]
    lines += [ray("TaskRunner", 133947, f) for f in frames]
    lines += [ray("TaskRunner", 133947, "RuntimeError: CUDA Error: out of memory at cumem_allocator.cpp:62")]
    status = status_after(tmp_path, lines)
    assert (status.state, status.current, status.within) == ("failed", where, "training loop")
    assert status.failure.startswith("RuntimeError: CUDA Error: out of memory")


def test_a_placement_group_that_already_exists_is_no_pool_made() -> None:
    """`already exists` holds `ready`: read as the pool's done line, it closed the phase the error failed and took the
    failure with it (a verl driver's retry after its first try died: "running", no failure)."""
    t = 1_000.0
    lines = ["Total training steps: 435",
             "Error executing job with overrides: ['trainer.n_gpus_per_node=4']",
             "Traceback (most recent call last):",
             '  File "/srv/verl/verl/trainer/main_ppo.py", line 25, in main',
             "    run_ppo(config)",
             "ray.exceptions.RayTaskError(ValueError): ray::main_task() (pid=4100, ip=10.0.0.5)",
             '  File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 540, in init_workers',
             "    self.resource_pool_manager.create_resource_pool()",
             '  File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 80, in create_resource_pool',
             "    resource_pool.get_placement_groups()",
             "ValueError: Failed to create placement group 'global_pool_1:0' because a placement group with the same "
             "name already exists."]
    engine = fed(lines, t)
    status = engine.status(t + 1)
    assert status.state == "failed", status
    assert status.failure.startswith("ValueError: Failed to create placement group"), status.failure


def test_the_code_line_under_a_frame_moves_the_failure_off_its_placeholder() -> None:
    """The driver's traceback names the part by its code line (`old_log_prob = ….compute_log_prob(batch)`): the
    failure is there, and the `after rollout init` row the header had opened goes (audit 10 showed both failed)."""
    t = 1_000.0
    lines = ["INFO 04-16 09:03:04 llm_engine.py:431] init engine (profile, create kv cache, warmup model) took 46.27 "
             "seconds",
             "Error executing job with overrides: ['algorithm.adv_estimator=grpo']",
             "Traceback (most recent call last):",
             '  File "/srv/verl/trainer/main_ppo.py", line 25, in main',
             "    run_ppo(config)",
             "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=4100, ip=10.0.0.3)",
             '  File "/srv/verl/trainer/ppo/ray_trainer.py", line 938, in fit',
             "    old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)",
             "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    engine = fed(lines, t)
    status = engine.status(t + 1)
    rows = [(s.name, s.status) for s in status.timeline]
    assert rows == [("rollout init", "done"), ("old log-prob", "failed")], rows
    assert status.failure.startswith("ray.exceptions.ActorDiedError"), status.failure


def test_vllm_v0_loading_its_weights_is_the_engines_start_up_not_the_actors() -> None:
    """vLLM V0's `Loading model weights took 14.25 GB` and `Memory profiling takes` are its own start-up: the actor's
    load had ended (audit 10: "actor init ≥23s" held the engine's 23 s)."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    for dt, text in [(0, "Qwen2ForCausalLM contains 7.62B parameters"),
                     (5, "INFO 04-16 09:02:17 model_runner.py:1115] Loading model weights took 14.25 GB"),
                     (28, "INFO 04-16 09:02:40 worker.py:267] Memory profiling takes 21.83 seconds"),
                     (52, "INFO 04-16 09:03:04 llm_engine.py:431] init engine (profile, create kv cache, warmup model) "
                          "took 46.27 seconds")]:
        engine.feed([line_at(t + dt, text)])
    spans = {s.name: s for s in engine.status(t + 53).timeline}
    assert list(spans) == ["model load", "engine init"], spans  # a vLLM engine's start-up, with no trainer's words
    assert spans["engine init"].start == t + 5 and spans["model load"].end == t + 5, spans


@pytest.mark.parametrize("after", [
    # a data loader's workers shut down late, mid-run (audit 11's variant): the steps go on
    ["(TaskRunner pid=5521) step:100 - actor/pg_loss:-0.001 - timing_s/step:191.2"],
    # a Tk image freed by the wrong thread as the process exits (EasyR1#255: "FAILED after training finished")
    ["Tcl_AsyncDelete: async handler deleted by the wrong thread"],
])
def test_a_traceback_pythons_unraisable_hook_printed_ends_nothing(after: list[str]) -> None:
    t = 1_000.0
    lines = ["(TaskRunner pid=5521) step:99 - actor/pg_loss:0.003 - timing_s/step:194.4",
             "(TaskRunner pid=5521) Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f3a>",
             "(TaskRunner pid=5521) Traceback (most recent call last):",
             '(TaskRunner pid=5521)   File "/venv/torch/utils/data/dataloader.py", line 1479, in __del__',
             "(TaskRunner pid=5521)     self._shutdown_workers()",
             "(TaskRunner pid=5521) AssertionError: can only join a child process", *after]
    engine = fed(lines, t)
    status = engine.status(t + 1)
    assert status.state != "failed" and not status.failure, status


def test_a_step_after_a_logged_traceback_says_the_run_went_on() -> None:
    """A traceback the job logged and went on from (a reward call that failed and scored 0): the next step's record
    says the run was not ended by it (before: "FAILED in training loop" under step 100's record)."""
    t = 1_000.0
    lines = ["(TaskRunner pid=5521) step:99 - actor/pg_loss:0.003 - timing_s/step:194.4",
             "(TaskRunner pid=5521) [reward] sandbox call failed, scoring 0:",
             "(TaskRunner pid=5521) Traceback (most recent call last):",
             '(TaskRunner pid=5521)   File "/srv/reward/sandbox.py", line 88, in score',
             "(TaskRunner pid=5521)     resp.raise_for_status()",
             "(TaskRunner pid=5521) requests.exceptions.HTTPError: 502 Server Error: Bad Gateway for url: "
             "http://10.0.0.9:8080/run"]
    engine = fed(lines, t)
    assert engine.status(t + 1).state == "failed"  # so far, as far as the log tells
    engine.feed([parsed(t + 1, "(TaskRunner pid=5521) step:100 - actor/pg_loss:-0.001 - timing_s/step:191.2")])
    status = engine.status(t + 2)
    assert status.state == "running" and not status.failure, status
    assert [(s.name, s.status) for s in status.timeline] == [("training loop", "running")], status.timeline


def parsed(t: float, text: str) -> LogLine:
    """A line as the follower parses it (its Ray prefix peeled), stamped `t`."""
    from gkdtop.analysis.lines import parse_line

    line = parse_line(text, "train.log", t)
    line.ts = t
    return line


def test_vllms_own_load_inside_a_verl_worker_is_the_engines_start_up_and_its_server_ends_it() -> None:
    """verl's worker loads the actor, then the vLLM engine in it loads its own copy (`Starting to load model …`): the
    engine's start-up, not the actor's (audit 11: "actor init" with FSDP-wrapper advice under vLLM's shard bar). A
    server-mode engine's uvicorn `Application startup complete.` ends it, and no critic is expected next: verl builds
    its critic before its actor (before: "next expected: critic init" with critic advice on a run with none)."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    lines = [(0, "(TaskRunner pid=3101) Total training steps: 290"),
             (1, "(WorkerDict pid=3355) Qwen2ForCausalLM contains 32.76B parameters"),
             (9, "(WorkerDict pid=3355) INFO 02-22 12:23:55 [model_runner.py:1110] Starting to load model "
                 "/models/Qwen2.5-32B..."),
             (60, "(vLLMHttpServer pid=43018) INFO:     Application startup complete.")]
    for dt, text in lines[:3]:
        engine.feed([parsed(t + dt, text)])
    spans = {s.name: s for s in engine.status(t + 20).timeline}
    assert spans["rollout init"].start == t + 9 and spans["actor init"].end == t + 9, spans
    dt, text = lines[3]
    engine.feed([parsed(t + dt, text)])
    status = engine.status(t + 61)
    assert status.timeline[-1].name == "rollout init" and status.timeline[-1].status == "done", status.timeline
    assert status.expected is None or status.expected not in ("critic init", "reference init", "reward init"), status


def test_a_part_a_tracebacks_code_line_names_began_before_it_was_printed() -> None:
    """verl's driver traceback behind a log collector's stamp names generation by its code line: generation began
    before the crash's stamp, not at it (audit 11: a generation row at 00:18:27, ten minutes after its step began)."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    lines = [(0, "[2025-05-10 00:08:57] (main_task pid=1104) step:18 - actor/pg_loss:0.017 - timing_s/step:406.5"),
             (570, "[2025-05-10 00:18:25] Error executing job with overrides: ['algorithm.adv_estimator=grpo']"),
             (570, "[2025-05-10 00:18:27] Traceback (most recent call last):"),
             (570, '[2025-05-10 00:18:27]   File "/srv/verl/verl/trainer/ppo/ray_trainer.py", line 838, in fit'),
             (570, "[2025-05-10 00:18:27]     gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)"),
             (570, "[2025-05-10 00:18:27] ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
                   "this task.")]
    engine.feed([parsed(t + dt, text) for dt, text in lines])
    status = engine.status(t + 600)
    assert (status.state, status.current, status.since_bound) == ("failed", "generation", "before"), status


def test_a_validations_metrics_end_it_and_easyr1s_training_bar_opens_the_loop() -> None:
    """EasyR1's initial validation, then its `Training:` bar. Before (audit 12): `validation (unfinished) failed` beside
    the old log-prob pass the failure was in, the validation's end unread and the loop never opened."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    lines = [(-5, "(WorkerDict pid=2) INFO 04-10 11:04:01 model_runner.py:1115] Loading model weights took 15.6 GB"),
             (0, "(Runner pid=20411) Start validation..."),
             (160, "(Runner pid=20411) Initial validation metrics: {'val/accuracy_reward': 0.312, 'val/format_reward': "
                   "0.91}"),
             (161, "(Runner pid=20411) Training:   0%|          | 0/240 [00:00<?, ?it/s]"),
             (900, "(Runner pid=20411) Training:   0%|▏         | 1/240 [14:02<55:56:01, 842.51s/it]")]
    engine.feed([parsed(t + dt, text) for dt, text in lines])
    rows = [(s.name, s.status) for s in engine.status(t + 901).timeline]
    assert rows[-2:] == [("validation", "done"), ("training loop", "running")], rows


def test_an_engine_put_to_sleep_ends_the_steps_generation_and_train_batch_is_the_update() -> None:
    """verl 0.8's colocated vLLM falls asleep once its rollout is over; the actor's `train_batch` frame (the new engine
    workers') then fails, its traceback cut. Before (HELDOUT9, read after it was scored): "FAILED in generation", the
    engine's stats line still the step's part. The same sleep once the engine started up opens no generation row."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    lines = [(0, "Training Progress:   0%|          | 0/436 [00:00<?, ?it/s]"),
             (60, "(vLLMHttpServer pid=35240) INFO 06-05 11:35:02 [loggers.py:127] Engine 000: Avg prompt throughput: "
                  "1402.6 tokens/s, Avg generation throughput: 2310.4 tokens/s, Running: 128 reqs, Waiting: 0 reqs"),
             (100, "(vLLMHttpServer pid=35240) INFO 06-05 11:35:42 [executor_base.py:211] It took 3.518224 seconds to "
                   "fall asleep."),
             (101, "(WorkerDict pid=35511) Traceback (most recent call last):"),
             (101, 'File "/workspace/verl/verl/workers/engine_workers.py", line 324, in train_batch'),
             (101, "output = self.engine.train_batch(data, loss_function=self.loss_fn)")]
    engine.feed([parsed(t + dt, text) for dt, text in lines])
    status = engine.status(t + 102)
    assert (status.state, status.current) == ("failed", "actor update"), status
    start_up = PhaseEngine(config().rules())
    start_up.feed([parsed(t, "(WorkerDict pid=1) INFO 06-05 11:30:02 [gpu_model_runner.py:2510] Graph capturing "
                             "finished in 17 secs, took 0.61 GiB"),
                   parsed(t + 3, "(WorkerDict pid=1) INFO 06-05 11:30:05 [executor_base.py:211] It took 1.5 seconds to "
                                 "fall asleep.")])
    assert [s.name for s in start_up.status(t + 4).timeline] == ["rollout init"]


def test_a_launchers_host_before_a_bar_is_no_phase_name() -> None:
    """An MPI operator's launcher prints `mpi-x7k2q9bd-launcher: ` before each line: no phase is named after the host
    (HELDOUT9, read after it was scored: "FAILED in mpi-x7k2q9bd-launcher"). A real description still names one."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    engine.feed([parsed(t, "mpi-x7k2q9bd-launcher:  37%|███▋      | 612/1650 [4:03:17<6:51:22, 23.78s/it]")])
    assert all("launcher" not in s.name for s in engine.status(t + 1).timeline)
    described = PhaseEngine(config().rules())
    described.feed([parsed(t, "Rollout generation:  62%|██████▎   | 40/64 [03:10<01:54,  4.77s/it]")])
    assert [s.name for s in described.status(t + 1).timeline] == ["Rollout generation"]
    # a loop's bar is the training loop (OpenRLHF's reward-model training, HELDOUT10 read after it was scored:
    # "ended in Train epoch")
    loop = PhaseEngine(config().rules())
    loop.feed([parsed(t, "Train epoch:   0%|          | 0/1 [00:00<?, ?it/s]")])
    assert [s.name for s in loop.status(t + 1).timeline] == ["training loop"]


def fed(lines: list[str], t: float) -> PhaseEngine:
    """A phase engine fed `lines` as the follower parses them, 10 ms apart from `t`."""
    engine = PhaseEngine(config().rules())
    engine.feed([parsed(t + i * 0.01, text) for i, text in enumerate(lines)])
    return engine


def test_an_actors_creation_task_that_raised_is_a_failure() -> None:
    """Ray's `Exception raised in creation task: …` (the actor's __init__ raised; its frames follow with no traceback
    header). Before (HELDOUT9, read after it was scored): "ended in rollout init", running."""
    lines = ["(LLMRayActor pid=431876) INFO 01-15 19:07:40 llm_engine.py:249] Initializing an LLM engine (v0.6.5) with "
             "config: model='/models/llama-3-8b'",
             "(LLMRayActor pid=431876) Exception raised in creation task: The actor died because of an error raised in "
             "its creation task, ray::LLMRayActor.__init__() (pid=431876, ip=10.7.5.14)",
             '(LLMRayActor pid=431876)   File "/srv/openrlhf/trainer/ray/vllm_engine.py", line 54, in __init__',
             "(LLMRayActor pid=431876)     self.llm = vllm.LLM(*args, **kwargs)"]
    status = fed(lines, 1_000.0).status(1_001.0)
    assert (status.state, status.current) == ("failed", "rollout init"), status


def test_ray_trains_per_iteration_report_is_the_loop_and_its_run_end_is_finished() -> None:
    """Audit 21: Ray Train prints `Training finished iteration N at …` after every iteration; read as the run's end, a
    watcher said 'finished' at iteration 4 of 10 and a crash after iteration 2 was 'after training finished'. Its
    run's end is `Training completed after N iterations at …`."""
    engine = PhaseEngine(config().rules())
    t = 1_000.0
    for dt, text in [(0, "(RayTrainWorker pid=811, ip=10.2.0.7) Setting up process group for: env:// [rank=0, "
                          "world_size=2]"),
                     (30, "Training finished iteration 1 at 2025-02-03 10:00:30. Total running time: 31s"),
                     (60, "Training finished iteration 2 at 2025-02-03 10:01:00. Total running time: 1min 1s")]:
        engine.feed([line_at(t + dt, text)])
    status = engine.status(t + 61)
    assert (status.current, status.state) == ("training loop", "running")
    engine.feed([line_at(t + 90, "Training completed after 3 iterations at 2025-02-03 10:01:30. Total running "
                                 "time: 1min 31s")])
    assert engine.status(t + 91).state == "done"


def test_a_collective_past_its_groups_first_says_the_job_is_past_its_config() -> None:
    """Audit 21: torchrun's banner (config), then a watchdog line for SeqNum=3 with 2 collectives completed read
    'FAILED in config'. A communicator that ran collectives was made: the failure is after config; the DETR-family
    solvers' `----Start training----` says the loop."""
    watchdog = ("[rank0]:[E305 09:20:41.118201337 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                "ran for 600018 milliseconds before timing out.")
    banner = "W0305 09:08:02.451000 40211 site-packages/torch/distributed/run.py:792] *****************************"
    for middle, verdict in (([], "after config"), (["-" * 20 + "Start training" + "-" * 20], "training loop")):
        engine = PhaseEngine(config().rules())
        t = 1_000.0
        for dt, text in [(0, banner), *[(5, m) for m in middle], (760, watchdog)]:
            engine.feed([line_at(t + dt, text)])
        status = engine.status(t + 761)
        assert (status.state, status.timeline[-1].name) == ("failed", verdict), middle
        assert (status.timeline[0].name, status.timeline[0].status) == ("config", "done")


def test_torchtunes_final_checkpoint_lines_are_the_runs_end() -> None:
    """Audit 21: a torchtune run that saved its last epoch read 'ended in training loop', with a py-spy hint and no
    'finished' message: its checkpointer says the final save is written (`Saving final epoch checkpoint.`, then
    `…has been saved successfully.You can now use this checkpoint…`); an intermediate save says neither."""
    ends = ["INFO:torchtune.utils._logging:Saving final epoch checkpoint.",
            "INFO:torchtune.utils._logging:The full model checkpoint, including all weights and configurations, has "
            "been saved successfully.You can now use this checkpoint for further training or inference."]
    for end in ([], ends[:1], ends[1:]):
        engine = PhaseEngine(config().rules())
        t = 1_000.0
        for dt, text in [(0, "1|79|Loss: 0.8123: 100%|██████████| 79/80 [04:01<00:03,  3.05s/it]"),
                         (3, "Step 80 | loss:0.81 lr:2e-05 tokens_per_second_per_gpu:811.2"),
                         (9, "INFO:torchtune.utils._logging:Model checkpoint of size 4.92 GB saved to /ckpt/m.bin"),
                         *[(10, line) for line in end]]:
            engine.feed([line_at(t + dt, text)])
        assert engine.status(t + 11).state == ("done" if end else "running"), end
