"""Ray's task table, live, from the dashboard's state API: what every actor of the job is running now.

Each phase of an RL step on Ray is a method call on a worker group, i.e. a task with a name, a
state, a start time, a pid and a node: `/api/v0/tasks` lists them for the whole cluster, so the phase
and the straggler come from Ray itself, on every node, with no log line and no ptrace. Never imports
ray and never starts a cluster (collectors/ray.py finds the dashboard the same way).

Bounded by construction, every `interval` seconds:
- the RUNNING tasks, filtered by the GCS itself, at most MAX_RUNNING rows (actor tasks first);
- the alive actors (names, reprs) when a task names one not known yet, else every ACTORS_EVERY polls;
- for a method some actors of a class are still in while the others are not: each peer's return from
  the same call. A peer seen running at an earlier poll is confirmed by its task id (one row); only
  peers that came and went between two polls need the method's finished list, once per such round
  and at most 1% of the time (LOOKUP_SHARE: a method with 10,000 finished calls takes seconds to list);
- the FAILED tasks every FAILED_EVERY polls, newest kept.
With nothing running while actors live, it asks once in a while whether the cluster records task
events at all (`RAY_task_events_report_interval_ms=0` turns them off), and says so in one line
(after two looks EVENTS_CONFIRM apart: `events_confirm`).
The GCS scans its whole table for a state filter, so a big table spaces the polls out (`idle`): its
requests keep the dashboard busy at most 2% of the time (SERVER_SHARE: `server_share`). bench/bench_ray_tasks.py
measures a poll with 10,000 tasks in the table, here and on the cluster.
"""

from __future__ import annotations

import json
import time
import urllib.error
from dataclasses import dataclass
from typing import Any

from gkdtop.analysis.stragglers import ROUND_WINDOW, rank_of
from gkdtop.collectors.ray import DashboardFinder, _why
from gkdtop.collectors.registry import CollectorSpec
from gkdtop.model.tasks import RUNNING, RayTask, RayTasksState

MAX_RUNNING = 1000  # running tasks listed per poll (the table and the phase need the actor tasks)
MAX_ROWS = 10_000  # the state API's own maximum
MAX_FAILED = 20  # failed tasks kept, newest first
ACTORS_EVERY = 10  # polls between two reads of the actor table when nothing new shows up
FAILED_EVERY = 10  # polls between two reads of the failed tasks (the GCS scans its table for them)
EVENTS_CHECK = 30.0  # seconds between two looks at whether the cluster records task events
EVENTS_CONFIRM = 5.0  # ... and before a look that found none is believed (workers report a moment late)
MAX_ROUND_QUERIES = 4  # rounds looked up per poll: a job with many split calls costs no more
MAX_CONFIRM = 16  # vanished tasks confirmed by id per poll
MAX_NAMES = 8  # distinct task names of one method looked up (actors with a __repr__ each have one)
REQUERY = 300.0  # seconds after which a round's lookup is repeated though its running members are the same
SERVER_SHARE = 0.02  # share of the time the polls may keep the dashboard busy: the next waits its requests' time / this
LOOKUP_SHARE = 0.01  # ... and the lookups of split rounds, apart: the next waits at least its time / this
NO_EVENTS = ("the cluster records no task events (RAY_task_events_report_interval_ms=0?): the task view "
             "needs them (Ray >= 2.9 records them by default); the rest of gkdtop works without")


class TasksUnsupported(Exception):
    """The dashboard has no task list (404: Ray older than the state API's task events)."""


class StateApiError(Exception):
    """The dashboard answered, but its state API said no (`result: false`: the GCS timed out, a bad filter)."""


@dataclass(slots=True)
class ActorRow:
    class_name: str
    name: str
    repr_name: str
    pid: int | None
    node_id: str


@dataclass(slots=True)
class _Lookup:
    """One round's returned peers, as last looked up."""

    key: tuple[str, ...]  # the round's running task ids then
    at: float
    tasks: list[RayTask]


def _ms(value: Any) -> float | None:
    return float(value) / 1000.0 if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
        else None


def error_line(error_type: str, message: str) -> str:
    """The one line that says what failed: the exception as Python printed it last for a task that
    raised (`ValueError: bad shard 7`), else Ray's own first line."""
    lines = [line.rstrip() for line in (message or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if error_type == "TASK_EXECUTION_EXCEPTION":
        for line in reversed(lines):
            if not line[0].isspace() and not line.startswith(("Traceback", "User exception", "ray::", "^")):
                return line[:300]
    return lines[0][:300]


class RayTasksCollector:
    """The task table every `interval` seconds (see the module's docstring for what each poll asks)."""

    name = "ray_tasks"

    def __init__(self, address: str | None = None, interval: float = 3.0, timeout: float = 5.0,
                 min_age: float | None = None, max_running: int = MAX_RUNNING,
                 failed_every: int = FAILED_EVERY, events_confirm: float = EVENTS_CONFIRM,
                 server_share: float = SERVER_SHARE) -> None:
        self.address = address
        self.interval = interval
        self.timeout = timeout
        self.min_age = interval if min_age is None else min_age  # a split round looked up once this old
        self.max_running = max_running
        self.failed_every = failed_every
        self.events_confirm = events_confirm  # seconds between two looks that found no task events, to believe it
        self.server_share = server_share  # share of the dashboard's time the polls may take (spaces them out)
        self.polls = 0  # tests wait on polls, not on time
        self.queries = 0  # requests this collector made (the bench divides by polls)
        self._finder = DashboardFinder(address, timeout)
        self._url = ""
        self._actors: dict[str, ActorRow] = {}
        self._actors_at = -ACTORS_EVERY
        self._nodes: dict[str, str] = {}
        self._nodes_at = -ACTORS_EVERY
        self._seen: dict[str, RayTask] = {}  # running at the last poll, by task id
        self._gone: dict[str, RayTask] = {}  # seen running, then not: returned or failed (confirmed by id)
        self._lookups: dict[tuple[str, str], _Lookup] = {}
        self._lookup_after = 0.0  # epoch seconds: no round is looked up before (LOOKUP_SHARE)
        self._spent = 0.0  # seconds this poll's requests took (the dashboard's and the GCS's work, mostly)
        self._next_at = 0.0  # monotonic: no poll before (SERVER_SHARE); the monitor's loop dozes till then
        # Which actors run a method, once it was looked up: a class's actors need not all (verl's split
        # placement names both pools' workers WorkerDict; only one pool updates the actor).
        self._runs: dict[tuple[str, str], set[str]] = {}
        self._failed: list[RayTask] = []
        self._failed_total = 0
        self._failed_at = -failed_every
        self._events: tuple[float, bool] | None = None  # (when looked, whether task events are recorded)
        self._events_doubted: float | None = None  # when a look first found none

    # --- one poll --------------------------------------------------------------------------------

    def collect(self) -> RayTasksState:
        began, self._spent = time.monotonic(), 0.0
        try:
            return self._poll()
        finally:
            self.polls += 1
            # The GCS scans its whole table for a state filter (~60 ms of the cluster's CPU with 10,000 tasks:
            # bench/bench_ray_tasks.py): a big table spaces the polls out (SERVER_SHARE of the dashboard's time).
            self._next_at = began + self._spent / self.server_share

    def idle(self) -> float:
        """Seconds before the next poll may ask (the monitor's loop dozes through them); 0: due."""
        return max(0.0, self._next_at - time.monotonic())

    def _poll(self) -> RayTasksState:
        found, wrong = self._finder.find()
        url = found.url
        if url is None or wrong:
            self._reset("")
            return RayTasksState(status="not connected", reason=wrong, address=found.where)
        if url != self._url:
            self._reset(url)
        now = time.time()
        try:
            running, total = self._running(url)
            self._refresh_tables(url, running)
            tasks = [self._task(r) for r in running]
            finished = self._returned(url, tasks, now)
            if self.polls - self._failed_at >= self.failed_every:
                self._failed_at = self.polls
                rows, self._failed_total = self._list(url, [("state", "FAILED")], detail=True)
                failed = [self._task(r) for r in rows]
                self._failed = sorted(failed, key=lambda t: t.end or 0.0, reverse=True)[:MAX_FAILED]
            if not tasks and self._actors and not self._records_events(url, now):
                return RayTasksState(status="no task events", reason=NO_EVENTS, address=url, failed=self._failed,
                                     failed_total=self._failed_total, polled=now)
        except TasksUnsupported as exc:
            return RayTasksState(status="unsupported", reason=str(exc), address=url, polled=now)
        except urllib.error.HTTPError as exc:
            self._finder.forget()
            return RayTasksState(status="error", reason=f"the dashboard answered {exc.code}: {_body(exc)}",
                                 address=url, polled=now)
        except StateApiError as exc:
            return RayTasksState(status="error", reason=str(exc), address=url, polled=now)
        except json.JSONDecodeError as exc:
            return RayTasksState(status="error", reason=f"the dashboard's answer is not JSON ({exc.msg})",
                                 address=url, polled=now)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._finder.forget()
            return RayTasksState(status="not connected", reason=f"no answer from {url} ({_why(exc)})", address=url,
                                 polled=now)
        self._seen = {t.task_id: t for t in tasks}
        tasks.sort(key=lambda t: (t.start or now, t.func))
        return RayTasksState(status="connected", address=url, running=tasks, running_total=total, finished=finished,
                             failed=self._failed, failed_total=self._failed_total, polled=now)

    def close(self) -> None:
        pass

    def _reset(self, url: str) -> None:
        """Another dashboard (or none): nothing learnt from the last one holds."""
        self._url = url
        self._actors, self._nodes, self._seen, self._gone, self._lookups, self._runs = {}, {}, {}, {}, {}, {}
        self._actors_at = self._nodes_at = -ACTORS_EVERY
        self._failed, self._failed_total, self._failed_at = [], 0, self.polls - self.failed_every
        self._events, self._events_doubted = None, None
        self._lookup_after = 0.0

    # --- requests --------------------------------------------------------------------------------

    def _list(self, url: str, filters: list[tuple[str, str]], detail: bool = False, limit: int = MAX_ROWS,
              what: str = "tasks") -> tuple[list[dict[str, Any]], int]:
        """One list from the state API, filtered server-side (`=` on each key); (rows, the cluster's total)."""
        import urllib.parse

        query: list[tuple[str, str]] = [("limit", str(limit)), ("timeout", str(max(1, int(self.timeout))))]
        if detail:
            query.append(("detail", "1"))
        for key, value in filters:
            query += [("filter_keys", key), ("filter_predicates", "="), ("filter_values", value)]
        self.queries += 1
        began = time.monotonic()
        try:
            doc = _get_json(f"{url}/api/v0/{what}?{urllib.parse.urlencode(query)}", self.timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise TasksUnsupported(f"the dashboard at {url} has no /api/v0/{what} (404): the task view needs "
                                       "Ray >= 2.9 and its dashboard") from None
            raise
        finally:
            self._spent += time.monotonic() - began
        if not isinstance(doc, dict):
            raise StateApiError(f"the dashboard's /api/v0/{what} answered {type(doc).__name__}, not an object")
        if doc.get("result") is False:
            msg = (str(doc.get("msg") or "").strip().splitlines() or ["no reason given"])[0][:200]
            raise StateApiError(f"the state API said: {msg}")
        result = (doc.get("data") or {}).get("result") or {}
        rows = result.get("result") if isinstance(result, dict) else result
        rows = [r for r in (rows or []) if isinstance(r, dict)]
        total = result.get("total", len(rows)) if isinstance(result, dict) else len(rows)
        return rows, int(total or 0)

    def _running(self, url: str) -> tuple[list[dict[str, Any]], int]:
        """The running tasks; past the cap, the actor tasks (the phases) before plain ones."""
        rows, total = self._list(url, [("state", RUNNING)], detail=True, limit=self.max_running)
        if total > len(rows):
            rows, _ = self._list(url, [("state", RUNNING), ("type", "ACTOR_TASK")], detail=True,
                                 limit=self.max_running)
        return rows, total

    def _refresh_tables(self, url: str, running: list[dict[str, Any]]) -> None:
        """The actor and node tables, read again when a task names one not known (at most every other
        poll) or every ACTORS_EVERY polls."""
        since = self.polls - self._actors_at
        unknown = any(r.get("actor_id") and r["actor_id"] not in self._actors for r in running)
        if since >= ACTORS_EVERY or (unknown and since >= 2):
            self._actors_at = self.polls
            rows, _ = self._list(url, [("state", "ALIVE")], detail=True, what="actors")
            self._actors = {str(r.get("actor_id")): ActorRow(
                class_name=str(r.get("class_name") or ""), name=str(r.get("name") or ""),
                repr_name=str(r.get("repr_name") or ""), pid=int(r["pid"]) if r.get("pid") else None,
                node_id=str(r.get("node_id") or "")) for r in rows if r.get("actor_id")}
        since = self.polls - self._nodes_at
        nodes = {str(r.get("node_id")) for r in running if r.get("node_id")}
        nodes |= {a.node_id for a in self._actors.values() if a.node_id}
        if since >= ACTORS_EVERY or (not nodes <= self._nodes.keys() and since >= 2):
            self._nodes_at = self.polls
            rows, _ = self._list(url, [], what="nodes")
            self._nodes = {str(r.get("node_id")): str(r.get("node_ip") or "") for r in rows if r.get("node_id")}

    def _task(self, row: dict[str, Any]) -> RayTask:
        actor_id = str(row.get("actor_id") or "")
        actor = self._actors.get(actor_id)
        node_id = str(row.get("node_id") or (actor.node_id if actor else ""))
        pid = row.get("worker_pid") or (actor.pid if actor else None)
        error_type = str(row.get("error_type") or "")
        return RayTask(
            task_id=str(row.get("task_id") or ""), func=str(row.get("func_or_class_name") or row.get("name") or "?"),
            state=str(row.get("state") or "?"), name=str(row.get("name") or ""), actor_id=actor_id,
            actor_name=actor.name if actor else "", rank=rank_of(actor.name) if actor else None,
            pid=int(pid) if pid else None, node_id=node_id, node_ip=self._nodes.get(node_id, ""),
            parent_task_id=str(row.get("parent_task_id") or ""), created=_ms(row.get("creation_time_ms")),
            start=_ms(row.get("start_time_ms")), end=_ms(row.get("end_time_ms")), error_type=error_type,
            error=error_line(error_type, str(row.get("error_message") or "")))

    # --- the rounds a straggler check needs -------------------------------------------------------

    def _returned(self, url: str, tasks: list[RayTask], now: float) -> list[RayTask]:
        """Each peer's return from a call some members of a class are still in (analysis/stragglers.py
        judges them). Peers seen running before are confirmed by task id; a round with peers that came
        and went unseen is looked up by the method's finished list, once while its members stay the same."""
        running_ids = {t.task_id for t in tasks}
        for task_id, task in self._seen.items():
            if task_id not in running_ids:
                self._gone[task_id] = task
        by_method: dict[tuple[str, str], list[RayTask]] = {}
        for task in tasks:
            if task.actor_id:
                by_method.setdefault((task.class_name, task.method), []).append(task)
        alive: dict[str, list[str]] = {}
        for actor_id, actor in self._actors.items():
            alive.setdefault(actor.class_name, []).append(actor_id)
        out: list[RayTask] = []
        asked = confirmed = 0
        keep_gone: dict[str, RayTask] = {}
        for (cls, method), members in by_method.items():
            busy = {t.actor_id for t in members}
            runs = self._runs.get((cls, method))
            if runs is not None:
                runs |= busy
            peers = [a for a in alive.get(cls, []) if a not in busy and (runs is None or a in runs)]
            if not peers:
                continue
            window = _window(members)
            gone = [t for t in self._gone.values() if (t.class_name, t.method) == (cls, method)
                    and t.actor_id in peers and _within(t, window)]
            keep_gone.update((t.task_id, t) for t in gone)
            seen_before = any(t.task_id in self._seen for t in members)
            old = max((t.running_for(now) or 0.0) for t in members) >= self.min_age
            if not (seen_before or old):
                continue
            if {t.actor_id for t in gone} >= set(peers):  # every peer was seen in this call: confirm by id
                for task in gone:
                    if task.end is None and confirmed < MAX_CONFIRM:
                        confirmed += 1
                        rows, _ = self._list(url, [("task_id", task.task_id)], detail=True)
                        final = [self._task(r) for r in rows if r.get("state") != RUNNING]
                        if final:
                            keep_gone[task.task_id] = max(final, key=lambda t: t.end or 0.0)
                out += [keep_gone[t.task_id] for t in gone if keep_gone[t.task_id].state == "FINISHED"]
                continue
            key = tuple(sorted(t.task_id for t in members))
            held = self._lookups.get((cls, method))
            if held is None or held.key != key or now - held.at > REQUERY:
                if asked >= MAX_ROUND_QUERIES or now < self._lookup_after:
                    continue
                asked += 1
                began, spent = time.monotonic(), self._spent
                found, ran = self._finished(url, cls, method, peers)
                held = self._lookups[(cls, method)] = _Lookup(key, now, found)
                if len(self._runs) < 1000:
                    self._runs[(cls, method)] = ran | busy
                # A method called every step for hours has up to 10,000 finished calls listed: such a lookup
                # takes seconds (bench/bench_ray_tasks.py), so the next one waits its turn. Not the polls': a
                # lookup is once per split round.
                self._lookup_after = now + (time.monotonic() - began) / LOOKUP_SHARE
                self._spent = spent
            out += held.tasks
        self._gone = keep_gone
        live = set(by_method)
        self._lookups = {k: v for k, v in self._lookups.items() if k in live}
        return out

    def _finished(self, url: str, cls: str, method: str, peers: list[str]) -> tuple[list[RayTask], set[str]]:
        """The peers' finished calls of `Class.method` (the newest of each), and every actor that ever
        finished one: one list per task name, as the GCS filters on names (an actor whose class has a
        __repr__ names its tasks by it)."""
        names = sorted({f"{self._actors[a].repr_name or cls}.{method}" for a in peers if a in self._actors})
        newest: dict[str, RayTask] = {}
        ran: set[str] = set()
        for name in names[:MAX_NAMES]:
            rows, _ = self._list(url, [("name", name), ("state", "FINISHED")], detail=True)
            ran.update(str(r.get("actor_id")) for r in rows if r.get("actor_id"))
            for row in rows:
                task = self._task(row)
                if task.actor_id in peers and task.end is not None:
                    held = newest.get(task.actor_id)
                    if held is None or task.end > (held.end or 0.0):
                        newest[task.actor_id] = task
        return list(newest.values()), ran

    def _records_events(self, url: str, now: float) -> bool:
        """Whether the cluster records task events: an alive actor with no task at all (not even its
        creation), or none that a worker reported (no pid anywhere), says it does not; said twice,
        `events_confirm` apart (EVENTS_CONFIRM), since a worker reports its events a moment late (every second
        by default)."""
        held, confirm = self._events, self.events_confirm
        if held is not None and now - held[0] < (EVENTS_CHECK if held[1] else confirm):
            return held[1] or self._events_doubted is None or now - self._events_doubted < confirm
        actor_id = next(iter(self._actors))
        rows, _ = self._list(url, [("actor_id", actor_id)], limit=100)
        records = any(r.get("worker_pid") for r in rows)
        self._events = (now, records)
        if records:
            self._events_doubted = None
            return True
        if self._events_doubted is None:
            self._events_doubted = now
        return now - self._events_doubted < confirm


def _window(members: list[RayTask]) -> tuple[float, float] | None:
    times = [t.created if t.created is not None else t.start for t in members]
    known = [t for t in times if t is not None]
    return (min(known) - ROUND_WINDOW, max(known) + ROUND_WINDOW) if known else None


def _within(task: RayTask, window: tuple[float, float] | None) -> bool:
    when = task.created if task.created is not None else task.start
    return window is not None and when is not None and window[0] <= when <= window[1]


def _get_json(url: str, timeout: float) -> object:
    import urllib.request  # here, not at the top: with http.client it costs the first frame ~10 ms

    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def _body(exc: urllib.error.HTTPError) -> str:
    """The first line the dashboard gave with its error status (its `msg`), or the status's reason."""
    try:
        doc = json.loads(exc.read(64 * 1024) or b"{}")
        msg = str(doc.get("msg") or "") if isinstance(doc, dict) else ""
    except (OSError, ValueError):
        msg = ""
    return (msg.strip().splitlines() or [str(exc.reason)])[0][:200]


SPEC: CollectorSpec[RayTasksState] = CollectorSpec(
    result=RayTasksState,
    write=lambda store, state: store.write_ray_tasks(state),
    build=lambda wiring, interval: RayTasksCollector(wiring.ray_address, interval=interval),
)
