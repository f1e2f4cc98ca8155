"""Python stacks of Ray actors on every node, as the same StackReport `gkdtop stacks` makes locally.

Two ways, tried in this order:

1. The dashboard's `GET /worker/traceback?pid=P&node_id=N&native=0`: the head asks the node's Ray
   agent, which runs `py-spy dump` there and returns its text. Ray 2.60 answers 403 unless the head
   was started with `RAY_DASHBOARD_ENABLE_PROFILING=1`, and 500 "py-spy is not installed" when
   py-spy is not on the agent's PATH. No ray import; method "ray-dashboard".
2. Opt-in (`agent=True`, `gkdtop stacks --ray --ray-agent`): gkdtop starts one small actor per node
   (num_cpus=0, pinned with NodeAffinitySchedulingStrategy) that runs `py-spy dump --json` on its
   node, and kills them afterwards. That needs ray, so it runs in a child Python that connects to
   the given GCS address (never starts a cluster; RAY_ENABLE_AUTO_CONNECT=0); method "ray-agent".

Targets are the cluster's ALIVE actors from the state API (class, PID, node), or given ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gkdtop.actions.stacks.analysis import group_stacks, outliers
from gkdtop.analysis.stackphase import parse_py_spy_text
from gkdtop.capture.pyspy import parse_py_spy_json
from gkdtop.collectors.ray import DashboardFinder, ray_temp_dir, state_list
from gkdtop.model.stacks import StackDump, StackReport

MAX_TARGETS = 256
RESULT_MARK = "@@GKDTOP-AGENT@@"


@dataclass(slots=True)
class RemoteTarget:
    """One process on some Ray node: an actor's worker, as the state API lists it."""

    node_id: str
    pid: int
    actor: str = ""  # class name
    node_ip: str = ""
    actor_id: str = ""


def ray_targets(url: str, timeout: float = 10.0, classes: list[str] | None = None) -> list[RemoteTarget]:
    """The cluster's ALIVE actors that have a PID (optionally only these classes), node by node."""
    rows, _ = state_list(url, "actors", timeout, detail=True)
    nodes, _ = state_list(url, "nodes", timeout)
    ips = {str(n.get("node_id", "")): str(n.get("node_ip", "")) for n in nodes}
    found = []
    for row in rows:
        pid, node, cls = row.get("pid"), str(row.get("node_id") or ""), str(row.get("class_name") or "")
        if row.get("state") != "ALIVE" or not pid or not node or (classes and cls not in classes):
            continue
        found.append(RemoteTarget(node, int(pid), cls, ips.get(node, ""), str(row.get("actor_id", ""))))
    found.sort(key=lambda t: (t.node_ip, t.node_id, t.actor, t.pid))
    return found[:MAX_TARGETS]


def _blank(target: RemoteTarget, method: str) -> StackDump:
    from gkdtop.prockind import role_of

    role = role_of(target.actor, default="actor") if target.actor else "ray-worker"
    where = f"@{target.node_ip or '?'}/{target.node_id[:8]}"
    label = " ".join(p for p in (role, target.actor, where) if p)
    return StackDump(target.pid, role, label, False, actor=target.actor, method=method)


# ---------------------------------------------------------------- 1. the dashboard's traceback endpoint

def profiling_enabled(url: str, timeout: float = 5.0) -> bool | None:
    """What the head says about RAY_DASHBOARD_ENABLE_PROFILING (None: it does not say)."""
    try:
        with urllib.request.urlopen(f"{url}/api/profiling_enabled", timeout=timeout) as resp:
            doc = json.load(resp)
        return bool(((doc or {}).get("data") or {}).get("profilingEnabled"))
    except Exception:
        return None


def dashboard_dump(url: str, target: RemoteTarget, native: bool = False, timeout: float = 20.0) -> StackDump:
    """One actor's stack through the head (the node's agent runs py-spy)."""
    dump = _blank(target, "ray-dashboard")
    query = urllib.parse.urlencode({"pid": target.pid, "node_id": target.node_id, "native": int(native)})
    began = time.monotonic()
    try:
        with urllib.request.urlopen(f"{url}/worker/traceback?{query}", timeout=timeout) as resp:
            text = resp.read(8 << 20).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        body = exc.read(2000).decode(errors="replace").strip()
        if exc.code == 403:
            dump.error = ("the Ray dashboard refuses stack dumps (403): start the head with "
                          "RAY_DASHBOARD_ENABLE_PROFILING=1, or use the gkdtop agent (--ray-agent)")
        elif "not installed" in body:
            dump.error = "py-spy is not on the PATH of that node's Ray agent (pip install py-spy there)"
        else:
            dump.error = f"dashboard answered {exc.code}: {body.splitlines()[0][:160] if body else ''}"
        return dump
    except (urllib.error.URLError, OSError) as exc:
        dump.error = f"no answer from the dashboard ({getattr(exc, 'reason', exc)})"[:200]
        return dump
    finally:
        dump.seconds = round(time.monotonic() - began, 3)
    dump.threads = parse_py_spy_text(text)
    dump.ok = bool(dump.threads)
    if not dump.ok:
        dump.error = f"no threads in the agent's answer: {text.strip()[:160]}"
    return dump


# ---------------------------------------------------------------- 2. the opt-in gkdtop agent actor

AGENT_SCRIPT = r'''
import json, os, sys
args = json.loads(sys.argv[1])
os.environ["RAY_ENABLE_AUTO_CONNECT"] = "0"
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address=args["address"], namespace="gkdtop", log_to_driver=False, logging_level="ERROR")


@ray.remote(num_cpus=0, max_restarts=0)
class GkdtopStackAgent:
    def dump(self, pids, native, timeout):
        import shutil, subprocess, time
        beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
        exe = beside if os.access(beside, os.X_OK) else shutil.which("py-spy")
        out = {}
        for pid in pids:
            if exe is None:
                out[pid] = {"rc": -1, "err": "py-spy not found on this node (next to Ray's Python or on PATH)"}
                continue
            argv = [exe, "dump", "--pid", str(pid), "--json"] + (["--native"] if native else [])
            began = time.monotonic()
            try:
                done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                      env={**os.environ, "RUST_BACKTRACE": "0"})
            except subprocess.TimeoutExpired:
                out[pid] = {"rc": -1, "err": "py-spy timed out after %g s" % timeout}
                continue
            out[pid] = {"rc": done.returncode, "out": done.stdout.decode(errors="replace"),
                        "err": done.stderr.decode(errors="replace")[-2000:], "s": time.monotonic() - began}
        return out


agents, refs, result = [], {}, {}
for node_id, pids in args["targets"].items():
    agent = GkdtopStackAgent.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
    agents.append(agent)
    refs[node_id] = agent.dump.remote(pids, args["native"], args["timeout"])
for node_id, ref in refs.items():
    try:
        result[node_id] = ray.get(ref, timeout=args["wait"])
    except Exception as exc:
        result[node_id] = {"error": ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0][:300]}
for agent in agents:
    try:
        ray.kill(agent)
    except Exception:
        pass
print("@@GKDTOP-AGENT@@" + json.dumps(result), flush=True)
'''


def gcs_address(given: str | None = None) -> str | None:
    """The GCS address the agent connects to: given, RAY_ADDRESS, or this node's current cluster."""
    for value in (given, os.environ.get("RAY_ADDRESS")):
        if value and value != "auto" and not value.startswith(("http://", "https://", "ray://")):
            return value
    try:
        found = (ray_temp_dir() / "ray_current_cluster").read_text().strip()
    except OSError:
        return None
    return found or None


def agent_dumps(address: str, targets: list[RemoteTarget], native: bool = False, timeout: float = 10.0,
                env: dict[str, str] | None = None) -> list[StackDump]:
    """Dump the targets with one temporary gkdtop actor per node (see the module doc)."""
    by_node: dict[str, list[int]] = {}
    for t in targets:
        by_node.setdefault(t.node_id, []).append(t.pid)
    wait = timeout * max(len(p) for p in by_node.values()) + 60 if by_node else 60
    args = {"address": address, "targets": by_node, "native": native, "timeout": timeout, "wait": wait}
    run_env = {**(env or os.environ), "RAY_ENABLE_AUTO_CONNECT": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", AGENT_SCRIPT, json.dumps(args)], capture_output=True, text=True,
                              timeout=wait + 60, env=run_env, stdin=subprocess.DEVNULL)
        mark = done.stdout.rfind(RESULT_MARK)
        if mark < 0:
            tail = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(tail[-1][:300] if tail else f"exit status {done.returncode}")
        result = json.loads(done.stdout[mark + len(RESULT_MARK):])
    except Exception as exc:
        why = f"gkdtop agent failed: {exc}"[:300]
        return [_with_error(_blank(t, "ray-agent"), why) for t in targets]
    seconds = round(time.monotonic() - began, 3)
    dumps = []
    for t in targets:
        dump = _blank(t, "ray-agent")
        node = result.get(t.node_id) or {}
        one = node.get(str(t.pid)) if isinstance(node, dict) else None
        if "error" in node:
            dump.error = f"agent on {t.node_ip or t.node_id[:8]}: {node['error']}"
        elif not one:
            dump.error = "no answer for this PID"
        elif one.get("rc") == 0:
            try:
                dump.threads, dump.ok = parse_py_spy_json(one.get("out", "")), True
            except ValueError as exc:
                dump.error = f"unreadable py-spy output: {exc}"
        else:
            lines = [ln for ln in (one.get("err") or one.get("out") or "").splitlines() if ln.strip()]
            dump.error = ("py-spy failed: " + (lines[0] if lines else f"exit status {one.get('rc')}"))[:200]
        dump.seconds = round(float(one.get("s", seconds)), 3) if one else seconds
        dumps.append(dump)
    return dumps


def _with_error(dump: StackDump, error: str) -> StackDump:
    dump.error = error
    return dump


# ---------------------------------------------------------------- both, as one report


def dump_ray_stacks(address: str | None = None, targets: list[RemoteTarget] | None = None, native: bool = False,
                    timeout: float = 10.0, agent: bool = False, gcs: str | None = None,
                    classes: list[str] | None = None, agent_env: dict[str, str] | None = None) -> StackReport:
    """Every target through the dashboard; with `agent`, the ones it could not dump through gkdtop's agent."""
    start = time.time()
    found, wrong = DashboardFinder(address, timeout=min(timeout, 10.0)).find()
    url = found.url
    if url is None or wrong:
        raise RuntimeError(f"no Ray dashboard found: {wrong} (give --ray-address)" if wrong else
                           "no Ray dashboard found (give --ray-address)")
    chosen = targets if targets is not None else ray_targets(url, timeout=max(timeout, 10.0), classes=classes)
    if chosen and profiling_enabled(url) is False and agent:
        dumps = [_with_error(_blank(t, "ray-dashboard"), "profiling disabled on the head") for t in chosen]
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(chosen)))) as pool:
            dumps = list(pool.map(lambda t: dashboard_dump(url, t, native, timeout + 10), chosen))
    if agent:
        redo = [i for i, d in enumerate(dumps) if not d.ok]
        if redo:
            where = gcs_address(gcs or (address if address and not address.startswith("http") else None))
            if where is None:
                for i in redo:
                    dumps[i].error += "; gkdtop agent: no GCS address (give --ray-address HOST:PORT)"
            else:
                again = agent_dumps(where, [chosen[i] for i in redo], native, timeout, env=agent_env)
                for i, dump in zip(redo, again, strict=True):
                    if dump.ok:
                        dump.note = dumps[i].error
                        dumps[i] = dump
                    else:
                        dumps[i].error += f"; {dump.error}"
    groups = group_stacks(dumps)
    return StackReport(time=start, native=native, dumps=dumps, groups=groups, outliers=outliers(dumps, groups),
                       seconds=round(time.time() - start, 3))
