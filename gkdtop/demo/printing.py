"""How the demo job prints: its loggers, vLLM's line format, verl's model-size line and a tqdm look-alike.

The job must print what a real verl job prints, down to the format, because gkdtop reads the demo's
log as it reads a real one, and tests and screenshots match those lines. The shape of a line is
decided here; what each process says, and when, stays with the process that says it (actors.py,
task_runner.py, job.py).

What it prints (`--markers`): by default the lines verl's GKD recipe and the engines around it
print (docs/real-logs.md): `ray init kwargs:`, `TaskRunner hostname:`, the config, `resource_pool_spec:`,
`dataset len:`, `Total training steps:`, `… contains N parameters`, the rollout's start-up and
sleep/wake lines in vLLM's format (it stands in for vLLM), the teacher server's `Reading configs
from`, `INFO: generate text done.` / `INFO: update actor done.` and the step line. `--markers
playbook` prints the old playbook's markers instead (`[ACTOR] init_model START`, `[SYNC] …`).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def logger(role: str) -> logging.Logger:
    """A logger that writes `asctime name LEVEL message` to stdout, whatever Ray did to the root logger."""
    log = logging.getLogger(f"gkd.{role}")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def print_vllm(where: str, message: str) -> None:
    """A line in vLLM's own format (`INFO 06-12 10:35:01 [file.py:N] message`): the rollout stands in for it."""
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [{where}] {message}", flush=True)


def model_size_line(name: str, model: Any) -> str:
    """verl's print_model_size line: `Qwen2ForCausalLM contains 7.62B parameters`."""
    n = float(sum(p.numel() for p in model.parameters()))
    scale = ""
    for unit in ("K", "M", "B", "T"):
        if n < 1000:
            break
        n, scale = n / 1000, unit
    return f"{name} contains {n:.2f}{scale} parameters"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


class ProgressBar:
    """A tqdm look-alike (tqdm is not a dependency): `\\r` rewrites of one line, a newline at close.

    With `hold_line=False` every redraw ends its line at once: a bar that other prints interleave
    with would otherwise leave an empty `(TaskRunner pid=..)` line behind each time Ray's log monitor
    forwards the unfinished line before the newline that ends it.
    """

    _BLOCKS = " ▏▎▍▌▋▊▉█"

    def __init__(self, desc: str, total: int | None = None, unit: str = "it", hold_line: bool = True) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.hold_line = hold_line
        self.n = 0
        self.t0 = time.monotonic()
        self.open = False
        self._draw()

    def _text(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.n / elapsed if self.n and elapsed > 0 else None
        if self.total is None:
            shown = f"{rate:.2f} {self.unit}/s" if rate else f"? {self.unit}/s"
            return f"{self.desc}: {self.n} {self.unit} [{_clock(elapsed)}, {shown}]"
        frac = min(1.0, self.n / self.total) if self.total else 1.0
        eighths = int(frac * 10 * 8)
        bar = ("█" * (eighths // 8) + (self._BLOCKS[eighths % 8] if eighths < 80 else "")).ljust(10)
        left = _clock((self.total - self.n) / rate) if rate else "?"
        speed = f"{1 / rate:5.2f}s/{self.unit}" if rate else f"?{self.unit}/s"
        counts = f"{self.n}/{self.total} [{_clock(elapsed)}<{left}, {speed}]"
        return f"{self.desc}: {frac * 100:3.0f}%|{bar}| {counts}"

    def _draw(self) -> None:
        sys.stdout.write("\r" + self._text() + ("" if self.hold_line else "\n"))
        sys.stdout.flush()
        self.open = self.hold_line

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def end_line(self) -> None:
        """Finish the bar's line so that the next print starts on a line of its own."""
        if self.open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open = False

    def close(self) -> None:
        self._draw()
        self.end_line()
