"""`gkdtop replay` on realistic finished logs: durations from the lines' own times, steps, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gkdtop.config import load_config
from gkdtop.replay import needles, replay, to_ere
from tests.gkdlog import asctime, ray, startup


def write(tmp_path: Path, lines: list[str], name: str = "train.log") -> str:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.fixture(params=[True, False], ids=["grep", "python"])
def use_grep(request: pytest.FixtureRequest) -> bool:
    return request.param


def test_finished_run_timeline_and_step_statistics(tmp_path: Path, use_grep: bool) -> None:
    t0 = 1_768_125_600.0
    lines, last = startup(t0, steps=4, step_s=30)
    lines.append(ray("TaskRunner", 1, f"{asctime(last + 1)} root INFO ✓ Training finished: 4 steps"))
    report = replay([write(tmp_path, lines)], load_config(None), use_grep=use_grep)
    spans = {s.name: s for s in report.status.timeline}
    assert [s.name for s in report.status.timeline][:6] == ["config", "dataset generation", "resource pool",
                                                           "actor init", "rollout init", "weight sync"]
    assert spans["dataset generation"].duration == pytest.approx(20.0)
    assert spans["actor init"].duration == pytest.approx(15.0)  # mixed ISO and asctime stamps
    assert spans["rollout init"].duration == pytest.approx(30.0)
    assert report.status.state == "done"
    assert report.steps["count"] == 4
    assert report.steps["mean_s"] == pytest.approx(30.0)
    assert report.steps["timing_mean_s"]["update_actor"] == pytest.approx(10.5)
    assert report.started == pytest.approx(t0 + 1, abs=0.01)
    assert report.ended == pytest.approx(last + 1, abs=0.01)
    assert report.method == ("grep" if use_grep else "python")


def test_run_that_ended_in_a_traceback(tmp_path: Path, use_grep: bool) -> None:
    lines, _ = startup(time.time() - 500, upto="rollout")
    crash = [
        ray("TaskRunner", 1, "Traceback (most recent call last):"),
        ray("TaskRunner", 1, '  File "verl/trainer/main_ppo.py", line 64, in run'),
        ray("TaskRunner", 1, "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        ray("TaskRunner", 1, "\tclass_name: WorkerDict"),
    ]
    report = replay([write(tmp_path, lines + crash + crash)], load_config(None), use_grep=use_grep)
    assert report.status.state == "failed"
    assert report.status.current == "rollout init"
    assert report.status.failure.startswith("ray.exceptions.ActorDiedError")
    assert len(report.errors) == 1 and report.errors[0].count == 2
    assert report.errors[0].first_line == len(lines) + 1
    died = [f for f in report.findings if f.name == "ray-actor-died"]
    assert died and died[0].fields.get("actor_class") == "WorkerDict"


def test_run_that_stopped_mid_phase_points_at_the_phase_and_its_hint(tmp_path: Path, use_grep: bool) -> None:
    lines, last = startup(1_768_125_600.0, upto="sync")
    lines += [f"{asctime(last + 700)} root INFO heartbeat: still alive"]  # noise, not a phase line
    report = replay([write(tmp_path, lines)], load_config(None), use_grep=use_grep)
    assert report.status.current == "weight sync"
    assert report.status.state == "stalled"
    assert report.ended == pytest.approx(last + 700, abs=0.01)
    assert report.status.hint is not None and "NCCL_TIMEOUT is read by nothing" in " ".join(report.status.hint.actions)


def test_grep_translation() -> None:
    assert to_ere(r"step:(?P<n>\d+) -") == "step:([0-9]+) -"
    assert to_ere(r"(?:a|b)\[x\]") == r"(a|b)\[x\]"
    assert to_ere(r"foo(?=bar)") is None


def test_needles_every_match_holds() -> None:
    """grep looks only for these literals; the patterns themselves are met in Python."""
    assert needles(r"^[\w.]*(?:Error|Exception)\b") == {"Error", "Exception"}
    assert needles(r"Teacher (ready|connected)|\[TEACHER\] DONE") == {"Teacher ready", "Teacher connected",
                                                                      "[TEACHER] DONE"}
    assert needles(r"(?i)teacher") is None
    assert needles(r"\d+(?:ms|s)?") is None


def test_cli_json_and_errors(tmp_path: Path) -> None:
    lines, _ = startup(1_768_125_600.0, steps=2)
    path = write(tmp_path, lines)
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "replay", "--json", path], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and doc["steps"]["count"] == 2 and doc["stopped_in"] == "training loop"
    assert {"name", "start", "end", "duration", "status"} <= doc["timeline"][0].keys()
    text = subprocess.run([sys.executable, "-m", "gkdtop", "replay", path], capture_output=True, text=True,
                          timeout=60).stdout
    assert "steps: 2 (1..2)" in text and "timeline:" in text
    missing = subprocess.run([sys.executable, "-m", "gkdtop", "replay", str(tmp_path / "nope.log")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.log: No such file" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize("jobs", [2, 3, 7])
def test_parallel_chunks_select_the_same_lines_with_the_same_numbers(tmp_path: Path, jobs: int,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A large file is grepped in chunks at once; the lines and their numbers must not change."""
    import gkdtop.replay as rp
    from gkdtop.collectors.findings import FindingsEngine

    lines, _ = startup(time.time() - 3600, steps=40, step_s=5)
    # Each holds a literal grep looks for but matches no pattern: grep lets it through, Python drops it.
    decoys = ["step:abc - no number", "ip: unknown", "Worker exit type: ?", "[Rank x] not a rank"]
    filler = decoys + [f"INFO noise line {i} with nothing to see" for i in range(300)]
    body = [x for i, line in enumerate(lines) for x in (line, *filler[: i % 7])]
    body += [ray("TaskRunner", 9, "Traceback (most recent call last):"), ray("TaskRunner", 9, "RuntimeError: boom")]
    log = tmp_path / "train.log"
    log.write_text("\n".join(body))  # no newline at the end: the last chunk must still be read whole
    config = load_config(None)
    patterns = rp.candidate_patterns(config, FindingsEngine(config.findings))
    expected = list(rp._python_lines(str(log), patterns))
    monkeypatch.setattr(rp, "CHUNK_MIN", 1)
    assert len(rp._chunks(str(log), jobs, rp.grep_patterns(str(log), patterns)[0])) == jobs
    got = list(rp._grep_lines(str(log), patterns, jobs=jobs) or [])
    assert got == expected
    assert got[-1][0] == len(body)
    assert not {text for _, text in got} & set(decoys)
    report = replay([str(log)], config)
    assert report.errors and report.errors[0].first_line == len(body) - 1
