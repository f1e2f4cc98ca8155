"""A real Prometheus (Debian's package, started here on loopback) scrapes `gkdtop watch --metrics-port`
with the shipped rules loaded (docs/monitoring/), and the stall alert reaches `firing`; promtool
checks and unit-tests the rules; every metric the shipped Grafana dashboard draws is one gkdtop serves."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.alerting import METRICS_URL, scrape
from tests.fakenvml import FakeGpu, build, write_data
from tests.gkdlog import startup
from tests.raycluster import free_port, wait_for
from tests.test_watch import read_until, step_line

MONITORING = Path(__file__).resolve().parents[1] / "docs" / "monitoring"
RULES = MONITORING / "gkdtop-rules.yml"
# Under CI (.ci/run installs Debian's prometheus) a missing binary fails: a skip there would check nothing.
MISSING = [tool for tool in ("prometheus", "promtool") if shutil.which(tool) is None]
needs_prometheus = pytest.mark.skipif(bool(MISSING) and os.environ.get("CI") != "true",
                                      reason=f"{', '.join(MISSING)} not installed (apt-get install prometheus)")
# Served only while a Ray cluster answers, or while the run has an anomaly (that one: test_watch.py).
SOMETIMES_SERVED = {"gkdtop_ray_pending_demands", "gkdtop_ray_nodes_dead", "gkdtop_anomaly_since_step"}


def get(url: str) -> Any:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


@needs_prometheus
def test_promtool_checks_and_unit_tests_the_shipped_rules() -> None:
    check = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "5 rules found" in check.stdout + check.stderr
    unit = subprocess.run(["promtool", "test", "rules", "gkdtop-rules.test.yml"], capture_output=True, text=True,
                          timeout=60, cwd=MONITORING)
    assert unit.returncode == 0, unit.stdout + unit.stderr


@needs_prometheus
def test_prometheus_scrapes_gkdtop_and_the_stall_alert_fires(tmp_path: Path) -> None:
    lib = build(tmp_path / "nvml")
    data = tmp_path / "gpus.txt"
    write_data(data, [FakeGpu(util=87, mem_used=30 * 1024**3, uuid="GPU-aaaa"), FakeGpu(util=3, uuid="GPU-bbbb")])
    log = tmp_path / "train.log"
    now = time.time()
    lines, _ = startup(now - 200, upto="sync")
    seen = "node1:4242:4242 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.2<0>"  # a finding, for its metric
    log.write_text("".join(line + "\n" for line in [*lines[:-1], seen, step_line(1, now), step_line(2, now)]))
    # The watch's environment names the fake NVML library (tests/fakenvml.py), the C boundary's stand-in.
    env_proc = _watch_with_gpus(tmp_path, log, lib, data)
    err: list[str] = []
    prometheus = None
    try:
        target = METRICS_URL.search(read_until(env_proc.stderr, "metrics on", err)).group(1)
        scrape_port = int(target.rsplit(":", 1)[1].split("/")[0])
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{RULES}']\n"
            f"scrape_configs:\n  - job_name: gkdtop\n    static_configs: [{{targets: ['127.0.0.1:{scrape_port}']}}]\n")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.err").open("w"))
        api = f"http://127.0.0.1:{port}/api/v1"

        def firing() -> list[dict[str, Any]]:
            try:
                alerts = get(f"{api}/alerts")["data"]["alerts"]
            except OSError:
                return []  # not listening yet
            return [a for a in alerts if a["labels"]["alertname"] == "TrainingStalled" and a["state"] == "firing"]

        alert = wait_for(firing, timeout=120, what="TrainingStalled firing")[0]
        assert alert["labels"]["phase"] == "training loop" and alert["labels"]["framework"] == "verl"
        assert alert["annotations"]["summary"].startswith("Training stalled in training loop on 127.0.0.1:")
        drawn = {name for panel in json.loads((MONITORING / "grafana-gkdtop.json").read_text())["panels"]
                 for t in panel["targets"] for name in re.findall(r"\bgkdtop_[a-z_]+\b", t["expr"])}
        drawn.discard("gkdtop_job_")
        # The stall's own event (gkdtop_alerts_total) is counted when gkdtop sends it, which may be a scrape after
        # Prometheus saw the stall: wait for every name a panel draws, then say which never came.
        names: set[str] = set()

        def every_name() -> bool:
            names.update(get(f"{api}/label/__name__/values")["data"])
            return drawn - SOMETIMES_SERVED <= names

        with contextlib.suppress(TimeoutError):  # the assertion below names the missing ones
            wait_for(every_name, timeout=60, what="every metric a Grafana panel draws")
        assert drawn - SOMETIMES_SERVED <= names, sorted(drawn - SOMETIMES_SERVED - names)
        gpus = scrape(target)
        assert gpus['gkdtop_gpu_utilization_ratio{gpu="0",uuid="GPU-aaaa"}'] == pytest.approx(0.87)
        assert gpus['gkdtop_gpu_memory_used_bytes{gpu="0",uuid="GPU-aaaa"}'] == 30 * 1024**3
        assert gpus['gkdtop_findings{finding="nccl-bootstrap-interface"}'] == 1
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=60)
        env_proc.send_signal(signal.SIGTERM)
        env_proc.communicate(timeout=60)


def _watch_with_gpus(tmp_path: Path, log: Path, lib: Path, data: Path) -> subprocess.Popen[str]:
    import sys

    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "RAY_TMPDIR": str(tmp_path),
           "LD_LIBRARY_PATH": str(lib), "FAKE_NVML_DATA": str(data), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "gkdtop", "watch", "--log", str(log), "--stall-after", "5",
                             "--metrics-port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
