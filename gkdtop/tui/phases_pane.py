"""Phases: where the job is, since when, whether that is normal, and what to do if it is not."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.widgets import Static

from gkdtop.format import clock, clock_why, hint_lines, human_duration
from gkdtop.tui.repaint import repaint_rows

if TYPE_CHECKING:
    from textual.geometry import Region

    from gkdtop.model import Anomaly, Finding, PhaseStatus, StackPhase
    from gkdtop.store import Store

STATE_STYLE = {
    "running": "bold green",
    "stalled": "bold white on red",
    "failed": "bold white on dark_red",
    "done": "bold cyan",
    "waiting": "bold yellow",
}
TIMING_ORDER = ("gen", "sync_rollout_weights", "wait_prev_gen", "get_teacher_knowledge", "ref", "update_actor", "step")


class PhasesPane(Static):
    SOURCES: ClassVar[tuple[str, ...]] = ("logs", "ray_logs", "stack_phase", "stall_stacks", "ray", "ray_tasks",
                                          "procs")
    TICKS: ClassVar[float] = 1.0  # its verdict ages with the clock ("no progress for 35s"): every tick
    DEFAULT_CSS = """
    PhasesPane { border: round $primary; padding: 0 1; height: 1fr; overflow-y: auto; }
    PhasesPane.-stalled { border: heavy $error; }
    PhasesPane.-failed { border: heavy $error; }
    """
    BORDER_TITLE = "1 Phases"
    _shown = ""
    _lines_only: list[Region] | None = None  # set while refresh_from updates the text (see refresh)

    def refresh_from(self, store: Store) -> None:
        status = store.phase_status()
        self.set_class(status.state == "stalled", "-stalled")
        self.set_class(status.state == "failed", "-failed")
        note = stall_stacks_note(store.stall_stacks) if status.state == "stalled" and store.stall_stacks else None
        now = time.time()
        if store.task_phase is not None or store.stragglers or store.ray_tasks.failed:
            note = task_note(store, status, now) + (note or Text())
        if store.stack_phase is not None:
            note = stack_phase_note(store.stack_phase, now) + (note or Text())
        text = render_phases(status, now, table=self.has_class("-maximized"), note=note,
                             width=self.content_size.width or None)
        if store.history_pending:
            text.append("  reading what the logs held before gkdtop opened them …\n", "dim")
        text.append_text(render_anomalies(store.anomalies()))
        text.append_text(render_findings(store.findings(), full=self.has_class("-maximized")))
        if getattr(self.app, "redact", False):  # a browser view: a failure's line, findings' fields and samples
            from gkdtop.tui.logs_pane import hide_secrets_styled

            text = hide_secrets_styled(text)
        if text.plain != self._shown:  # a stalled job's text changes once a second, an idle one's never
            rows = repaint_rows(self._shown, text.plain, self.content_size.width, self.styles)
            layout = rows is None
            if not layout and self.scroll_offset.y == 0:  # the rows that changed, not the pane (its clock ticks)
                self._lines_only = rows
            self._shown = text.plain
            try:
                self.update(text, layout=layout)
            finally:
                self._lines_only = None

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> PhasesPane:
        """While refresh_from updates the text, only the changed lines repaint: the pane's clock
        ("for 35s") ticks every second, and a whole-pane repaint cost ~1 ms of the idle second."""
        if self._lines_only is not None and not regions and not layout and not recompose:
            regions = tuple(self._lines_only)
            if not regions:
                return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


def headline(status: PhaseStatus, now: float) -> Text:
    """One line: the phase, its state and for how long. Also used by the top bar."""
    text = Text()
    name = status.current or "no phase yet"
    text.append(f" {status.state.upper()} ", STATE_STYLE.get(status.state, "bold"))
    text.append(f" {name}", "bold")
    if status.interrupted:
        text.append(" (interrupted: Ctrl+C or a signal)", "bold")  # stopped from outside, not an error of its own
    if status.worded is not None:
        text.append(" (a guess)", "dim")  # read from a line's words, not a rule: the note under it cites the line
    if status.within:
        step = f", step {status.last_step.step + 1}" if status.last_step else ""
        text.append(f" (in {status.within}{step})", "dim")
    if status.state == "stalled":
        text.append(f" · no progress for {human_duration(status.stalled_for)}", "bold red")
        if status.expected:
            text.append(f" · waiting for: {status.expected}", "yellow")
    elif status.since is not None and status.state != "done":
        text.append(f" · for {human_duration(now - status.since)}", "dim")
    return text


def fit(text: str, width: int) -> str:
    """`text` on one line of `width` cells, cut with `…` where longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def clock_offset_text(offset: float) -> str:
    """`8h00m behind` / `10m00s ahead of`: how a log's stamps stand to this machine's clock."""
    return f"{human_duration(abs(offset))} {'behind' if offset > 0 else 'ahead of'}"


HINT_STYLE = {"cause": "bold yellow", "try": "bold green"}


def render_phases(status: PhaseStatus, now: float, table: bool = False, note: Text | None = None,
                  width: int | None = None) -> Text:
    """Headline (then `note`), the way here (a one-line chain; a table when maximized), steps, the hint.
    `width`: the pane's, where one-line parts are cut to fit (None: not known yet, cut at 120)."""
    text = headline(status, now)
    text.append("\n")
    if note is not None:
        text.append_text(note)
    if status.timeline and not table:
        text.append_text(chain(status, now))
        text.append("\n")
    for run in status.earlier_runs[-1:]:  # the job started again into this log: the verdict is the last run's
        text.append(fit(f"  earlier run in this log (this run from {run.evidence.where()}): {run.told()}",
                        width or 134) + "\n", "dim")
    if status.worded_note:  # a guess from a line's words: said so, with the line
        text.append(f"  {fit(status.worded_note, (width or 134) - 2)}\n", "dim")
    if status.state == "failed" and status.failure:
        text.append(f"  {status.failure[:300]}\n", "red")
    if status.unsure:
        text.append(f"  {status.unsure}\n", "yellow")
    elif status.last_known:  # where a stalled job stopped, in its own words: one line, above the hint
        text.append("  last known: ", "dim")
        text.append(fit(status.last_known, (width or 134) - 14) + "\n")
    if status.last_line:  # what it printed last, where no rule knows it (a backward pass's warning)
        text.append("  last line: ", "dim")
        text.append(fit(status.last_line, (width or 134) - 13) + "\n")
    if status.hint is not None:
        for label, line in hint_lines(status.hint.causes, status.hint.actions):
            text.append(f"  {label + ':':<6} ", HINT_STYLE[label])
            text.append(line + "\n")
    if table and status.evidence:  # maximized: the lines each statement above stands on
        for e in status.evidence:
            text.append(f"  why:   {e.claim}: {e.where()}  ", "dim")
            text.append(fit(e.text, max(20, (width or 134) - 20 - len(e.claim) - len(e.where()))) + "\n", "dim")
    if status.clock_offset is not None:
        text.append(f"  clock: {Path(status.clock_source).name} is stamped {clock_offset_text(status.clock_offset)}"
                    f" this machine's clock ({clock_why(status.clock_offset)}); silence is measured by arrival\n",
                    "yellow")
    if status.steps_done:
        text.append(f"steps {status.steps_done}", "bold")
        if status.step_time is not None:
            text.append(f" · {status.step_time:.2f} s/step")
        run = status.steps
        if run.get("p50_s") is not None and run.get("p95_s") is not None:
            text.append(f" · p50 {run['p50_s']:.2f}s p95 {run['p95_s']:.2f}s", "dim")
            if run.get("trend") is not None and abs(run["trend"] - 1) >= 0.2:
                text.append(f" · last tenth {run['trend']:.1f}x the first", "bold yellow")
        last = status.last_step
        if last is not None:
            text.append(f" · last step:{last.step} at {clock(last.time)}\n")
            timings = last.timings
            ordered = [k for k in TIMING_ORDER if k in timings] + sorted(k for k in timings if k not in TIMING_ORDER)
            if ordered:
                text.append("  " + "  ".join(f"{k} {timings[k]:.2f}s" for k in ordered) + "\n", "cyan")
            others = [(k, v) for k, v in last.metrics.items() if not k.startswith("timing_s/")][:6]
            if others:
                text.append("  " + "  ".join(f"{k} {v:.4g}" for k, v in others) + "\n", "dim")
        else:
            text.append("\n")
    spans = status.timeline
    if spans and table:
        shown = spans if len(spans) <= 14 else spans[:8] + spans[-6:]
        width = max(len(s.name) for s in shown)
        for i, span in enumerate(shown):
            if len(spans) > 14 and i == 8:
                text.append(f"  … {len(spans) - 14} more\n", "dim")
            end = span.end if span.end is not None else now
            mark = {"done": "✓", "passed": "✓", "failed": "✗", "running": "▶"}.get(span.status, "·")
            style = {"failed": "red", "running": "bold"}.get(span.status, "")
            if span is spans[-1] and status.state == "stalled":
                mark, style = "‖", "bold red"
            took = human_duration(end - span.start) + ("?" if span.clock_jump is not None else "")  # two zones, likely
            if span.unmeasured or span.guess:
                took = "?"  # no length is known, or its start is a bound (a line's words date none)
            bound = "≤" if span.start_before else "≥" if span.start_after else ""
            text.append(f"  {mark} {span.name:<{width}}  {bound}{clock(span.start)}  {took:>7}", style)
            text.append(" (a guess)\n" if span.guess else "\n", "dim")
    elif status.current is None:
        text.append("  waiting for log lines that start a phase (see docs/configuration.md)\n", "dim")
    return text


SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}


def render_anomalies(anomalies: list[Anomaly]) -> Text:
    """The run's slow failures (analysis/anomalies.py), each with the step it began at and the numbers."""
    text = Text()
    if not anomalies:
        return text
    text.append(f"anomalies ({len(anomalies)})\n", "bold")
    for anomaly in anomalies[:6]:
        text.append("  ANOMALY ", "bold yellow")
        text.append(f"{anomaly.text}\n")
    return text


def render_findings(findings: list[Finding], full: bool = False) -> Text:
    """Known failure signatures seen in the logs, newest first, one entry per kind with a count."""
    text = Text()
    if not findings:
        return text
    text.append(f"findings ({len(findings)})\n", "bold")
    for finding in findings[: 20 if full else 4]:
        text.append(f"  {finding.severity.upper():<7} ", SEVERITY_STYLE.get(finding.severity, "bold"))
        text.append(finding.name, "bold")
        if finding.count > 1:
            text.append(f" ×{finding.count}")
        text.append(f"  {clock(finding.first_seen)}" + (f"–{clock(finding.last_seen)}" if finding.count > 1 else ""),
                    "dim")
        details = " ".join(f"{k}={v}" for k, v in finding.fields.items())
        if details:
            text.append(f"  {details[:120]}", "cyan")
        text.append("\n")
        text.append(f"    cause: {finding.cause}\n" if full else "")
        text.append(f"    fix:   {finding.fix}\n", "green")
        if full and finding.sample:
            text.append(f"    line:  {finding.sample[0][:200]}\n", "dim")
    return text


def stall_stacks_note(taken: Any) -> Text:
    """One line under the stall hint: the dump gkdtop took when the stall began, and how to see it."""
    groups = len(taken.report.groups)
    odd = len(taken.report.outliers)
    text = Text("  ")
    text.append("stacks taken at the stall", "bold")
    text.append(f" {time.strftime('%H:%M:%S', time.localtime(taken.taken))}: {groups} distinct"
                + (f", {odd} not where the others are" if odd else "") + " · press s\n")
    colls = getattr(taken.report, "collectives", None)
    if colls is not None and colls.sentence:  # Flight Recorder: who is not in which collective
        text.append("  collectives: ", "bold")
        text.append(colls.sentence + "\n", "bold red" if any(g.kind for g in colls.groups) else "")
    return text


def stack_phase_note(found: StackPhase, now: float) -> Text:
    """Under the headline: the phase read from the stacks, with its source and age, when the log can't say."""
    text = Text("  ")
    if found.phase is not None:
        text.append(found.phase, "bold magenta")
        text.append(f" (from stacks: {found.where})", "magenta")
        if found.waiting:
            text.append(f" · waiting in {found.waiting}", "dim")
    else:
        text.append(found.text, "dim")
    who = f"pid {found.pid}" + (f" {found.label}" if found.label else "") if found.pid else ""
    if found.processes > 1 and found.phase is not None:
        who += f", {found.agree}/{found.processes} processes"
    # Seconds resolution would repaint the pane every second; the sample is minutes old at most.
    age = f"{human_duration((now - found.taken) // 10 * 10)} ago" if now - found.taken >= 10 else "just now"
    text.append(f" · {who} · {age} · {found.reason}\n" if who else f" · {age} · {found.reason}\n", "dim")
    if found.note:
        text.append(f"  stacks: {found.note[:200]}\n", "yellow")
    return text


def task_note(store: Store, status: PhaseStatus, now: float) -> Text:
    """Under the headline, from Ray's task table: the phase its running tasks name (in place of the log's
    when the log cannot say, else as evidence beside it), who is still in a call the others left, and a
    failed task whose error the log lacks. A stall or a failure puts the last two in its hint instead."""
    text = Text()
    found = store.task_phase
    if found is not None:
        use = store.task_phase_use(status, now)
        since = f" · for {human_duration((now - found.since) // 10 * 10)}" if found.since is not None else ""
        if use != "evidence":
            text.append("  ")
            text.append(found.phase, "bold magenta")
            text.append(f" (from Ray tasks: {found.where})", "magenta")
            text.append(f"{since} · {use}\n", "dim")
        else:
            agree = ("agrees with the log" if status.current == found.phase else
                     f"the log says {status.current}" if status.current else "the log names no phase yet")
            text.append(f"  Ray tasks: {found.phase} ({found.where}){since} · {agree}\n", "dim")
    if status.state not in ("stalled", "failed"):  # else the hint leads with them (Store.phase_status)
        for straggler in store.stragglers:
            text.append("  ⚑ ", "bold red")
            text.append(straggler.sentence(now) + "\n", "bold red" if straggler.kind == "left early" else "bold yellow")
        for cause in store.failed_task_causes():
            text.append(f"  {cause[:300]}\n", "red")
    return text


def chain(status: PhaseStatus, now: float) -> Text:
    """The timeline on one (wrapping) line: config 1s › dataset generation 20s › ‖ weight sync 14m."""
    spans = status.timeline
    shown = spans if len(spans) <= 12 else spans[:6] + spans[-5:]
    text = Text("  ")
    for i, span in enumerate(shown):
        if i:
            text.append(" › ", "dim")
        if len(spans) > 12 and i == 6:
            text.append(f"… {len(spans) - 11} more › ", "dim")
        end = span.end if span.end is not None else now
        took = "(a guess)" if span.guess else human_duration(end - span.start)  # a line's words date no start
        last = span is spans[-1]
        if last and status.state == "stalled":
            text.append(f"‖ {span.name} {took}", "bold red")
        elif span.status == "failed":
            text.append(f"✗ {span.name} {took}", "bold red")
        elif last and span.end is None:
            text.append(f"▶ {span.name} {took}", "bold")
        else:
            text.append(f"{span.name} ", "")
            text.append("?" if span.unmeasured else human_duration(end - span.start), "dim")
    return text
