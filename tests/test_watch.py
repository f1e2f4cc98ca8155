"""`gkdtop watch`: the real command in a subprocess on a log that steps, stops and steps again, telling a
real local webhook through apprise and serving /metrics (docs/alerts.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from tests.alerting import METRICS_URL, Webhook, scrape
from tests.gkdlog import asctime, ray, startup

SECRET = "hf_QmTz8LkP2vXw9RbN4sJd7YcA1eUo6GiKf3Hh"  # a token shape the redactor knows


def step_line(step: int, t: float) -> str:
    return (f"step:{step} - timing_s/gen:{2.0 + step / 10:.3f} - timing_s/update_actor:1.500 - "
            f"timing_s/step:4.000 - actor/kl_loss:{1.0 / step:.4f} - critic/score/mean:0.{step}")


def watch(tmp_path: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
           "LD_LIBRARY_PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("RAY_ADDRESS", None)
    env.pop("TMUX", None)
    return subprocess.Popen([sys.executable, "-m", "gkdtop", "watch", "--log", str(log), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def read_until(stream: IO[str], pattern: str, seen: list[str]) -> str:
    """Lines of `stream` until one holds `pattern` (the process's own word that it got there)."""
    for line in stream:
        seen.append(line)
        if pattern in line:
            return line
    raise AssertionError(f"{pattern!r} never came: {''.join(seen)[-2000:]}")


def test_one_stalled_and_one_recovered_message_naming_the_phase_with_no_secret(tmp_path: Path) -> None:
    hook = Webhook()
    log = tmp_path / "train.log"
    now = time.time()
    lines, _ = startup(now - 200, upto="sync")
    lines[-1:] = [f"{asctime(now - 2)} root INFO ✓ Weight synchronization completed in 5.2s",
                  ray("TaskRunner", 133947, f"{asctime(now - 1)} root INFO export HF_TOKEN={SECRET}")]
    lines += [step_line(1, now), step_line(2, now)]
    log.write_text("".join(line + "\n" for line in lines))
    proc = watch(tmp_path, log, "--stall-after", "3", "--notify", hook.url, "--metrics-port", "0", "--json",
                 "--job-name", "gkd-7b")
    err: list[str] = []
    try:
        url = METRICS_URL.search(read_until(proc.stderr, "metrics on", err)).group(1)
        stalled = hook.next(timeout=90)  # 3 s of silence, then the verdict (no clock in the assertion)
        assert stalled["type"] == "warning"
        assert "gkd-7b STALLED in training loop" in stalled["title"], stalled
        metrics = scrape(url)
        assert metrics["gkdtop_stalled"] == 1
        assert metrics["gkdtop_stalled_seconds"] >= 3
        assert metrics["gkdtop_steps_total"] == 2
        assert metrics['gkdtop_step_part_seconds{part="gen"}'] == pytest.approx(2.2)
        assert metrics["gkdtop_job_critic_score_mean"] == pytest.approx(0.2)
        with log.open("a") as fh:  # it steps again
            fh.write(step_line(3, time.time()) + "\n")
        recovered = hook.next(timeout=60)
        assert recovered["type"] == "success"
        assert "gkd-7b recovered in training loop" in recovered["title"], recovered
        assert scrape(url)["gkdtop_stalled"] == 0
        assert scrape(url)['gkdtop_alerts_total{event="stalled"}'] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        out, rest = proc.communicate(timeout=60)
        hook.close()
    assert proc.returncode == 0, "".join(err) + rest
    assert "gkdtop watch: stopped" in rest
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["stalled", "recovered"]
    assert events[0]["phase"] == "training loop" and events[0]["steps"] == 2
    assert hook.posts.empty(), "one message each, no more"
    sent = b"".join(hook.raw).decode() + out
    assert SECRET not in sent and "HF_TOKEN" in sent  # the line is there, its value is not


def test_a_run_that_got_slower_is_told_once_and_scraped(tmp_path: Path) -> None:
    """No stall, no error: generation took twice as long from step 80 of 120. One message says so, with the numbers;
    /metrics carries where it began."""
    from tests.verlrun import verl_run

    hook = Webhook()
    log = tmp_path / "train.log"
    verl_run(log, 120, gen_at=lambda step, rng: rng.gauss(20.0 if step >= 80 else 10.0, 0.6), t0=time.time() - 5000)
    proc = watch(tmp_path, log, "--stall-after", "100000", "--notify", hook.url, "--metrics-port", "0", "--json")
    err: list[str] = []
    try:
        url = METRICS_URL.search(read_until(proc.stderr, "metrics on", err)).group(1)
        told = hook.next(timeout=90)
        assert told["type"] == "warning" and "generation (timing_s/gen) 2.0x slower since step 8" in told["title"], told
        assert "changed: generation (timing_s/gen)" in told["message"], told
        since = scrape(url)['gkdtop_anomaly_since_step{kind="slower",metric="timing_s/gen"}']
        assert 80 <= since <= 83
    finally:
        proc.send_signal(signal.SIGTERM)
        out, rest = proc.communicate(timeout=60)
        hook.close()
    assert proc.returncode == 0, "".join(err) + rest
    assert [json.loads(line)["event"] for line in out.splitlines()] == ["anomaly"]
    assert hook.posts.empty(), "told once"


def test_bad_notify_url_and_unset_variable_are_one_line_errors(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("hello\n")
    for url, said in (("nosuchscheme://token123@host", "#1 (nosuchscheme://…)"),
                      ("json://${GKDTOP_TEST_UNSET_VAR}/x", "GKDTOP_TEST_UNSET_VAR is not set")):
        proc = watch(tmp_path, log, "--notify", url)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2
        assert said in err and len(err.strip().splitlines()) == 1, err
        assert "token123" not in err


def test_serve_serves_the_same_metrics(tmp_path: Path) -> None:
    from tests.test_serve import Served

    served = Served(tmp_path, "--metrics-port", "0")
    try:
        assert served.proc.stderr is not None
        line = served.proc.stderr.readline()  # said before the page's URL, so already in the pipe
        found = METRICS_URL.search(line)
        assert found, line
        deadline = time.monotonic() + 60
        while not (metrics := scrape(found.group(1))).get("gkdtop_steps_total") and time.monotonic() < deadline:
            time.sleep(0.2)  # the first values come with the monitor's first look at the log
        assert metrics['gkdtop_phase_info{framework="verl",phase="training loop",state="running"}'] == 1, metrics
        assert metrics["gkdtop_steps_total"] == 3
    finally:
        served.stop()
