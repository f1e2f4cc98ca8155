"""`gkdtop doctor` on this machine: no GPU, Ray up and down, NCCL_TIMEOUT set; statuses and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gkdtop.doctor import check_plan
from tests.raycluster import RayCluster, free_port


def doctor(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
            "LD_LIBRARY_PATH": str(tmp_path)}
    base.pop("RAY_ADDRESS", None)
    base.pop("NCCL_TIMEOUT", None)
    return subprocess.run([sys.executable, "-m", "gkdtop", "doctor", *args], capture_output=True, text=True,
                          timeout=120, env={**base, **(env or {})})


def checks(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    return {c["name"]: c for c in doc["checks"]}


def test_no_gpu_no_ray_nccl_timeout_set(tmp_path: Path) -> None:
    proc = doctor(tmp_path, "--json", env={"NCCL_TIMEOUT": "1800"})
    assert proc.returncode == 0, proc.stderr  # warnings only
    got = checks(proc)
    assert got["gpus"]["status"] == "warn" and "NVML library not found" in got["gpus"]["detail"]
    assert got["ray"]["status"] == "warn"
    nccl = got["env NCCL_TIMEOUT"]
    assert nccl["status"] == "warn"
    assert "read by neither NCCL nor PyTorch" in nccl["detail"]
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in nccl["fix"] and "init_process_group(timeout" in nccl["fix"]
    assert got["py-spy"]["status"] == "ok"
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in got.values())


def test_plan_that_does_not_fit_fails_with_exit_code(tmp_path: Path) -> None:
    proc = doctor(tmp_path, "--json", "--actor-gpus", "2", "--rollout-gpus", "2")
    assert proc.returncode == 1
    plan = checks(proc)["plan"]
    assert plan["status"] == "fail" and "4 short" in plan["detail"]
    text = doctor(tmp_path, "--actor-gpus", "2", "--rollout-gpus", "2")
    assert "FAIL  plan" in text.stdout and "fix:" in text.stdout


def test_plan_check_arithmetic() -> None:
    assert check_plan(4, 2, 2, 1, 8, None).status == "ok"
    assert check_plan(4, 4, 2, 1, 8, None).status == "fail"
    assert check_plan(4, 2, 0, 1, 0, 8.0).status == "ok"  # Ray's GPU total wins over what this node sees
    assert check_plan(3, 0, 0, 2, 2, None).status == "warn"


def test_ray_up_is_ok_and_an_explicit_dead_address_fails(tmp_path: Path, ray_cluster: RayCluster) -> None:
    up = doctor(tmp_path, "--json", env={"RAY_TMPDIR": str(ray_cluster.temp_root)})
    assert checks(up)["ray"]["status"] == "ok", checks(up)["ray"]
    port = free_port()
    down = doctor(tmp_path, "--json", "--ray-address", f"127.0.0.1:{port}")
    assert down.returncode == 1
    assert checks(down)["ray"]["status"] == "fail"
    assert checks(down)["ray"]["detail"] == f"not connected: no Ray cluster at 127.0.0.1:{port}: nothing listens there"


def test_a_gcs_address_finds_its_cluster_outside_the_default_temp_dir(tmp_path: Path,
                                                                       ray_cluster: RayCluster) -> None:
    """The default temp dir's newest session is a crashed run's: `--ray-address` still finds the live cluster
    asked for (its temp dir is elsewhere) by its GCS port, and says which dashboard answered."""
    session = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "dashboard.log").write_text(f"INFO -- Dashboard head http address: 127.0.0.1:{free_port()}\n")
    (tmp_path / "ray" / "session_latest").symlink_to(session)
    proc = doctor(tmp_path, "--json", "--ray-address", ray_cluster.address)
    ray = checks(proc)["ray"]
    assert ray["status"] == "ok", ray
    assert ray["detail"].endswith(f"at {ray_cluster.dashboard}")


def test_job_workers_without_the_flight_recorder_variables_are_named(tmp_path: Path) -> None:
    """What verl does to `gkdtop run`'s variables: the driver has them, a Ray worker it started may not."""
    from dataclasses import replace

    from gkdtop.actions.stacks import proc_info
    from gkdtop.doctor import check_job_env
    from gkdtop.jobrun import flight_recorder_env

    script = "import sys; print('ready', flush=True); sys.stdin.read()"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_")}
    given = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**base, **flight_recorder_env(tmp_path)})
    dropped = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               env=base)
    try:
        for proc in (given, dropped):
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        workers = [replace(proc_info(p.pid), role="actor", actor="OnPolicyDistillActor") for p in (given, dropped)]
        env_check, nccl = check_job_env(workers)
        assert env_check.status == "warn" and env_check.detail.startswith("1 of 2 job workers:"), env_check
        assert f"{dropped.pid} (OnPolicyDistillActor) lacks TORCH_FR_BUFFER_SIZE" in env_check.detail
        assert str(given.pid) not in env_check.detail and "runtime_env" in env_check.fix
        assert nccl.status == "ok" and "no job worker has loaded NCCL" in nccl.detail
        assert check_job_env(workers[:1])[0].status == "ok"
    finally:
        for proc in (given, dropped):
            proc.kill()
            proc.wait(10)
