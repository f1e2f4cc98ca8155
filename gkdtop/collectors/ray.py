"""Ray's one-line status, read from the cluster's own dashboard REST API.

Never imports ray and never calls `ray.init()` (which STARTS a cluster when none is found): it
finds the dashboard of the cluster in use and asks `/api/cluster_status`, the same report
`ray status` prints. Address order: `--ray-address`, then `RAY_ADDRESS`, then the newest local
session under the Ray temp dir. A GCS address finds that cluster's own session by its port (any
temp dir); the dashboard found is checked to be that cluster's before anything it says is shown.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model import GpuProcess, GpuSample, RayActor, RayNode, RayState
from gkdtop.prockind import ray_program

DASHBOARD_LINE_RE = re.compile(rb"Dashboard head http address: (\S+)")
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_GCS_PORT = 6379
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


def split_address(address: str, default_port: int = DEFAULT_GCS_PORT) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `host` -> (host, port); ValueError on a port that is no number."""
    host, sep, port = address.rpartition(":")
    if not sep or (host.startswith("[") is not host.endswith("]")) or ("]" in port):
        return address.strip("[]"), default_port
    return host.strip("[]"), int(port)


def is_local_host(host: str) -> bool:
    """An address of this machine: loopback, unspecified, this host's name, or one of its interfaces."""
    if host in ("", "localhost", "0.0.0.0", "::", "::1") or host.startswith("127."):
        return True
    if host == socket.gethostname():  # not getfqdn(): a DNS lookup that can hang without a network
        return True
    try:
        import psutil

        return any(a.address.split("%", 1)[0] == host for addrs in psutil.net_if_addrs().values() for a in addrs)
    except Exception:
        return False


def _live_ray_daemons() -> list[list[str]]:
    """Command lines of this machine's live gcs_server and raylet binaries (Ray's own, by path)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["name"]):
        if proc.info.get("name") not in ("gcs_server", "raylet"):
            continue
        try:
            argv = proc.cmdline()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if ray_program(argv) is not None:
            found.append(argv)
    return found


def _arg(argv: list[str], *names: str) -> str:
    for arg in argv:
        for name in names:
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return ""


def session_for_gcs_port(port: int, roots: list[Path] | None = None) -> tuple[Path | None, bool]:
    """(the session directory of the local cluster whose GCS listens on `port`, whether its gcs_server runs).

    The live gcs_server's own arguments name its port and session (`--gcs_server_port`, `--log_dir`),
    wherever its temp dir is (RAY_TMPDIR, `ray start --temp-dir`). With none running, the session
    directories say it: Ray writes `gcs_server_port_<node id>` into each; the newest one wins.
    """
    daemons = _live_ray_daemons()
    for argv in daemons:
        if _arg(argv, "--gcs_server_port") == str(port) and (logs := _arg(argv, "--log_dir")):
            session = Path(logs).parent
            if session.is_dir():
                return session, True
    candidates = list(roots) if roots is not None else [ray_temp_dir(), Path("/tmp/ray")]
    for argv in daemons:  # other clusters' temp dirs hold sessions of earlier runs too
        for value in (_arg(argv, "--log_dir"), _arg(argv, "--session_dir")):
            if value and "session_" in value:
                candidates.append(Path(value[: value.index("session_")]))
    best: tuple[float, Path] | None = None
    for root in dict.fromkeys(candidates):
        try:
            files = list(root.glob("session_*/gcs_server_port_*"))
        except OSError:
            continue
        for f in files:
            try:
                if f.read_text().strip() == str(port) and not f.parent.is_symlink():
                    mtime = f.stat().st_mtime
                    if best is None or mtime > best[0]:
                        best = (mtime, f.parent)
            except OSError:
                continue
    return (best[1] if best else None), False


def _listening(host: str, port: int, timeout: float = 1.0) -> bool | None:
    """True: something accepts connections there; False: refused; None: could not tell."""
    try:
        with socket.create_connection((host if host not in ("", "0.0.0.0", "::") else "127.0.0.1", port), timeout):
            return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return None


@dataclass(slots=True)
class Resolved:
    """Where to ask, and what the answer must match to be the cluster asked for."""

    url: str | None
    where: str  # the address as given, or the session found
    session: str = ""  # the dashboard must serve this session (local clusters)
    gcs_port: int | None = None  # ... or report this GCS port (a cluster whose session is not here)
    error: str = ""  # why there is no url


def resolve(address: str | None) -> Resolved:
    """The dashboard of the cluster `address` names (--ray-address, else RAY_ADDRESS, else the newest session).

    A GCS address (`host:port`) on this machine finds that cluster's own session by its port, in
    whatever temp dir it lives; a remote one that host's dashboard (port 8265). Never another cluster
    that happens to be newer, or to own the default dashboard port.
    """
    given = address or os.environ.get("RAY_ADDRESS") or ""
    if given and given != "auto":
        if given.startswith(("http://", "https://")):
            return Resolved(given.rstrip("/"), given)
        if given.startswith("ray://"):
            host = given[len("ray://") :].rsplit(":", 1)[0].strip("[]")
            return Resolved(f"http://{_url_host(host)}:{DEFAULT_DASHBOARD_PORT}", given)
        try:
            host, port = split_address(given)
        except ValueError:
            return Resolved(None, given, error=f"{given!r} is not a GCS address (host:port)")
        if is_local_host(host):
            session, _ = session_for_gcs_port(port)
            if session is not None:
                found = dashboard_of_session(session)
                if not found:
                    return Resolved(None, given, session.name, port,
                                    f"no dashboard in {session} (the cluster at {given})")
                return Resolved(f"http://{_reachable(found)}", given, session.name, port)
            if _listening(host, port) is False:
                return Resolved(None, given, gcs_port=port, error=f"no Ray cluster at {given}: nothing listens there")
        return Resolved(f"http://{_url_host(host)}:{DEFAULT_DASHBOARD_PORT}", given, gcs_port=port)
    session = latest_session()
    if session is None:
        return Resolved(None, "", error="no Ray session found on this node")
    found = dashboard_of_session(session)
    if not found:
        return Resolved(None, str(session), session.name, error=f"no dashboard in {session}")
    return Resolved(f"http://{_reachable(found)}", str(session), session.name)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _reachable(hostport: str) -> str:
    """A dashboard that announced an unspecified address is asked on loopback."""
    host, _, port = hostport.rpartition(":")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "::") else hostport


def resolve_dashboard(address: str | None) -> tuple[str | None, str, str]:
    """(dashboard url or None, the address as given or found, session name) - see `resolve`."""
    found = resolve(address)
    return found.url, found.where, found.session


def check_dashboard(found: Resolved, timeout: float) -> str:
    """Why the dashboard at found.url is not the cluster asked for ("" when it is, or cannot tell).

    A local cluster's dashboard must serve its session (`/api/version`); another host's must run its
    GCS on the port asked (the head node's gcs_server command line, as the dashboard reports it).
    """
    url = found.url
    if url is None:
        return found.error
    if found.session:
        doc = _get_json(f"{url}/api/version", timeout)
        served = str((doc or {}).get("session_name") or "") if isinstance(doc, dict) else ""
        if served and served != found.session:
            return (f"the dashboard at {url} serves {served}, not {found.session}"
                    + (f" (the cluster at {found.where})" if found.gcs_port else ""))
        return ""
    if found.gcs_port is None:
        return ""
    port = _head_gcs_port(url, timeout)
    if port is not None and port != found.gcs_port:
        return f"the dashboard at {url} belongs to the cluster whose GCS is on port {port}, not {found.where}"
    return ""


class DashboardFinder:
    """`resolve` + `check_dashboard`. A dashboard found and checked is kept for `keep` seconds, or until
    the caller says it failed (`forget`): a GCS address costs a scan of the process list to resolve."""

    def __init__(self, address: str | None, timeout: float, keep: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self.keep = keep
        self._good: Resolved | None = None
        self._until = 0.0

    def find(self) -> tuple[Resolved, str]:
        """(where to ask, why not: "" when found.url is the cluster asked for)."""
        now = time.monotonic()
        if self._good is not None and now < self._until:
            return self._good, ""
        found = resolve(self.address)
        if found.url is None:
            return found, found.error
        good = self._good
        if good is None or (good.url, good.session, good.gcs_port) != (found.url, found.session, found.gcs_port):
            try:
                wrong = check_dashboard(found, self.timeout)
            except urllib.error.HTTPError:
                wrong = ""  # a dashboard too old to say: taken as it is
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self._good = None
                return found, f"no answer from {found.url} ({getattr(exc, 'reason', exc)})"
            if wrong:
                self._good = None
                return found, wrong
        # Only a GCS address is costly to resolve; the newest session is looked at again every time.
        self._good, self._until = found, now + (self.keep if found.gcs_port is not None else 0.0)
        return found, ""

    def forget(self) -> None:
        self._good = None


def _head_gcs_port(url: str, timeout: float) -> int | None:
    """The GCS port of the dashboard's cluster, from its head node's gcs_server command line; None: not said."""
    try:
        rows, _ = state_list(url, "nodes", timeout, query="limit=1&filter_keys=is_head_node"
                              "&filter_predicates=%3D&filter_values=True")
        if not rows:
            return None
        doc = _get_json(f"{url}/nodes/{rows[0].get('node_id', '')}", timeout)
        gcs = (((doc or {}).get("data") or {}).get("detail") or {}).get("gcs") or {}  # type: ignore[union-attr]
        value = _arg([str(a) for a in gcs.get("cmdline") or []], "--gcs_server_port")
        return int(value) if value.isdigit() else None
    except urllib.error.HTTPError:
        return None


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
        self._finder = DashboardFinder(address, timeout)

    def collect(self) -> RayState:
        found, wrong = self._finder.find()
        url, session = found.url, found.session
        if url is None or wrong:
            self._details = {}
            return RayState(status="not connected", reason=wrong, address=found.where, session=session)
        try:
            doc = _get_json(f"{url}/api/cluster_status", self.timeout)
        except urllib.error.HTTPError as exc:
            self._finder.forget()
            return RayState(status="not connected", reason=f"dashboard answered {exc.code}", address=url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            self._details = {}
            self._finder.forget()
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
            rows, total = state_list(url, "actors", self.details_timeout, detail=True)
            details["actors"] = [parse_actor(r) for r in rows]
            details["actors_total"] = total
        except Exception as exc:
            errors.append(f"actors: {_why(exc)}")
        try:
            rows, _ = state_list(url, "nodes", self.details_timeout)
            nodes = [parse_node(r) for r in rows]
            _attach_node_gpus(url, nodes, self.timeout)
            details["nodes"] = nodes
        except Exception as exc:
            errors.append(f"nodes: {_why(exc)}")
        try:
            rows, _ = state_list(url, "placement_groups", self.details_timeout)
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
    import urllib.request  # here, not at the top: with http.client it costs the first frame ~10 ms

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def state_list(url: str, what: str, timeout: float, detail: bool = False,
                query: str = "") -> tuple[list[dict], int]:
    """One list from the state API (the REST side of `ray.util.state`), capped at its maximum."""
    query = query or f"limit={MAX_ACTORS}" + ("&detail=1" if detail else "")
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


SPEC: CollectorSpec[RayState] = CollectorSpec(
    result=RayState,
    write=lambda store, state: store.write_ray(state),
    build=lambda wiring, interval: RayCollector(wiring.ray_address, interval=interval),
)
