"""The phase from the stacks: the frame rules on py-spy-shaped dumps, real py-spy against processes
that sit where verl and vLLM do, the sampler's schedule and failures, snapshot and the real app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gkdtop.actions.stacks import find_py_spy, parse_py_spy_json, proc_info
from gkdtop.analysis.rules import ConfigError, builtin_phases, compose
from gkdtop.analysis.stackphase import (
    StackMatch,
    builtin_stack_rules,
    consensus,
    match_process,
    parse_stack_rules,
)
from gkdtop.collectors.stackphase import BASE, StackPhaseSampler, sample_reason
from gkdtop.config import Config, load_config
from gkdtop.model import PhaseStatus, ProcInfo
from gkdtop.snapshot import text_summary
from tests import stackjob

SITE = "/usr/lib/python3.11/site-packages/"
# The driver's line that calls generate_sequences, as py-spy will name it.
GEN_LINE = next(i for i, ln in enumerate(stackjob.DRIVER.splitlines(), 1) if "generate_sequences(batch)" in ln)
GEN_FRAME = f"fit (verl/trainer/ppo/ray_trainer.py:{GEN_LINE})"


def pyspy_dump(*threads: tuple[str, list[tuple[str, str, int]]]) -> list:
    """py-spy's `dump --json` for threads of (function, short file, line) frames, innermost first."""
    data = []
    for i, (name, frames) in enumerate(threads):
        data.append({
            "pid": 4242, "thread_id": 140000000 + i, "thread_name": name, "os_thread_id": 4242 + i,
            "active": False, "owns_gil": False, "process_info": None,
            "frames": [{"name": fn, "filename": (SITE + short) if "/" in short else "/job/" + short,
                        "module": None, "short_filename": short, "line": line, "locals": None,
                        "is_entry": False, "is_shim_entry": False} for fn, short, line in frames],
        })
    return parse_py_spy_json(json.dumps(data))


RAY_MAIN = [("main_loop", "ray/_private/worker.py", 946), ("<module>", "ray/_private/workers/default_worker.py", 330)]
ACTOR_CALL = [("actor_method_executor", "ray/_private/function_manager.py", 696),
              ("_resume_span", "ray/util/tracing/tracing_helper.py", 467)]


def judge(threads: list, source: dict[tuple[str, int], str] | None = None) -> StackMatch | None:
    lines = source or {}
    return match_process(threads, builtin_stack_rules(), lambda f: lines.get((f.file, f.line), ""))


# ---------------------------------------------------------------- the rules, on py-spy-shaped dumps


def test_vllm_capturing_cuda_graphs_inside_verl_init_model_is_rollout_init() -> None:
    threads = pyspy_dump(("MainThread", [
        ("CUDAGraphRunner.capture", "vllm/worker/model_runner.py", 1794),
        ("GPUModelRunnerBase.capture_model", "vllm/worker/model_runner.py", 1523),
        ("Worker._warm_up_model", "vllm/worker/worker.py", 331),
        ("LLMEngine._initialize_kv_caches", "vllm/engine/llm_engine.py", 429),
        ("LLMEngine.__init__", "vllm/engine/llm_engine.py", 283),
        ("ActorRolloutRefWorker._build_rollout", "verl/workers/fsdp_workers.py", 470),
        ("ActorRolloutRefWorker.init_model", "verl/workers/fsdp_workers.py", 592),
        ("func", "verl/single_controller/ray/base.py", 663), *ACTOR_CALL, *RAY_MAIN,
    ]))
    found = judge(threads)
    assert found is not None and found.phase == "rollout init"
    assert found.where == "vllm … capture"  # the innermost frame the rule matched
    assert found.frame == "capture (vllm/worker/model_runner.py:1794)"


def test_a_rank_in_broadcast_during_weight_sync_says_what_it_waits_on() -> None:
    threads = pyspy_dump(
        ("ray_import_thread", [("wait", "threading.py", 324), ("_run", "ray/_private/import_thread.py", 90)]),
        ("MainThread", [
            ("broadcast", "torch/distributed/distributed_c10d.py", 2421),
            ("wrapper", "torch/distributed/c10d_logger.py", 83),
            ("ActorRolloutRefWorker.sync_rollout_weights", "verl/workers/fsdp_workers.py", 820),
            *ACTOR_CALL, *RAY_MAIN,
        ]),
    )
    found = judge(threads)
    assert found is not None and (found.phase, found.waiting) == ("weight sync", "broadcast")
    assert found.thread == "MainThread" and found.package == "verl"


def test_validation_wins_over_the_generation_it_runs() -> None:
    threads = pyspy_dump(("MainThread", [
        ("get", "ray/_private/worker.py", 2771), ("wrapper", "ray/_private/client_mode_hook.py", 103),
        ("func_generator.<locals>.Functor.__call__", "verl/single_controller/ray/base.py", 55),
        ("RayPPOTrainer._validate", "verl/trainer/ppo/ray_trainer.py", 606),
        ("RayPPOTrainer.fit", "verl/trainer/ppo/ray_trainer.py", 1331),
    ]))
    lines = {("verl/trainer/ppo/ray_trainer.py", 606):
             "test_output_gen_batch_padded = self.actor_rollout_wg.generate_sequences(test_gen_batch_padded)"}
    found = judge(threads, lines)
    assert found is not None and found.phase == "validation" and found.waiting == "ray.get"


def test_the_verl_driver_is_read_from_its_source_line() -> None:
    # Every worker-group call passes through one generic __call__: only the driver's line says which.
    threads = pyspy_dump(("MainThread", [
        ("get", "ray/_private/worker.py", 2771), ("wrapper", "ray/_private/client_mode_hook.py", 103),
        ("func_generator.<locals>.Functor.__call__", "verl/single_controller/ray/base.py", 55),
        ("RayPPOTrainer.fit", "verl/trainer/ppo/ray_trainer.py", 1268),
        ("TaskRunner.run", "verl/trainer/main_ppo.py", 317), *ACTOR_CALL, *RAY_MAIN,
    ]))
    lines = {("verl/trainer/ppo/ray_trainer.py", 1268): "    actor_output = self.actor_rollout_wg.update_actor(batch)"}
    found = judge(threads, lines)
    assert found is not None
    assert (found.phase, found.via, found.waiting) == ("actor update", "update_actor", "ray.get")
    assert found.where == "verl … fit → update_actor"
    # Without the line (a file py-spy names but this machine cannot read) it is only the loop.
    unread = judge(threads)
    assert unread is not None and unread.phase == "training loop"


def test_qualified_names_tell_the_critic_from_the_actor() -> None:
    critic = pyspy_dump(("MainThread", [("load_state_dict", "torch/nn/modules/module.py", 2215),
                                        ("CriticWorker.init_model", "verl/workers/fsdp_workers.py", 1401)]))
    actor = pyspy_dump(("MainThread", [("from_pretrained", "transformers/modeling_utils.py", 4097),
                                       ("ActorRolloutRefWorker.init_model", "verl/workers/fsdp_workers.py", 592)]))
    assert (judge(critic) or pytest.fail("no match")).phase == "critic init"
    assert (judge(actor) or pytest.fail("no match")).phase == "actor init"


def test_a_driver_waiting_for_its_placement_groups_is_waiting_for_resources() -> None:
    threads = pyspy_dump(("MainThread", [
        ("get", "ray/_private/worker.py", 2771), ("wrapper", "ray/_private/client_mode_hook.py", 103),
        ("RayResourcePool.get_placement_groups", "verl/single_controller/ray/base.py", 143),
        ("ResourcePoolManager.create_resource_pool", "verl/trainer/ppo/ray_trainer.py", 190),
        ("RayPPOTrainer.init_workers", "verl/trainer/ppo/ray_trainer.py", 738),
    ]))
    found = judge(threads)
    assert found is not None and (found.phase, found.waiting) == ("resource pool", "ray.get")


def test_openrlhf_broadcast_to_vllm_and_an_idle_ray_worker() -> None:
    sync = pyspy_dump(("MainThread", [
        ("broadcast", "torch/distributed/distributed_c10d.py", 2421),
        ("PolicyModelActor.broadcast_to_vllm", "openrlhf/trainer/ray/ppo_actor.py", 440), *ACTOR_CALL, *RAY_MAIN,
    ]))
    assert (judge(sync) or pytest.fail("no match")).phase == "weight sync"
    idle = pyspy_dump(("MainThread", RAY_MAIN), ("Thread-2", [("wait", "threading.py", 320)]))
    assert judge(idle) is None  # a worker between calls says nothing about the phase


@pytest.mark.parametrize(("frames", "phase", "waits"), [
    ([("CudaGraphRunner.capture_one_batch_size", "sglang/srt/model_executor/cuda_graph_runner.py", 560),
      ("CudaGraphRunner.capture", "sglang/srt/model_executor/cuda_graph_runner.py", 470),
      ("ModelRunner.init_cuda_graphs", "sglang/srt/model_executor/model_runner.py", 1690),
      ("ModelRunner.__init__", "sglang/srt/model_executor/model_runner.py", 260)], "rollout init", ""),
    ([("broadcast", "torch/distributed/distributed_c10d.py", 2421),
      ("ModelRunner.update_weights_from_distributed", "sglang/srt/model_executor/model_runner.py", 890)],
     "weight sync", "broadcast"),
    ([("get", "ray/_private/worker.py", 2771),
      ("SamplesGenerator.generate_samples", "openrlhf/trainer/ppo_utils/samples_generator.py", 95),
      ("PPOTrainer.fit", "openrlhf/trainer/ppo_trainer.py", 230)], "generation", "ray.get"),
    ([("RemoteExperienceMaker.make_experience", "openrlhf/trainer/ppo_utils/experience_maker.py", 140),
      ("PPOTrainer.fit", "openrlhf/trainer/ppo_trainer.py", 240)], "experience making", ""),
    ([("all_gather", "torch/distributed/distributed_c10d.py", 3000),
      ("FSDPCheckpointManager.save_checkpoint", "verl/utils/checkpoint/fsdp_checkpoint_manager.py", 230),
      ("RayPPOTrainer._save_checkpoint", "verl/trainer/ppo/ray_trainer.py", 958),
      ("RayPPOTrainer.fit", "verl/trainer/ppo/ray_trainer.py", 1653)], "checkpoint save", "all_gather"),
    ([("load", "torch/distributed/checkpoint/state_dict_loader.py", 150),
      ("Trainer._load_from_checkpoint", "transformers/trainer.py", 2900),
      ("Trainer.train", "transformers/trainer.py", 2100)], "checkpoint load", ""),
    ([("Trainer.training_step", "transformers/trainer.py", 3700),
      ("Trainer._inner_training_loop", "transformers/trainer.py", 2500),
      ("Trainer.train", "transformers/trainer.py", 2100)], "training loop", ""),
    # An engine put to sleep as its rollout ends is generation (inside verl's timing_s/gen), not weight sync;
    # waking it is the weight sync. An engine working on a batch is generation; its start-up forward is not.
    ([("sleep", "vllm/device_allocator/cumem.py", 201), ("Worker.sleep", "vllm/v1/worker/gpu_worker.py", 79),
      ("LLM.sleep", "vllm/entrypoints/llm.py", 1246)], "generation", ""),
    ([("wake_up", "vllm/device_allocator/cumem.py", 230), ("LLM.wake_up", "vllm/entrypoints/llm.py", 1260)],
     "weight sync", ""),
    ([("resolve_batch_result", "sglang/srt/managers/tp_worker_overlap_thread.py", 167),
      ("Scheduler.process_batch_result_prefill", "sglang/srt/managers/scheduler.py", 1147),
      ("Scheduler.event_loop_overlap", "sglang/srt/managers/scheduler.py", 519)], "generation", ""),
    ([("Worker.execute_model", "vllm/worker/worker_base.py", 412),
      ("Worker.profile_run", "vllm/worker/model_runner.py", 1290)], "rollout init", ""),
])
def test_more_frameworks(frames: list[tuple[str, str, int]], phase: str, waits: str) -> None:
    found = judge(pyspy_dump(("MainThread", frames)))
    assert found is not None and (found.phase, found.waiting) == (phase, waits)


def test_the_phase_most_ranks_are_in_wins_and_the_driver_breaks_a_tie() -> None:
    def m(phase: str) -> StackMatch:
        return StackMatch(phase, "f", "verl/x.py", 1, "verl")

    ranks = [(1, m("generation")), (2, m("actor update")), (3, m("actor update")), (4, None)]
    pid, best = consensus(ranks) or (0, None)
    assert (pid, best and best.phase) == (2, "actor update")
    pid, best = consensus([(5, m("generation")), (6, m("actor update"))], prefer=[6]) or (0, None)
    assert pid == 6
    assert consensus([(7, None)]) is None


def test_every_builtin_stack_phase_is_a_phase_the_log_rules_know() -> None:
    known = {rule.name for rule in builtin_phases()} | {"experience making"}  # OpenRLHF's, no log line of its own
    assert {rule.label for rule in builtin_stack_rules().rules} <= known


def test_a_bad_stack_rule_names_its_file_and_line() -> None:
    text = "rules:\n  - phase: generation\n    functions: [generate_sequences]\n  - functions: [fit]\n"
    with pytest.raises(ConfigError, match=r"^rules\.yaml:4: rules\[1\]: a rule needs `phase`"):
        parse_stack_rules(compose(text, "rules.yaml"), "rules.yaml")
    with pytest.raises(ConfigError, match=r"^rules\.yaml:2: rules\[0\]\.file: "):
        parse_stack_rules(compose("rules:\n  - {phase: x, functions: [f], file: '(unclosed'}\n", "rules.yaml"),
                          "rules.yaml")


def status(state: str = "running", current: str | None = "generation", unrecognised: int = 0) -> PhaseStatus:
    return PhaseStatus(current=current, state=state, since=0.0, last_progress=0.0, stalled_for=None,
                       stall_after=120.0, hint=None, unrecognised=unrecognised)


def test_the_stacks_are_read_only_when_the_log_cannot_say() -> None:
    now = 1000.0
    assert sample_reason(status(), now - 1, now) == ""  # a log that names the phase and moves
    assert sample_reason(status("done"), now - 500, now) == ""
    assert sample_reason(status("failed"), now - 500, now) == ""
    assert sample_reason(status("stalled"), now - 500, now) == "stalled"
    assert sample_reason(status("waiting", None), None, now) == "no phase line yet"
    assert sample_reason(status(unrecognised=37), now - 1, now) == "37 lines no rule knows"
    assert sample_reason(status(), now - 40, now) == "log silent for 40s"


def test_config_turns_it_off(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("stack_phase: false\n")
    assert load_config(path).stack_phase is False
    path.write_text("stack_phase: maybe\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:1: stack_phase: expected true or false"):
        load_config(path)


# ---------------------------------------------------------------- real py-spy, real processes


def driver_info(proc: subprocess.Popen[bytes], role: str = "driver") -> ProcInfo:
    info = proc_info(proc.pid)
    info.role = role
    return info


@pytest.fixture
def procs() -> list[subprocess.Popen[bytes]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_real_driver_in_fit_on_generate_sequences_is_generation(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path, "driver"))
    sampler = StackPhaseSampler()
    found = sampler.sample([driver_info(procs[0])], "log silent for 40s")
    assert found.phase == "generation", found
    assert found.where == "verl … fit → generate_sequences"
    assert found.frame == GEN_FRAME
    assert (found.pid, found.processes, found.agree, found.note) == (procs[0].pid, 1, 1, "")
    assert found.text == "generation (from stacks: verl … fit → generate_sequences)"


def test_real_worker_and_engine_threads(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path, "worker"))
    procs.append(stackjob.start(tmp_path, "engine"))
    sampler = StackPhaseSampler()
    worker = sampler.sample([driver_info(procs[0], "worker")], "stalled")
    assert (worker.phase, worker.where) == ("generation", "verl … generate_sequences")
    engine = sampler.sample([driver_info(procs[1], "rollout")], "stalled")
    assert (engine.phase, engine.where) == ("rollout init", "vllm … capture_model")


def test_every_rank_in_a_stall_and_one_that_exited_meanwhile(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path / "a", "driver", "--update"))
    procs.append(stackjob.start(tmp_path / "b", "driver", "--update"))
    gone = stackjob.start(tmp_path / "c", "worker")
    targets = [driver_info(p) for p in (*procs, gone)]
    gone.kill()  # listed by the process scan a moment ago, gone by the time its stack is read
    gone.wait()
    found = StackPhaseSampler().sample(targets, "stalled")
    assert (found.phase, found.agree, found.processes) == ("actor update", 2, 3)
    assert found.pid == procs[0].pid
    assert found.note.startswith(f"pid {gone.pid} (") and "process vanished" in found.note
    assert "\n" not in found.note


def test_nothing_readable_is_a_one_line_note(tmp_path: Path, procs: list) -> None:
    gone = stackjob.start(tmp_path, "worker")
    info = driver_info(gone)
    gone.kill()
    gone.wait()
    found = StackPhaseSampler().sample([info], "no phase line yet")
    assert found.phase is None and found.pid is None
    assert "process vanished" in found.note and "\n" not in found.note
    assert found.text == "stacks unreadable"


def test_py_spy_denied_is_a_note_not_a_crash(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path, "driver"))
    wrapper = tmp_path / "py-spy-as-nobody"  # real py-spy as `nobody` against our process: ptrace refused
    wrapper.write_text(f'#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups {find_py_spy()} "$@"\n')
    wrapper.chmod(0o755)
    found = StackPhaseSampler(py_spy=str(wrapper)).sample([driver_info(procs[0])], "stalled")
    assert found.phase is None
    assert found.note.startswith(f"pid {procs[0].pid} (driver") and "permission denied by ptrace" in found.note


def test_the_sampler_backs_off_while_the_answer_stays(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path, "driver"))
    sampler = StackPhaseSampler()
    targets = [driver_info(procs[0])]
    assert sampler.due("log silent for 40s", targets, 0.0) == targets  # drivers only while not stalled
    sampler.sample(targets, "log silent for 40s", now=100.0)
    assert sampler.due("log silent for 40s", targets, 100.0 + BASE - 1) == []
    sampler.sample(targets, "log silent for 40s", now=200.0)  # the same answer: twice as long to the next
    assert sampler.next_at == 200.0 + 2 * BASE
    sampler.sample(targets, "log silent for 40s", now=300.0)
    assert sampler.next_at == 300.0 + 4 * BASE
    sampler.reset()  # the log says enough again
    assert sampler.due("", targets, 301.0) == [] and sampler.due("stalled", targets, 301.0) == targets


# ---------------------------------------------------------------- snapshot and the app


def unknown_log(path: Path) -> None:
    """A phase line, then lines no rule knows: the log no longer says where the job is."""
    lines = ["Using dataset class: RLHFDataset"] + [f"custom_loader: shard {i} prepared" for i in range(30)]
    path.write_text("".join(line + "\n" for line in lines))


def snapshot_of(tmp_path: Path, log: Path) -> dict:
    """`gkdtop snapshot --json --log LOG`, the job named by the test's own driver pattern (its `--tag`)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"driver_patterns: ['--tag {tmp_path.name}']\n")
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(log), "--config",
                           str(config), "--ray-address", "http://127.0.0.1:9"], capture_output=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_snapshot_json_has_the_stack_phase(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path / "job", "driver", "--tag", tmp_path.name))
    log = tmp_path / "train.log"
    unknown_log(log)
    doc = snapshot_of(tmp_path, log)
    found = doc["phases"]["stack_phase"]
    assert found["phase"] == "generation" and found["source"] == "stacks"
    assert found["pid"] == procs[0].pid and found["frame"] == GEN_FRAME
    assert found["reason"] == "30 lines no rule knows" and 0 <= found["age"] < 60
    assert "stacks: generation (from stacks: verl … fit → generate_sequences)" in text_summary(doc)


def test_a_log_copied_from_another_machine_reads_no_stacks_here(tmp_path: Path, procs: list) -> None:
    """A log pasted from an issue (its stamps a year before this machine's clock), and a job of the same shape running
    here: that job's stacks are not the log's. Before: `stacks: generation (from stacks: …)` of the unrelated job."""
    procs.append(stackjob.start(tmp_path / "job", "driver", "--tag", tmp_path.name))
    log = tmp_path / "pasted.log"
    lines = ["2025-03-01 10:00:00,120 Using dataset class: RLHFDataset"] + [
        f"2025-03-01 10:00:{i + 1:02d},500 custom_loader: shard {i} prepared" for i in range(30)]
    log.write_text("".join(line + "\n" for line in lines))
    doc = snapshot_of(tmp_path, log)
    assert abs(doc["phases"]["clock_offset"]) > 86400 and doc["phases"]["stack_phase"] is None
    # And the clock line says what a year's offset is: no zone or drift (before: "(zone or skew)").
    assert "(a copy of an older log, or a clock set wrong)" in text_summary(doc)


async def test_the_phases_pane_shows_the_phase_from_the_stacks(tmp_path: Path, procs: list) -> None:
    from gkdtop.tui.phases_pane import PhasesPane
    from tests.test_app import make_app, pane_text, settle

    procs.append(stackjob.start(tmp_path / "job", "driver", "--tag", tmp_path.name))
    app, log = make_app(tmp_path, [], driver_patterns=[f"--tag {tmp_path.name}"])
    unknown_log(log)
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "from stacks" in pane_text(app, PhasesPane))
        text = pane_text(app, PhasesPane)
        assert "generation (from stacks: verl … fit → generate_sequences)" in text
        assert f"pid {procs[0].pid} driver" in text and "30 lines no rule knows" in text
        # The log names a phase again: the stack phase goes away.
        with log.open("a") as fh:
            fh.write("step:1 - actor/loss:0.5 - timing_s/step:3.0\n")
        await settle(pilot, lambda: "from stacks" not in pane_text(app, PhasesPane))
        assert app.monitor.store.stack_phase is None


def test_it_is_on_by_default() -> None:
    assert Config().stack_phase is True


def test_whose_stacks_are_read() -> None:
    def row(pid: int, role: str) -> ProcInfo:
        return ProcInfo(pid, 1, f"p{pid}", f"p{pid}", role, "me", "sleeping", 0.0, 0, 0.0)

    job = [row(1, "actor"), row(2, "driver"), row(3, "ray-worker"), row(4, "ray-daemon"), row(5, "engine")]
    sampler = StackPhaseSampler()
    assert [p.pid for p in sampler.due("log silent for 40s", job, 0.0)] == [2]
    assert [p.pid for p in sampler.due("stalled", job, 0.0)] == [2, 1, 3, 5]  # every Python process, driver first
    no_driver = [p for p in job if p.role != "driver"]
    assert [p.pid for p in sampler.due("no phase line yet", no_driver, 0.0)] == [1, 5]  # not Ray's idle pool


def test_a_sample_that_fails_is_a_note_and_waits_its_turn(tmp_path: Path, procs: list) -> None:
    procs.append(stackjob.start(tmp_path, "driver"))
    target = driver_info(procs[0])

    def broken(targets: list[ProcInfo]) -> object:
        raise OSError(24, "Too many open files")

    sampler = StackPhaseSampler(dump=broken)  # type: ignore[arg-type]
    found = sampler.sample([target], "stalled", now=50.0)
    assert found.phase is None and found.note == "reading the stacks failed: OSError: [Errno 24] Too many open files"
    assert sampler.due("stalled", [target], 51.0) == []  # not again every second


def test_a_process_with_no_interpreter_is_not_read_again(procs: list) -> None:
    """A job-titled process that is no Python (`exec -a ray::WorkerDict sleep`): py-spy says so once,
    and the sampler does not spawn it again at every look."""
    procs.append(subprocess.Popen(["bash", "-c", "exec -a 'ray::WorkerDict' sleep 600"]))
    proc = psutil.Process(procs[0].pid)
    for _ in range(200):  # until the exec replaced bash
        if proc.exe().endswith("sleep"):
            break
        time.sleep(0.01)
    info = ProcInfo(proc.pid, 1, "ray::WorkerDict", "ray::WorkerDict", "driver", "me", "sleeping", 0.0, 0,
                    proc.create_time())
    sampler = StackPhaseSampler()
    assert sampler.due("log silent for 40s", [info], 0.0) == [info]
    found = sampler.sample([info], "log silent for 40s", now=0.0)
    assert "not a Python process (sleep)" in found.note
    assert sampler.due("log silent for 40s", [info], 1e6) == []  # long past its turn: still not read
