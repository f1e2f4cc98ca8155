"""Framework profiles (gkdtop/data/frameworks.yaml, analysis/profiles.py): told from real-format log
lines, from a real process's command line, pinned by the config; shown in replay, snapshot and the
top bar. The corpus (tests/test_corpus.py) checks the detected name on every training log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gkdtop.analysis.engine import Analysis
from gkdtop.config import Config
from gkdtop.tui.app import TopBar
from tests.test_app import make_app, settle

CORPUS = Path(__file__).parent / "corpus"


def replay_json(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", *args],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_replay_names_framework_and_how_it_runs() -> None:
    doc = replay_json(str(CORPUS / "verl_grpo_megatron_old_logprob_hang.log"))
    fw = doc["framework"]
    assert fw["name"] == "verl" and fw["source"] == "log"
    assert fw["label"] == "verl · GRPO · Megatron · vLLM rollout · colocated"
    assert fw["evidence"] and any("TaskRunner" in e for e in fw["evidence"])


def test_a_plain_ray_job_is_ray_and_an_unknown_log_is_nothing(tmp_path: Path) -> None:
    ray_log = tmp_path / "ray.log"
    ray_log.write_text(
        "2025-06-12 10:31:02,123\tINFO worker.py:1852 -- Started a local Ray instance.\n"
        "(my_task pid=4411) computing shard 3\n"
        "(autoscaler +2m5s) Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0}.\n")
    assert replay_json(str(ray_log))["framework"]["label"] == "Ray"
    other = tmp_path / "other.log"
    other.write_text("hello\nworld\n")
    assert replay_json(str(other))["framework"] == {"name": None, "label": "", "traits": {}, "source": "none",
                                                    "evidence": []}


def test_hf_trainer_and_llamafactory_are_told_from_what_a_pasted_excerpt_keeps(tmp_path: Path) -> None:
    """Users paste the end: Trainer.log's dict and the traceback's frames, not the start-up banner. An ms-swift
    dict (its own 'global_step/max_steps') is not taken for the HF Trainer."""
    hf = tmp_path / "hf.log"
    hf.write_text("{'loss': 1.9312, 'grad_norm': 0.81, 'learning_rate': 9.9e-06, 'epoch': 0.04}\n"
                  "[E ProcessGroupNCCL.cpp:475] [Rank 5] Watchdog caught collective operation timeout\n")
    assert replay_json(str(hf))["framework"]["name"] == "hf-trainer"
    lf = tmp_path / "lf.log"
    lf.write_text('Traceback (most recent call last):\n  File "/opt/lf/src/llamafactory/launcher.py", line 23, in '
                  "<module>\n    launch()\n  File \"/opt/lf/src/llamafactory/train/tuner.py\", line 50, in run_exp\n"
                  "RuntimeError: NCCL communicator was aborted on rank 3.\n")
    assert replay_json(str(lf))["framework"]["name"] == "llamafactory"
    swift = tmp_path / "swift.log"
    swift.write_text("{'loss': 1.52, 'grad_norm': 3.1, 'learning_rate': 1e-05, 'epoch': 0.01, "
                     "'global_step/max_steps': '1/2290'}\n")
    assert replay_json(str(swift))["framework"]["name"] is None


@pytest.mark.parametrize(("banner", "name"), [
    ("***** Running training *****", "hf-trainer"),
    ("[INFO|trainer.py:2048] 2026-11-28 03:00:09,415 >> ***** Running training *****", "hf-trainer"),
    ("[rank0]:***** Running training *****", "hf-trainer"),
    ("11/28/2026 03:00:09 - INFO - transformers.trainer - ***** Running training *****", "hf-trainer"),
    # accelerate's no_trainer examples print the same banner through the script's own logger: no Trainer runs.
    ("11/28/2026 03:00:09 - INFO - __main__ - ***** Running training *****", None),
])
def test_trainer_s_banner_names_hf_trainer_a_script_s_own_does_not(tmp_path: Path, banner: str, name: str | None
                                                                      ) -> None:
    log = tmp_path / "train.log"
    log.write_text(banner + "\n")
    assert replay_json(str(log))["framework"]["name"] == name


def test_a_warning_from_trl_s_grpo_config_names_trl(tmp_path: Path) -> None:
    """A GRPO run's start: the model loaded, then a warning from TRL's own grpo_config.py (its path is the only line
    that names the trainer). Before: no framework."""
    log = tmp_path / "grpo.log"
    log.write_text("/home/u/venv/lib/python3.11/site-packages/trl/trainer/grpo_config.py:712: UserWarning: "
                   "`vllm_importance_sampling_correction` is set\n  warnings.warn(\n"
                   "Loading checkpoint shards: 100%|##########| 3/3 [00:02<00:00,  1.13it/s]\n")
    assert replay_json(str(log))["framework"]["name"] == "trl"


def test_config_pins_the_framework(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("framework: openrlhf\n")
    fw = replay_json("--config", str(cfg), str(CORPUS / "verl_grpo_nan_loss.log"))["framework"]
    assert fw["name"] == "openrlhf" and fw["source"] == "config"


def test_a_process_command_line_tells_framework_and_traits() -> None:
    """A real process whose argv is a verl launch (Hydra overrides), read back through psutil."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "verl.trainer.main_ppo",
                             "actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.rollout.name=sglang",
                             "algorithm.adv_estimator=grpo"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while "verl.trainer.main_ppo" not in (cmdline := " ".join(psutil.Process(proc.pid).cmdline())):
            assert time.monotonic() < deadline and proc.poll() is None, cmdline  # empty while it execs
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    analysis = Analysis(Config().rules())
    fw = analysis.profiles.result([cmdline, "/usr/bin/python3 -m some.other.tool"])
    assert (fw.name, fw.source) == ("verl", "processes")
    assert fw.label == "verl · GRPO · Megatron · SGLang rollout"
    assert fw.evidence == [cmdline[:160]]


def test_another_stack_s_process_does_not_outvote_the_log() -> None:
    """`snapshot --log openrlhf.log` on a machine where a verl job also runs: before, the verl process (3 points)
    outvoted the OpenRLHF log's line and the log was called verl, with verl's advice. The log names the job; a
    process still tells a fork from its base where the log says only the base."""
    from gkdtop.analysis.lines import parse_line

    def told(text: str, commands: list[str]) -> str:
        analysis = Analysis(Config().rules())
        analysis.feed([parse_line(text, "train.log", time.time())])
        return analysis.profiles.result(commands).name

    verl = "/usr/bin/python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    assert told("(LLMRayActor pid=18822) creating LLM with bundle_indices=[0, 1, 2, 3]", [verl]) == "openrlhf"
    hf = "{'loss': 1.9312, 'grad_norm': 0.81, 'learning_rate': 9.9e-06, 'epoch': 0.04}"
    assert told(hf, []) == "hf-trainer"
    assert told(hf, ["/usr/bin/python3 /usr/local/bin/trl vllm-serve --model m"]) == "trl"  # a fork of the log's
    assert told(hf, [verl]) == "hf-trainer"


@pytest.mark.asyncio
async def test_top_bar_shows_the_framework(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, [
        "ray init kwargs: {'num_cpus': None, 'runtime_env': {'env_vars': {'NCCL_DEBUG': 'WARN'}}}",
        "(TaskRunner pid=2301) TaskRunner hostname: gpu-node-7, PID: 2301",
        "(TaskRunner pid=2301)                                  'strategy': 'fsdp',",
        "(TaskRunner pid=2301) [validate_config] All configuration checks passed successfully!",
    ])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot, lambda: "verl · FSDP" in str(app.query_one(TopBar).render()))


def test_default_logs_filter_shows_where_a_real_verl_job_is(tmp_path: Path) -> None:
    """The Logs pane's default filter on a real-format verl PPO log (through `snapshot`, which shows the
    lines that filter keeps): the landmarks and every step, not the config dump or the memory lines."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text("backlog: 5000\n")
    log = CORPUS / "verl_ppo_checkpoint_save_hang.log"
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--config", str(cfg),
                           "--log", str(log), "--lines", "5000", "--ray-address", "127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120, check=True)
    shown = [line["text"] for line in json.loads(proc.stdout)["logs"]["lines"]]
    total = sum(1 for raw in log.read_bytes().splitlines() if raw.strip())
    assert 40 <= len(shown) <= total // 3, (len(shown), total)
    for landmark in ("Started a local Ray instance", "TaskRunner hostname:", "[validate_config]", "dataset len:",
                     "Total training steps:", "colocated worker base class", "contains 7.62B parameters",
                     "vLLMHttpServer, replica_rank", "test_gen_batch meta info", "local_global_step_folder:"):
        assert any(landmark in text for text in shown), landmark
    steps = sum(1 for raw in log.read_text().splitlines() if " step:" in raw or raw.startswith("step:"))
    assert sum(1 for text in shown if text.startswith("step:")) == steps
    assert not any("'ppo_epochs'" in text or text.startswith("After resume") for text in shown)


def _snapshot_framework(tmp_path: Path, log: Path) -> dict:
    import os

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
           "LD_LIBRARY_PATH": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--log", str(log), "--ray-address",
                           "127.0.0.1:9"], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["framework"]


def _started(argv: list[str], **kw: object) -> subprocess.Popen:
    """A real process, once its argv is its own (empty while it execs)."""
    proc = subprocess.Popen(argv, **kw)  # type: ignore[call-overload]
    deadline = time.monotonic() + 30
    while argv[-1] not in " ".join(psutil.Process(proc.pid).cmdline()):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    return proc


def test_only_processes_tied_to_the_log_name_its_framework(tmp_path: Path) -> None:
    """`snapshot --log` of a log that names no framework, while another job (a torchrun of LLaMA-Factory) runs on
    the machine: before, that job's command line (3 points) named the log's framework. Now only a process tied to
    the log votes: one that writes it, or feeds the pipe its writer reads (`… | tee train.log`)."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"[2026-03-01 10:00:{i:02d},000] INFO step {i} done\n" for i in range(5)))
    sleeper = "import sys, time; sys.stdout.flush(); time.sleep(120)"
    other = _started([sys.executable, "-c", sleeper, "torchrun", "llamafactory-cli", "train", "other.yaml"],
                     stdin=subprocess.DEVNULL)
    writer = feeder = tee = None
    try:
        assert _snapshot_framework(tmp_path, log)["name"] is None  # no writer: the log alone, which names none
        # The job writes the log itself (stdout redirected to it): its command line votes.
        with log.open("a") as out:
            writer = _started([sys.executable, "-c", sleeper, "torchrun", "-m", "openrlhf.cli.train_ppo_ray"],
                              stdin=subprocess.DEVNULL, stdout=out)
        fw = _snapshot_framework(tmp_path, log)
        assert (fw["name"], fw["source"]) == ("openrlhf", "processes")
        writer.kill()
        writer.wait()
        # The job's output piped to tee, which writes the log: the process feeding tee's pipe votes.
        feeder = _started([sys.executable, "-c", sleeper, "torchrun", "-m", "verl.trainer.main_ppo"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        tee = subprocess.Popen(["tee", "-a", str(log)], stdin=feeder.stdout, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not any(f.path == str(log) for f in psutil.Process(tee.pid).open_files()):
            assert time.monotonic() < deadline and tee.poll() is None
            time.sleep(0.01)
        fw = _snapshot_framework(tmp_path, log)
        assert (fw["name"], fw["source"]) == ("verl", "processes")
    finally:
        for proc in (other, writer, feeder, tee):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_the_framework_is_read_without_scanning_proc(tmp_path: Path) -> None:
    """`Store.framework()` runs on the UI thread at every frame. Which processes are tied to the log is one scan
    of every /proc/N/fd: before, framework() ran it whenever a PID came or went (every poll on a Ray node), a
    frame blocked for as long. Now the processes collector finds them with its rows, in its thread: a real
    Monitor fills the store, framework() is called here, and nothing under /proc is listed on this thread,
    while the verdict is the same (only the log's writer votes; another job on the machine does not), and a
    file followed since is counted from the next poll."""
    import asyncio
    import threading

    from gkdtop.config import builtin_phases
    from gkdtop.monitor import Monitor

    log = tmp_path / "train.log"
    log.write_text("".join(f"[2026-03-01 10:00:{i:02d},000] INFO step {i} done\n" for i in range(5)))
    listed: list[str] = []
    watching: list[int] = []  # this thread's id while framework() runs; the audit hook cannot be removed

    def audit(event: str, args: tuple) -> None:
        if event in ("os.listdir", "os.scandir") and threading.get_ident() in watching:
            where = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            if where.startswith("/proc"):
                listed.append(where)

    sys.addaudithook(audit)

    def framework_looked_at(monitor: Monitor) -> tuple[str | None, str]:
        asyncio.run(monitor.collect_once())  # the collectors, each in a worker thread, as the dashboard polls them
        watching.append(threading.get_ident())
        try:
            fw = monitor.store.framework()
        finally:
            watching.clear()
        assert not listed, f"framework() listed {listed[:3]} on the calling thread"
        return fw.name, fw.source

    sleeper = "import sys, time; sys.stdout.flush(); time.sleep(120)"
    other = _started([sys.executable, "-c", sleeper, "torchrun", "llamafactory-cli", "train", "other.yaml"],
                     stdin=subprocess.DEVNULL)
    writer = None
    monitor = Monitor(Config(phases=builtin_phases(), stack_phase=False), logs=[str(tmp_path / "*.log")],
                      ray_address="http://127.0.0.1:9")
    logs = next(c for c in monitor.collectors if c.name == "logs")
    logs.glob_every = 0  # type: ignore[attr-defined]  # each poll expands the pattern (2 s apart otherwise)
    try:
        assert framework_looked_at(monitor) == (None, "none")  # the other job is in the table but writes no log
        assert other.pid in {p.pid for p in monitor.store.processes}
        # A new file and a new PID: the job's writer, its stdout redirected to a log the pattern now matches.
        # The next poll follows the file and finds the writer tied to it.
        with (tmp_path / "job.log").open("a") as out:
            writer = _started([sys.executable, "-c", sleeper, "torchrun", "-m", "openrlhf.cli.train_ppo_ray"],
                              stdin=subprocess.DEVNULL, stdout=out)
        assert framework_looked_at(monitor) == ("openrlhf", "processes")
        assert {Path(f.path).name for f in monitor.store.log_files} == {"train.log", "job.log"}
    finally:
        asyncio.run(monitor.stop())
        for proc in (other, writer):
            if proc is not None:
                proc.kill()
                proc.wait()


def test_openrlhfs_older_actor_classes_name_it(tmp_path: Path) -> None:
    """OpenRLHF before 0.6 named its actors `ActorModelRayActor`, `CriticModelRayActor` …: a log whose only OpenRLHF
    lines are theirs (a host OOM at step 32 of a 70B run) named no framework."""
    from gkdtop.config import load_config
    from gkdtop.replay import replay

    log = tmp_path / "train.log"
    log.write_text(
        "(ActorModelRayActor pid=14820, ip=10.1.8.71) [2024-06-26 03:11:42,507] [INFO] [config.py:988:print]   "
        "zero_optimization_stage ........ 3\n"
        "(ActorModelRayActor pid=14820, ip=10.1.8.71) make_experience: 100%|██████████| 128/128 [16:22<00:00,  "
        "7.68s/it]\n")
    assert replay([str(log)], load_config(None)).framework.name == "openrlhf"


def test_a_worker_class_two_stacks_share_names_neither_alone(tmp_path: Path) -> None:
    """open-instruct's trainer `PolicyTrainerRayProcess` drives engines in a `LLMRayActor` class it took from
    OpenRLHF: with its own worker there it is open-instruct (before: 'OpenRLHF' from `LLMRayActor` alone); an
    `LLMRayActor` beside OpenRLHF's own actors stays OpenRLHF."""
    from gkdtop.config import load_config
    from gkdtop.replay import replay

    engine = "(LLMRayActor pid=5120) INFO 03-02 11:20:04 llm_engine.py:431] init engine took 7.10 seconds"
    ds = "[2025-03-02 11:20:31,220] [INFO] [config.py:1003:print_user_config]   json = {"
    log = tmp_path / "train.log"
    log.write_text(f"{engine}\n(PolicyTrainerRayProcess pid=5077) {ds}\n")
    assert replay([str(log)], load_config(None)).framework.name == "open-instruct"
    log.write_text(f"{engine}\n(PolicyModelActor pid=5077) {ds}\n")
    assert replay([str(log)], load_config(None)).framework.name == "openrlhf"
