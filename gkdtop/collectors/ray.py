"""Ray's one-line status, read from the cluster's own dashboard REST API.

Never imports ray and never calls `ray.init()` (which STARTS a cluster when none is found): it
finds the dashboard of the cluster in use and asks `/api/cluster_status`, the same report
`ray status` prints. Address order: `--ray-address`, then `RAY_ADDRESS`, then the newest local
session under the Ray temp dir.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from gkdtop.model import GpuProcess, GpuSample, RayActor, RayNode, RayState

DASHBOARD_LINE_RE = re.compile(rb"Dashboard head http address: (\S+)")
DEFAULT_DASHBOARD_PORT = 8265
MAX_ACTORS = 10_000  # the state API's own maximum


def ray_temp_dir() -> Path:
    return Path(os.environ.get("RAY_TMPDIR") or "/tmp") / "ray"


def latest_session(temp_dir: Path | None = None) -> Path | None:
    link = (temp_dir or ray_temp_dir()) / "session_latest"
    try:
        return link.resolve(strict=True)
    except OSError:
        return None


def dashboard_of_session(session: Path) -> str | None:
    """The dashboard's host:port, as the session's dashboard log announced it."""
    try:
        with open(session / "logs" / "dashboard.log", "rb") as fh:
            head = fh.read(256 * 1024)
    except OSError:
        return None
    match = DASHBOARD_LINE_RE.search(head)
    return match.group(1).decode() if match else None


def resolve_dashboard(address: str | None) -> tuple[str | None, str, str]:
    """(dashboard url or None, the address as given or found, session name) - or why not."""
    given = address or os.environ.get("RAY_ADDRESS") or ""
    if given and given != "auto":
        if given.startswith(("http://", "https://")):
            return given.rstrip("/"), given, ""
        if given.startswith("ray://"):
            host = given[len("ray://") :].split(":", 1)[0]
            return f"http://{host}:{DEFAULT_DASHBOARD_PORT}", given, ""
        host = given.split(":", 1)[0]
        # A GCS address: the local session of that cluster knows its dashboard port.
        session = latest_session()
        if session is not None:
            found = dashboard_of_session(session)
            if found:
                return f"http://{found}", given, session.name
        return f"http://{host}:{DEFAULT_DASHBOARD_PORT}", given, ""
    session = latest_session()
    if session is None:
        return None, "", ""
    found = dashboard_of_session(session)
    if not found:
        return None, str(session), session.name
    return f"http://{found}", str(session), session.name


class RayCollector:
    """Status every poll; actors, nodes, placement groups and jobs every `details_every` polls.

    The lists come from the state API, which costs seconds on a big cluster: they are fetched in
    this collector's own thread, so the UI never waits, and kept between their polls.
    """

    name = "ray"

    def __init__(self, address: str | None = None, interval: float = 5.0, timeout: float = 2.0,
                 details_every: int = 2, details_timeout: float = 10.0) -> None:
        self.address = address
        self.interval = interval
        self.timeout = timeout
        self.details_every = details_every
        self.details_timeout = details_timeout
        self._polls = 0
        self._details: dict[str, object] = {}
        self._details_for = ""

    def collect(self) -> RayState:
        url, where, session = resolve_dashboard(self.address)
        if url is None:
            reason = "no Ray session found on this node" if not where else f"no dashboard in {where}"
            return RayState(status="not connected", reason=reason, address=where, session=session)
        try:
            doc = _get_json(f"{url}/api/cluster_status", self.timeout)
        except urllib.error.HTTPError as exc:
            return RayState(status="not connected", reason=f"dashboard answered {exc.code}", address=url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            self._details = {}
            return RayState(status="not connected", reason=f"no answer from {url} ({why})", address=url,
                            session=session)
        state = parse_cluster_status(doc, url, session)
        if self._details_for != url:
            self._details, self._details_for, self._polls = {}, url, 0
        if self._polls % self.details_every == 0:
            self._details = self._fetch_details(url)
        self._polls += 1
        for key, value in self._details.items():
            setattr(state, key, value)
        return state

    def _fetch_details(self, url: str) -> dict[str, object]:
        details: dict[str, object] = {}
        errors = []
        try:
            rows, total = _state_list(url, "actors", self.details_timeout, detail=True)
            details["actors"] = [parse_actor(r) for r in rows]
            details["actors_total"] = total
        except Exception as exc:
            errors.append(f"actors: {_why(exc)}")
        try:
            rows, _ = _state_list(url, "nodes", self.details_timeout)
            nodes = [parse_node(r) for r in rows]
            _attach_node_gpus(url, nodes, self.timeout)
            details["nodes"] = nodes
        except Exception as exc:
            errors.append(f"nodes: {_why(exc)}")
        try:
            rows, _ = _state_list(url, "placement_groups", self.details_timeout)
            details["placement_groups"] = [
                {"id": str(r.get("placement_group_id", "")), "name": str(r.get("name") or ""),
                 "state": str(r.get("state", ""))} for r in rows
            ]
        except Exception as exc:
            errors.append(f"placement groups: {_why(exc)}")
        try:
            jobs = _get_json(f"{url}/api/jobs/", self.details_timeout)
            details["jobs"] = [
                {"id": str(j.get("submission_id") or j.get("job_id") or ""), "status": str(j.get("status", "")),
                 "entrypoint": _clip(str(j.get("entrypoint", "")), 200)}
                for j in (jobs if isinstance(jobs, list) else [])
            ]
        except Exception as exc:
            errors.append(f"jobs: {_why(exc)}")
        details["details_error"] = "; ".join(errors)
        return details

    def close(self) -> None:
        pass


def _clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut between words: half a token would reach the bundle unrecognised."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    return (head.rsplit(" ", 1)[0] if " " in head else "") + " …"


def _why(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _get_json(url: str, timeout: float) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def _state_list(url: str, what: str, timeout: float, detail: bool = False) -> tuple[list[dict], int]:
    """One list from the state API (the REST side of `ray.util.state`), capped at its maximum."""
    query = f"limit={MAX_ACTORS}" + ("&detail=1" if detail else "")
    doc = _get_json(f"{url}/api/v0/{what}?{query}", timeout)
    data = (doc or {}).get("data") or {}  # type: ignore[union-attr]
    result = data.get("result") or {}
    rows = result.get("result") if isinstance(result, dict) else result
    total = result.get("total", len(rows or [])) if isinstance(result, dict) else len(rows or [])
    return [r for r in (rows or []) if isinstance(r, dict)], int(total or 0)


def parse_actor(row: dict) -> RayActor:
    cause = row.get("death_cause") or ""
    if isinstance(cause, dict):
        context = next(iter(cause.values()), {}) if cause else {}
        cause = (context.get("error_message") or context.get("errorMessage") or json.dumps(cause)) \
            if isinstance(context, dict) else str(cause)
    pid = row.get("pid")
    return RayActor(
        actor_id=str(row.get("actor_id", "")),
        class_name=str(row.get("class_name", "") or "?"),
        state=str(row.get("state", "") or "?"),
        pid=int(pid) if pid else None,
        node_id=str(row.get("node_id") or ""),
        name=str(row.get("name") or ""),
        required_resources={k: float(v) for k, v in (row.get("required_resources") or {}).items()
                            if isinstance(v, (int, float))},
        death_cause=str(cause).strip().splitlines()[0][:300] if cause else "",
    )


def parse_node(row: dict) -> RayNode:
    return RayNode(
        node_id=str(row.get("node_id", "")),
        ip=str(row.get("node_ip", "") or row.get("node_name", "")),
        is_head=bool(row.get("is_head_node")),
        state=str(row.get("state", "") or "?"),
        resources_total={k: float(v) for k, v in (row.get("resources_total") or {}).items()
                         if not k.startswith("node:") and isinstance(v, (int, float))},
    )


def _attach_node_gpus(url: str, nodes: list[RayNode], timeout: float) -> None:
    """Per-node GPUs as each node's Ray agent reports them (it reads NVML there): multi-node GPUs."""
    try:
        doc = _get_json(f"{url}/nodes?view=summary", timeout)
    except Exception:
        return
    by_id = {n.node_id: n for n in nodes}
    for summary in ((doc or {}).get("data") or {}).get("summary") or []:  # type: ignore[union-attr]
        node = by_id.get(((summary.get("raylet") or {}).get("nodeId")) or "")
        if node is None:
            continue
        for i, gpu in enumerate(summary.get("gpus") or []):
            mib = 1024 * 1024
            used, total = gpu.get("memoryUsed"), gpu.get("memoryTotal")  # MiB
            util, power, temp = gpu.get("utilizationGpu"), gpu.get("powerMw"), gpu.get("temperatureC")
            node.gpus.append(GpuSample(
                index=int(gpu.get("index", i)), name=str(gpu.get("name", "GPU")), uuid=str(gpu.get("uuid", "")),
                # Ray reports -1 when NVML could not say.
                utilization=float(util) if isinstance(util, (int, float)) and util >= 0 else None,
                memory_used=int(used * mib) if used is not None else None,
                memory_total=int(total * mib) if total is not None else None,
                temperature=float(temp) if isinstance(temp, (int, float)) else None,
                power=power / 1000 if isinstance(power, (int, float)) else None, power_limit=None,
                processes=[GpuProcess(int(p["pid"]), int(p["gpuMemoryUsage"]) * mib
                                      if p.get("gpuMemoryUsage") is not None else None)
                           for p in gpu.get("processesPids") or [] if isinstance(p, dict) and p.get("pid")],
            ))


def _numeric(node: dict) -> dict[str, float]:
    return {str(k): float(v) for k, v in node.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _collect_demands(node: object, out: list[dict[str, float]], depth: int = 0) -> None:
    """Resource shapes from a demand entry, never raising on an unknown shape.

    Tasks and actors come as `[{shape}, count]`; a placement group as `[{"bundles": [[{shape}, n], ...],
    "strategy": ...}, count]`, whose bundles together are one demand (8 x {GPU: 1} -> {GPU: 8}), the
    way Ray's own "cannot be scheduled" line states it.
    """
    if isinstance(node, dict):
        if isinstance(node.get("bundles"), list):
            total: dict[str, float] = {}
            for bundle in node["bundles"][:1000]:
                shape = bundle[0] if isinstance(bundle, (list, tuple)) and bundle else bundle
                count = bundle[1] if isinstance(bundle, (list, tuple)) and len(bundle) > 1 else 1
                if isinstance(shape, dict) and isinstance(count, int):
                    for key, value in _numeric(shape).items():
                        total[key] = total.get(key, 0.0) + value * count
            if total:
                out.append(total)
        elif shape := _numeric(node):
            out.append(shape)
    elif isinstance(node, (list, tuple)) and depth < 4:
        if node and isinstance(node[0], dict):
            _collect_demands(node[0], out, depth + 1)  # [shape, count]: the shape once
        else:
            for item in node[:100]:
                _collect_demands(item, out, depth + 1)


def parse_cluster_status(doc: dict, url: str, session: str) -> RayState:
    """Tolerant of missing fields: older Ray versions report less, never crash on that."""
    status = ((doc or {}).get("data") or {}).get("clusterStatus") or {}
    load = status.get("loadMetricsReport") or {}
    usage = load.get("usage") or {}
    total, available = {}, {}
    for key, pair in usage.items():
        if key.startswith("node:") or not isinstance(pair, (list, tuple)) or len(pair) != 2:
            continue
        name = {"objectStoreMemory": "object_store_memory"}.get(key, key)
        used, tot = float(pair[0]), float(pair[1])
        total[name], available[name] = tot, tot - used
    pending: list[dict[str, float]] = []
    for demand in (load.get("resourceDemand") or []) + (load.get("pgDemand") or []):
        _collect_demands(demand, pending)
    report = status.get("autoscalerReport") or {}
    alive = sum((report.get("activeNodes") or {}).values()) + sum((report.get("idleNodes") or {}).values())
    dead = len(report.get("failedNodes") or [])
    return RayState(
        status="connected",
        address=url,
        session=session,
        resources_total=total,
        resources_available=available,
        pending=pending,
        nodes_alive=alive,
        nodes_dead=dead,
    )


def ray_line(state: RayState) -> str:
    """The one-line summary the dashboard shows."""
    if state.status != "connected":
        return f"Ray: {state.status}" + (f": {state.reason}" if state.reason else "")
    parts = [f"Ray: {state.nodes_alive} node{'s' if state.nodes_alive != 1 else ''}"]
    if state.nodes_dead:
        parts.append(f"{state.nodes_dead} dead")
    for key in ("CPU", "GPU"):
        if key in state.resources_total:
            tot = state.resources_total[key]
            used = tot - state.resources_available.get(key, tot)
            parts.append(f"{key} {used:g}/{tot:g}")
    if state.pending:
        demands = ", ".join(str({k: v for k, v in d.items()}) for d in state.pending[:2])
        parts.append(f"PENDING {len(state.pending)}: {demands} cannot be scheduled yet")
    return " | ".join(parts)
