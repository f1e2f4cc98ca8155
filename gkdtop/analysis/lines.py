"""Bytes to log lines: ANSI and control characters out, tqdm's `\r` rewrites collapsed, the Ray
prefix `(WorkerDict pid=..., ip=...)` split off and the timestamp read (analysis/time.py).

Cleaning works per chunk, on bytes, in a few C-level passes (escape regex, translate, decode,
split), so the per-line Python work is only the prefix / timestamp parse. Used by the log
collector (live), by the history reader (replay, snapshot) and by remote Ray logs.
"""

from __future__ import annotations

import re

from gkdtop.analysis.time import TS_FIRST, TS_RE, check_zone, stamp_of
from gkdtop.model import LogLine

# --- cleaning ------------------------------------------------------------------------------------

# CSI (colours, cursor moves), OSC (titles, hyperlinks; never across a newline, so an unterminated
# one can't eat the following lines), charset and two-byte escapes.
_ESC_PATTERN = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[()*+][0-~]|[@-Z\\-_])"
# ... then every other C0 / C1 control character except tab (and the \n / \r the splitter handles).
_CLEAN_RE = re.compile(_ESC_PATTERN + r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The bulk path works on bytes: the escapes by a regex with a literal first byte (a fast scan),
# the C0 controls by bytes.translate, and C1 (\xc2\x80-\x9f in UTF-8) only if a \xc2 is there.
_ESC_BYTES_RE = re.compile(_ESC_PATTERN.encode())
_C0_BYTES = bytes(c for c in range(32) if c not in (9, 10, 13)) + b"\x7f"
_C1_RE = re.compile("[\x80-\x9f]")
# Typographic quotes (‘ ’ “ ”, UTF-8 \xe2\x80\x98-\x9d) where a program printed straight ones: a log pasted through an
# editor or a forum that "smartened" them (`{‘loss’: 1.43, …}`, audit 18). Straightened, every rule reads the line.
_CURLY_BYTES_RE = re.compile(b"\xe2\x80[\x98\x99\x9c\x9d]")


# A log viewer's or a platform's stamp in lenticular brackets before every line (`【2025-02-20 23:19:18】(main_task
# pid=8918) …`, audit 20): written as the ASCII capture stamp `[2025-02-20 23:19:18] ` (CAPTURE_STAMP), which is read.
_LENTICULAR_BYTES_RE = re.compile(
    rb"(?m)^\xe3\x80\x90(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)\xe3\x80\x91 ?")


def _straight(m: re.Match[bytes]) -> bytes:
    return b"'" if m.group()[2] < 0x9c else b'"'


# Ray's tqdm (`ray.experimental.tqdm_ray`, EasyR1's step bar) prints each redraw as JSON for the driver to draw:
# `{"__magic_token__": "__ray_tqdm_magic_token__", "x": 38, "pos": 0, "desc": "Running step", "total": 335, …}`. A log
# that kept the JSON gets the bar Ray would have drawn, `Running step:  11%|#         | 38/335 [Ray tqdm, ?it/s]`,
# for the rules and the loop's bar (with a rate, unknown, as tqdm's first draw has: a bar's redraws are told by one).
# Audit 20: a run 38 steps in read as "after validation".
RAY_TQDM = b"__ray_tqdm_magic_token__"
_RAY_TQDM_RE = re.compile(rb'\{"__magic_token__": "__ray_tqdm_magic_token__"[^{}\n]{0,2000}\}')
_TQDM_X_RE = re.compile(rb'"x": (\d{1,12})\b')
_TQDM_TOTAL_RE = re.compile(rb'"total": (\d{1,12})\b')
_TQDM_DESC_RE = re.compile(rb'"desc": "((?:[^"\\\n]|\\.){0,200})"')


def _ray_bar(m: re.Match[bytes]) -> bytes:
    state = m.group()
    x, total, desc = _TQDM_X_RE.search(state), _TQDM_TOTAL_RE.search(state), _TQDM_DESC_RE.search(state)
    if x is None:
        return state
    head = desc.group(1) + b": " if desc is not None and desc.group(1) else b""
    if total is None or not int(total.group(1)):
        return head + x.group(1) + b"it [Ray tqdm, ?it/s]"
    pct = min(100, int(x.group(1)) * 100 // int(total.group(1)))
    return head + b"%3d%%|%-10s| %s/%s [Ray tqdm, ?it/s]" % (pct, b"#" * (pct // 10), x.group(1), total.group(1))


def straighten_quotes(data: bytes) -> bytes:
    """(An ASCII chunk, most of them, is passed as it is after one C-speed test: this runs on every chunk read.)
    Also Ray's tqdm JSON, as the bar it draws (_ray_bar)."""
    if RAY_TQDM in data:
        data = _RAY_TQDM_RE.sub(_ray_bar, data)
    if data.isascii() or b"\x80" not in data:  # (one memchr: both byte shapes below hold \x80, a bar's █ none)
        return data
    if b"\xe2\x80" in data:
        data = _CURLY_BYTES_RE.sub(_straight, data)
    return _LENTICULAR_BYTES_RE.sub(rb"[\1] ", data) if b"\xe3\x80\x90" in data else data


def strip_ansi(text: str) -> str:
    """Text without ANSI escapes (CSI, OSC, ...) and control characters; keeps tab, \\n and \\r."""
    return _CLEAN_RE.sub("", text)


def clean_bytes(data: bytes) -> bytes:
    """strip_ansi for bytes (C1 controls aside, see _decode): what the bulk path runs per chunk."""
    if b"\x1b" in data:
        data = _ESC_BYTES_RE.sub(b"", data)
    return straighten_quotes(data).translate(None, _C0_BYTES)


def decode(data: bytes) -> str:
    """Cleaned bytes to text; junk bytes become U+FFFD, never an error."""
    text = data.decode("utf-8", "replace")
    if b"\xc2" in data:
        text = _C1_RE.sub("", text)
    return text


def last_segment(line: bytes) -> bytes:
    """What a terminal shows for a `\\r`-rewritten (cleaned) line: its last non-blank segment."""
    end = len(line)
    while True:  # from the end: a bar's last redraw is usually the last segment or the one before
        cr = line.rfind(b"\r", 0, end)
        part = line[cr + 1 : end]
        if part.strip():
            return part
        if cr < 0:
            return b""
        end = cr


def strip_escapes(data: bytes) -> bytes:
    """Only the ANSI escapes out of a chunk (a rule must not miss a coloured word), and typographic quotes
    straightened: the rest of the cleaning is done on the few lines the matcher names (`clean_line`)."""
    return straighten_quotes(_ESC_BYTES_RE.sub(b"", data) if b"\x1b" in data else data)


def clean_line(raw: bytes) -> str:
    """One raw line as the follower would deliver it: controls out, the last `\\r` state, decoded."""
    data = clean_bytes(raw)
    if b"\r" in data:
        data = last_segment(data)
    return decode(data)


def collapse_lines(data: bytes) -> bytes:
    """Each line of a cleaned chunk that holds a `\\r` becomes its last non-blank segment.

    A plain `\\r\\n` ending just loses its `\\r`. Only lines with a `\\r` cost Python work: the
    rest of the chunk is copied through in slices.
    """
    pieces: list[bytes] = []
    pos = 0
    cr = data.find(b"\r")
    while cr >= 0:
        end = data.find(b"\n", cr)
        if end < 0:
            end = len(data)
        if end == cr + 1:  # the line's only \r (the first one after pos) ends it: CRLF
            pieces.append(data[pos:cr])
        else:
            nl = data.rfind(b"\n", pos, cr)
            start = pos if nl < 0 else nl + 1
            pieces.append(data[pos:start])
            last = data.rfind(b"\r", cr, end)
            segment = data[last + 1 : end]  # a bar's last redraw, usually
            pieces.append(segment if segment.strip() else last_segment(data[start:end]))
        pos = end
        cr = data.find(b"\r", pos)
    pieces.append(data[pos:])
    return b"".join(pieces)


def collapse_unfinished(buf: bytes) -> bytes:
    """An unfinished line's `\\r` redraws dropped, keeping the last visible one (with a `\\r` before it
    where one was, and after it where blank redraws followed), so the bytes still to come complete it
    as they would the whole line. From the end: a bar's latest redraw is usually last."""
    end = len(buf)
    while True:
        cr = buf.rfind(b"\r", 0, end)
        part = buf[cr + 1 : end]
        if part.strip() and (b"\x1b" not in part or strip_ansi(part.decode("utf-8", "replace")).strip()):
            return (b"\r" if cr >= 0 else b"") + part + (b"\r" if end < len(buf) else b"")
        if cr < 0:
            return b"\r"
        end = cr


def utf8_cut(buf: bytes, limit: int) -> int:
    """A cut position <= limit that does not split a UTF-8 sequence."""
    cut = limit
    while cut > limit - 3 and cut > 0 and cut < len(buf) and 0x80 <= buf[cut] < 0xC0:
        cut -= 1
    return cut


# --- parsing -------------------------------------------------------------------------------------

# `(WorkerDict pid=1234, ip=10.0.0.1)`, `(TaskRunner pid=133947)`, `(pid=42)`: checked once per
# distinct prefix, then found in _prefix_cache.
# SkyPilot runs a task's script in Ray and names it so: `(task, pid=21873)`, on several nodes `(task, worker1, rank=1,
# pid=22755, ip=172.31.81.91)` (the task's name, then the node's; the worker here is the task).
_RAY_RE = re.compile(r"\((?:([^\s()=,]+)(?:, [^\s()=,]+)?,? )?(?:rank=\d{1,6}, )?pid=(\d+)(?:, ip=([^\s(),]+))?[^)]*\)")
# Ray's own daemons, re-printed by the log monitor the same way: `(raylet) `, `(raylet, ip=10.0.0.2) `,
# `(gcs_server) `, `(autoscaler +2m5s) ` (minutes since the autoscaler started; the same events also come
# as `(scheduler +16s) `). No pid: 0.
_RAY_DAEMON_RE = re.compile(
    r"\((raylet|gcs_server|autoscaler|scheduler|monitor|dashboard_agent)(?:, ip=([^\s(),]+)| \+[\dhms]+)?\)")
# Lines dated by the `+2m5s` in their prefix (analysis/phases.py), which history reads the careful way.
RELATIVE_STAMPED = (b"(autoscaler", b"(scheduler")
# Bounded digits: int() refuses more than 4,300, and no real count has ten.
_REPEAT_RE = re.compile(r" \[repeated (\d{1,9})x across cluster\]")
PREFIX_MAX = 256  # a Ray prefix closes within this many characters

_NO_PREFIX = ("", -1, "")
_prefix_cache: dict[str, tuple[str, int, str] | None] = {}


def _prefix_of(key: str) -> tuple[str, int, str] | None:
    """(worker, pid, ip) of a Ray prefix `(...)`, None if `key` is not one; cached."""
    m = _RAY_RE.fullmatch(key)
    found = (m.group(1) or "", int(m.group(2)), m.group(3) or "") if m is not None else None
    if found is None and (d := _RAY_DAEMON_RE.fullmatch(key)) is not None:
        found = (d.group(1), 0, d.group(2) or "")
    if len(_prefix_cache) > 4096:
        _prefix_cache.clear()
    _prefix_cache[key] = found
    return found


# `kubectl logs --timestamps` (and Docker's) puts the capture time, RFC 3339 in UTC, before every line.
KUBECTL_STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)[ \t]"
_KUBECTL_RE = re.compile(KUBECTL_STAMP)
_KUBECTL_BYTES_RE = re.compile(KUBECTL_STAMP.encode())


# `docker compose logs` (and `up`) puts the service before every line: `vllm  | `, `sglang-1  | ` (its name padded to
# the longest, then a bar). Looked for only where a ` | ` comes early in the line.
COMPOSE_PREFIX = r"[\w.-]{1,40} {1,20}\| "
_COMPOSE_RE = re.compile(COMPOSE_PREFIX)
_COMPOSE_BYTES_RE = re.compile(COMPOSE_PREFIX.encode())
COMPOSE_REACH = 100


# Open MPI's `mpirun --tag-output` puts `[job,rank]<stdout>:` before every line, and `--timestamp-output` the time
# it relayed the line before that, in ctime's shape (`Tue May 20 21:09:41 2025[1,0]<stdout>:`). SageMaker's MPI runs
# name the rank and the host: `[1,mpirank:0,algo-1]<stdout>:`.
_CTIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
_MPI_LABEL = r"\[\d{1,6},(?:mpirank:)?\d{1,6}(?:,[\w.-]+)?\]<std(?:out|err|diag)>: ?"
MPI_TAG = f"(?:{_CTIME})?{_MPI_LABEL}"
_MPI_RE = re.compile(f"(?P<ctime>{_CTIME})?{_MPI_LABEL}")
_MPI_BYTES_RE = re.compile(MPI_TAG.encode())
MPI_FIRST = "[MTWFS"  # what an MPI tag begins with: its bracket, or a day's name
_MPI_FIRST_BYTES = (b"[", b"M", b"T", b"W", b"F", b"S")
MPI_REACH = 100
_MONTHS = {m: i + 1 for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                           "Dec"))}


def _mpi_stamp(m: re.Match[str], seen: float) -> float | None:
    """The time an MPI tag's ctime says, read as the stamps of that shape are (a zone, the clock's checks)."""
    _, name, day, hms, year = m["ctime"].split()
    month = _MONTHS.get(name)
    if month is None:
        return None
    iso = TS_RE.match(f"{year}-{month:02d}-{int(day):02d} {hms}")
    return stamp_of(iso.groups(), seen) if iso is not None else None


def _compose_end(text: str) -> int:
    """Where the line goes on past a compose service's prefix, 0 without one."""
    if text[:1].isalnum() and text.find(" | ", 1, COMPOSE_REACH) > 0 and (m := _COMPOSE_RE.match(text)) is not None:
        return m.end()
    return 0


# A collector's or a viewer's capture stamp before a Ray prefix, `[2026-03-12 11:50:36] (TaskRunner pid=7) …`: an outer
# layer, read as the line's time, only where a Ray prefix follows (a program's own `[date time] msg` stays its text).
CAPTURE_STAMP = r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?\] "
_CAPTURE_RE = re.compile(CAPTURE_STAMP + r"(?=\()")


def capture_end(raw: str) -> int:
    """Where a capture stamp before a Ray prefix ends (0: none there)."""
    if raw[:1] != "[" or (m := _CAPTURE_RE.match(raw)) is None or _ray_split(raw[m.end() :])[0] is None:
        return 0
    return m.end()


def split_prefix(raw: str) -> tuple[tuple[str, int, str] | None, str]:
    """A raw line's Ray prefix (worker, pid, ip), if it has one, and its message (also past a
    capture stamp of `kubectl logs --timestamps` and a compose service's name before it)."""
    if end := capture_end(raw):
        return _ray_split(raw[end:])
    if raw[:1].isdigit() and (kube := _KUBECTL_RE.match(raw)) is not None:
        raw = raw[kube.end() :]
    if end := _compose_end(raw):
        raw = raw[end:]
    if raw[:1] in MPI_FIRST and raw.find("]<std", 1, MPI_REACH) > 0 and (mpi := _MPI_RE.match(raw)) is not None:
        raw = raw[mpi.end() :]
    if end := _label_end(raw):
        raw = raw[end:]
    return _ray_split(raw)


def _ray_split(raw: str) -> tuple[tuple[str, int, str] | None, str]:
    """split_prefix past the outer layers: Ray's prefix alone."""
    if raw[:1] == "(":
        close = raw.find(")", 1, PREFIX_MAX)
        if close > 0:
            key = raw[: close + 1]
            hit = _prefix_cache.get(key, _NO_PREFIX)
            if hit is _NO_PREFIX:
                hit = _prefix_of(key)
            if hit is not None:
                return hit, raw[close + 2 :] if raw[close + 1 : close + 2] == " " else raw[close + 1 :]
    return None, raw


RANK_PREFIX = r"\[rank\d{1,6}\](?:: ?| )"  # torch's elastic agent before every line of a rank (a logger's, a space)
# A logger's `LEVEL date time [file.py:N] ` that it puts on every line of a traceback it logs (vLLM's engine core; its
# older versions print `file.py:N] ` with no opening bracket).
LOGGER_PREFIX = r"(?:[A-Z]{4,8} [\d-]{5,10} [\d:.,]{8,15} \[?[\w./-]{1,80}:\d{1,6}\] )"
# vLLM's engine process inside a Ray actor names itself before that logger: `(EngineCore_DP0 pid=586112) ` (Ray's
# own prefix is split off the line; this one stays in its text).
ENGINE_PREFIX = r"(?:\([\w.-]{1,60}(?: rank=\d{1,6})? pid=\d{1,9}\) )"
_RANK_RE = re.compile(RANK_PREFIX)
# pdsh (DeepSpeed's multi-node launcher) puts the host before every line: `node07: `, `gpu-3: `,
# `10.0.0.7: `. A host name here has a digit, so `INFO: ` or `Traceback: ` is none.
HOST_PREFIX = r"[\w.-]{0,100}\d[\w.-]{0,100}: "  # as a regex (EXCEPTION_PATTERN, wordphase); _host_end below, by hand
_HOST_TOKEN_RE = re.compile(r"[\w.-]{1,127}")
_AFTER_HOST = frozenset("[0123456789(IWEF")  # what a stamp after a host begins with
_LAYERS = 5  # prefixes peeled before a stamp at most (a line number, Ray's, a process's, a rank's, a tag)
# How far into a line a rank's prefix with text glued before it is looked for: torch's elastic agent starts each
# line of a rank with `[rank3]:`, so one found after other text (a bar's redraw with its description, a print that
# lost its newline: `Loading: 100%|██| 2/2 [00:01<00:00]foo[rank3]:[E301 10:00:05 …]`) is where that line began.
GLUE_REACH = 512
# What a bracket before a stamp can be, one regex: `[61238] `, the line numbers of the editor or viewer a
# log was pasted from; the level (and file:line) of HF transformers' explicit format,
# `[INFO|trainer.py:1786] 2023-06-16 09:02:51,770 >> msg`, and of LLaMA-Factory's,
# `[INFO|2024-06-03 11:40:12] llamafactory.data.loader:143 >> msg` (the stamp inside the bracket);
# torchtitan's `[titan] 2025-06-20 19:13:25,465 - root - INFO -`; NeMo's `[NeMo I 2025-04-23 02:51:43 mixins:69]`;
# the level alone before a dated stamp, torchelastic's old logger `[INFO] 2021-02-19 07:41:03,214 api: …`.
_BRACKET_RE = re.compile(r"\[(?:\d{1,9}\] (?=\S)|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\|(?:[\w.-]{1,128}:\d{1,6}\] )?"
                         r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] (?=\d{4}-\d\d-\d\d[ T]\d\d:)"
                         r"|titan\] |NeMo [DIWEC] )")
# Python logging formatted `%(levelname)s:%(asctime)s:%(message)s` (`WARNING:2025-10-03 09:17:09,551:msg`).
_LEVEL_COLON_RE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):(?=\d{4}-\d\d-\d\d[ T]\d\d:)")
# torchrun's error summary, `  time      : 2024-08-30_03:43:05` (the failure's local time), behind its field name.
_FIELD_RE = re.compile(r"time +: (?=\d{4}-)")
# slurmstepd's `*** JOB 1250740 ON node0181 CANCELLED AT 2025-11-24T22:13:24 DUE TO TIME LIMIT ***`: no stamp of its
# own before it, the time it ended the job in it (audit 21: a run's span stopped 22 minutes before the kill).
_SLURM_RE = re.compile(
    r"(?:slurmstepd|srun): error: \*\*\* (?:JOB|STEP) [\w.+]{1,40} ON \S{1,128} CANCELLED AT (?=\d{4}-)")
# A tqdm bar whose `\r` was lost (a pasted log, a file read without them): the next line printed is glued
# to its redraw, `35%|███▌ | 100/284 [41:07<1:15:39, 24.67s/it][INFO|trainer.py:2904] 2023-06-16 09:43:59,012 >>`.
_BAR_RE = re.compile(r"\d{1,3}%\|[^|]{0,200}\| *[\d.]+[kMGT]?/[\d.?]+[kMGT]? \[[^\]]{0,200}\]")


def _host_end(text: str) -> int:
    """Where the message begins past a pdsh host prefix (`node07: `), 0 without one. Linear: one
    find, one bounded token match."""
    colon = text.find(": ", 1, 129)
    if colon < 0 or text[colon + 2 : colon + 3] not in _AFTER_HOST or not _HOST_TOKEN_RE.fullmatch(text, 0, colon):
        return 0
    return colon + 2 if any(c.isdigit() for c in text[:colon]) else 0


STREAM_TAGS = ("stdout: ", "stderr: ")  # both 8 characters (stamp_text)
_STREAM_TAG_BYTES = tuple(tag.encode() for tag in STREAM_TAGS)


# srun --label puts the task's number before every line (`0: `, padded to the widest: ` 7: ` of 16 tasks).
SRUN_LABEL = r" {0,6}\d{1,7}: "
_SRUN_LABEL_RE = re.compile(SRUN_LABEL)
LABEL_FIRST = " 0123456789"
_LABEL_FIRST_BYTES = frozenset(bytes([c]) for c in LABEL_FIRST.encode())


def may_be_labelled(text: str) -> bool:
    """Could `text` open with srun's label before a parenthesis (`0: (`)? The cheap test, run for every line."""
    return text[:1] in LABEL_FIRST and text.find(": (", 1, 16) > 0


def label_colon(raw: bytes, start: int = 0) -> int:
    """may_be_labelled for raw bytes from `start`: where the label's `: (` may be, else -1."""
    return raw.find(b": (", start + 1, start + 16) if raw[start : start + 1] in _LABEL_FIRST_BYTES else -1


def _label_end(text: str) -> int:
    """Where a Ray prefix begins past srun's task label before it (`0: (TaskRunner pid=7) …`), 0 without one. Only
    before a Ray prefix: elsewhere the label stays in the text, where the patterns allow for it as for pdsh's host
    (HOST_PREFIX)."""
    if not may_be_labelled(text):
        return 0
    m = _SRUN_LABEL_RE.match(text)
    if m is None or text[m.end() : m.end() + 1] != "(" or _ray_split(text[m.end() :])[0] is None:
        return 0
    return m.end()


def stamp_text(text: str) -> str:
    """Where a message's stamp would begin, past the prefixes printed before it (the text itself keeps
    them): vLLM's multiprocess engine prints `(EngineCore_0 pid=N) ` / `(VllmWorker rank=0 pid=N) `
    inside Ray's prefix, torch's elastic agent `[rank0]:` before c10d's `[W326 22:36:28…`, and some
    stacks a tag of their own, `(AReaL) 20260304-10:31:13.128`; Megatron indents its iteration lines
    (` [2024-09-20 03:11:41] iteration 1/ 20000 |`) and stamps its milestones at their end
    (`[after dataloaders are built] datetime: 2024-09-20 03:11:09`); pdsh a host (`node07: `); a log pasted
    from an editor the line's number (`[61238] `); HF's and LLaMA-Factory's loggers, torchtitan and NeMo a
    level or a tag (_BRACKET_RE); torchrun's error summary a field name (`time      : `); slurmstepd's kill the
    job it ended (`*** JOB 12 ON node3 CANCELLED AT `, a stamp in the line); a line glued to a
    tqdm bar that lost its `\\r`, the bar's redraws; any text glued before a rank's `[rank3]:` (GLUE_REACH)."""
    for _ in range(_LAYERS):
        first = text[:1]
        if first == " ":
            text = text.lstrip(" ")
        elif first == "(":
            close = text.find(") ", 1, PREFIX_MAX)
            inside = text[1:close]
            if close <= 0 or "(" in inside or not ("pid=" in inside or inside.isidentifier()):
                return text
            text = text[close + 2 :]
        elif first == "[" and (m := (_RANK_RE if text[1:5] == "rank" else _BRACKET_RE).match(text)) is not None:
            text = text[m.end() :]  # a rank's prefix, an editor's line number (pasted), a level or a tag
        elif first == "[" and (at := text.find("] datetime: ", 1, 80)) > 0:  # Megatron's print_datetime
            text = text[at + 12 :]
        elif first == "t" and (m := _FIELD_RE.match(text)) is not None:
            text = text[m.end() :]
        elif first == "s" and text.startswith(STREAM_TAGS):
            text = text[8:]  # a test harness's or a subprocess wrapper's stream tag (bigscience's `stdout: `)
        elif first == "s" and (m := _SLURM_RE.match(text)) is not None:
            text = text[m.end() :]  # Slurm's kill of a job or step, at the time it names
        elif first in "DIWEC" and (m := _LEVEL_COLON_RE.match(text)) is not None:
            text = text[m.end() :]  # Python logging's `%(levelname)s:%(asctime)s:…`
        elif first.isdigit() and text.find("%|", 1, 5) > 0 and (m := _BAR_RE.match(text)) is not None:
            text = text[m.end() :]  # a bar's redraw, a line glued to it
        elif first.isalnum() and (end := _host_end(text)):
            text = text[end:]
        elif (at := text.find("[rank", 1, GLUE_REACH)) > 0 and (m := _RANK_RE.match(text, at)) is not None:
            text = text[m.end() :]  # a line glued before a rank's prefix: the rank's line begins there
        else:
            return text
    return text


def raw_stamp_time(raw: str, ref: float) -> float | None:
    """The time of a raw line's stamp: its capture stamp (`kubectl logs --timestamps`), else its
    message's own past the prefixes before it; `ref` places a short form (analysis/time.py)."""
    check_zone()
    outer = (raw[:1].isdigit() and _KUBECTL_RE.match(raw) is not None) or capture_end(raw)
    m = TS_RE.match(raw) if outer else _stamp_match(split_prefix(raw)[1])
    return stamp_of(m.groups(), ref) if m is not None else None


def dayless_stamp(raw: str) -> bool:
    """Whether a raw line's stamp is the time of day alone (`[23:59:50 TP0]`, `10:31:13.128 [INFO:swift]`)."""
    m = None if capture_end(raw) else _stamp_match(split_prefix(raw)[1])
    return m is not None and m.group(14) is not None


def _stamp_match(text: str) -> re.Match[str] | None:
    """A message's stamp: at its start, else past its prefixes (stamp_text). The one choice parse_into
    and the history clock both make, matched once."""
    first = text[:1]
    if first in TS_FIRST and first not in "([ " and (m := TS_RE.match(text)) is not None:
        return m
    text = stamp_text(text)
    return TS_RE.match(text) if text[:1] in TS_FIRST else None


STAMP_FIRST = frozenset(c.encode() for c in TS_FIRST)  # first bytes of a message that may open with a stamp
DIGITS = frozenset(bytes([c]) for c in b"0123456789")


def may_carry_stamp(raw: bytes, msg: int) -> bool:
    """Could this raw ASCII line (its message at `msg`) carry a stamp of its own? History's fast path
    dates a line by the stamp before it, so a line that may have one is read the careful way."""
    if raw[:1] in DIGITS or raw[msg : msg + 1] in STAMP_FIRST:  # a capture stamp, a host's address
        return True
    if raw.startswith((b"slurmstepd: ", b"srun: ", *_STREAM_TAG_BYTES), msg):
        return True  # Slurm's kill, stamped inside (_SLURM_RE); a stream's tag before a stamp (stamp_text)
    colon = raw.find(b": ", msg + 1, msg + 130)  # most lines have none: no decode
    # (nor one whose words before it have a blank: a bar's `Processed prompts: `, no host's name)
    return (colon > 0 and raw.find(b" ", msg, colon) < 0
            and _host_end(raw[msg : colon + 3].decode("ascii", "replace")) > 0)


_RAY_BYTES: dict[bytes, bool] = {}  # message_start: whether a `(...)` at a line's start is a Ray prefix


def message_start(raw: bytes) -> int:
    """split_prefix for a raw ASCII line: the offset its message begins at (0 without a prefix)."""
    if raw[:1] == b"(":  # the usual line of a Ray job: its prefix first, known by its bytes
        close = raw.find(b")", 1, PREFIX_MAX)
        if close > 0:
            ray = _RAY_BYTES.get(key := raw[: close + 1])
            if ray is None:  # (once per prefix: _prefix_of's answer, by its bytes)
                if len(_RAY_BYTES) > 4096:
                    _RAY_BYTES.clear()
                ray = _RAY_BYTES[key] = _prefix_of(key.decode("ascii")) is not None
            if ray:
                return close + 2 if raw[close + 1 : close + 2] == b" " else close + 1
        return 0
    start = 0
    if raw[:1].isdigit() and (kube := _KUBECTL_BYTES_RE.match(raw)) is not None:
        start = kube.end()
    if (raw[start : start + 1].isalnum() and raw.find(b" | ", start + 1, start + COMPOSE_REACH) > 0
            and (compose := _COMPOSE_BYTES_RE.match(raw, start)) is not None):
        start = compose.end()
    if (raw[start : start + 1] in _MPI_FIRST_BYTES and raw.find(b"]<std", start + 1, start + MPI_REACH) > 0
            and (mpi := _MPI_BYTES_RE.match(raw, start)) is not None):
        start = mpi.end()
    if (colon := label_colon(raw, start)) > 0:
        start += _label_end(raw[start : colon + 2 + PREFIX_MAX].decode("ascii", "replace"))
    if raw[start : start + 1] == b"(":
        close = raw.find(b")", start + 1, start + PREFIX_MAX)
        if close > 0:
            key = raw[start : close + 1].decode("ascii")
            hit = _prefix_cache.get(key, _NO_PREFIX)
            if hit is _NO_PREFIX:
                hit = _prefix_of(key)
            if hit is not None:
                return close + 2 if raw[close + 1 : close + 2] == b" " else close + 1
    return start


def plain_ascii(raw: bytes) -> bool:
    """A raw line that cleaning leaves as it is: ASCII without control characters (tab aside)."""
    return raw.isascii() and len(raw.translate(None, _C0_BYTES)) == len(raw)


def repeat_count(text: str) -> int:
    """N from Ray's ` [repeated Nx across cluster]` dedup suffix (kept in the text), else 1."""
    if "[repeated " not in text:
        return 1
    m = _REPEAT_RE.search(text)
    return int(m.group(1)) if m else 1


def parse_into(out: list[LogLine], lines: list[str], source: str, seen: float) -> None:
    """parse_line over many lines, appended to `out`. The hot loop: everything local, caches first.
    `seen` is the lines' arrival (or, for what was already written, the file's mtime): it also places
    year-less stamps (analysis/time.py)."""
    check_zone()
    append = out.append
    kubectl_match = _KUBECTL_RE.match
    compose_match = _COMPOSE_RE.match
    for raw in lines:
        text = raw
        worker = ip = ""
        pid: int | None = None
        first = raw[:1]
        kube = kubectl_match(raw) if first.isdigit() else None
        if kube is not None:
            text = raw[kube.end() :]
            first = text[:1]
        mpi = None
        captured = kube is not None
        if first == "[" and (end := capture_end(raw)):
            text, first, captured = raw[end:], "(", True  # a capture stamp before Ray's prefix
        if first != "(":  # (most lines of a Ray job: none of the layers below begins so)
            if first.isalnum() and text.find(" | ", 1, COMPOSE_REACH) > 0 and (c := compose_match(text)) is not None:
                text = text[c.end() :]  # a compose service's name (_compose_end, inline: this runs for every line)
            if text[:1] in MPI_FIRST and text.find("]<std", 1, MPI_REACH) > 0 and (mpi := _MPI_RE.match(text)):
                text = text[mpi.end() :]  # mpirun's tag (and the time it relayed the line)
            if end := _label_end(text):
                text = text[end:]  # srun's task label before Ray's prefix
            first = text[:1]
        if first == "(":
            hit, text = _ray_split(text)
            if hit is not None:
                worker, pid, ip = hit
        # The capture time of `kubectl logs --timestamps` (or of a capture stamp) is the line's time (a zone, a year),
        # else its own, else the time mpirun relayed it.
        m = TS_RE.match(raw) if captured else _stamp_match(text)
        ts = stamp_of(m.groups(), seen) if m is not None else None
        if ts is None and mpi is not None and mpi["ctime"]:
            ts = _mpi_stamp(mpi, seen)
        append(LogLine(source, text, seen, ts, worker, pid, ip, 0, False, False, raw))


def parse_line(raw: str, source: str, seen: float) -> LogLine:
    """One cleaned line (no ANSI, no \\r / \\n) into a LogLine: Ray prefix split off, timestamp read."""
    out: list[LogLine] = []
    parse_into(out, [raw], source, seen)
    return out[0]


