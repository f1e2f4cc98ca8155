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

from gkdtop.model import RayState

DASHBOARD_LINE_RE = re.compile(rb"Dashboard head http address: (\S+)")
DEFAULT_DASHBOARD_PORT = 8265


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
    name = "ray"

    def __init__(self, address: str | None = None, interval: float = 5.0, timeout: float = 2.0) -> None:
        self.address = address
        self.interval = interval
        self.timeout = timeout

    def collect(self) -> RayState:
        url, where, session = resolve_dashboard(self.address)
        if url is None:
            reason = "no Ray session found on this node" if not where else f"no dashboard in {where}"
            return RayState(status="not connected", reason=reason, address=where, session=session)
        try:
            with urllib.request.urlopen(f"{url}/api/cluster_status", timeout=self.timeout) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as exc:
            return RayState(status="not connected", reason=f"dashboard answered {exc.code}", address=url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            return RayState(status="not connected", reason=f"no answer from {url} ({why})", address=url,
                            session=session)
        return parse_cluster_status(doc, url, session)

    def close(self) -> None:
        pass


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
    pending = []
    for demand in (load.get("resourceDemand") or []) + (load.get("pgDemand") or []):
        if isinstance(demand, (list, tuple)) and demand and isinstance(demand[0], dict):
            pending.append({k: float(v) for k, v in demand[0].items()})
        elif isinstance(demand, dict):
            pending.append({k: float(v) for k, v in demand.items() if isinstance(v, (int, float))})
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
