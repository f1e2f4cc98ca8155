"""First frame of `gkdtop` vs a bare Textual app, both started in a real tmux and timed the same way.

Usage: .venv/bin/python bench/first_frame.py [--runs N]
Time is from `tmux new-session` until the app's own text is on the screen (polled every 5 ms); for
gkdtop also until its first data (the Logs pane naming the file it follows), drawn once the
monitor, made just after the first frame, has polled.
Both start from compiled bytecode, as after `pip install`: gkdtop's is compiled first, since with
PYTHONDONTWRITEBYTECODE set (or a read-only checkout) an editable install compiles its source on
every start (~0.18 s here) while Textual's came compiled with its wheel.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import report

from tests.tmux import Tmux

BARE = (
    "from textual.app import App\n"
    "from textual.widgets import Footer, Static\n"
    "class Bare(App):\n"
    "    BINDINGS = [('q', 'quit', 'Quit')]\n"
    "    def compose(self):\n"
    "        yield Static('BARE-READY')\n"
    "        yield Footer()\n"
    "Bare().run()\n"
)


def time_to_text(command: list[str], text: str, env: dict[str, str], then: str = "") -> tuple[float, float]:
    """Seconds until `text` is on the screen, and until `then` is too (0.0 when not asked for)."""
    tmux = Tmux(width=120, height=40)
    try:
        started = time.perf_counter()
        tmux.start(command, env=env)
        seen: list[float] = []
        for wanted in [text] + ([then] if then else []):
            while wanted not in tmux.screen():
                if time.perf_counter() - started > 30:
                    raise TimeoutError(f"{wanted!r} never appeared:\n{tmux.screen()}")
                time.sleep(0.005)
            seen.append(time.perf_counter() - started)
        return seen[0], seen[1] if then else 0.0
    finally:
        tmux.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "gkdtop", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        log.write_text("Initializing Actor Worker...\n")
        env = {"XDG_CONFIG_HOME": tmp, "RAY_TMPDIR": tmp}
        bare, ours, data = [], [], []
        for _ in range(args.runs):
            bare.append(time_to_text([str(bindir / "python"), "-c", BARE], "BARE-READY", env)[0])
            frame, shown = time_to_text([str(bindir / "gkdtop"), "--log", str(log)], "4 Logs", env, then="1 file")
            ours.append(frame)
            data.append(shown)
    b, o, d = statistics.median(bare), statistics.median(ours), statistics.median(data)
    print(f"first frame: gkdtop {o * 1000:.0f} ms, bare Textual app {b * 1000:.0f} ms, "
          f"ratio {o / b:.2f} (median of {args.runs}); gkdtop's first data {d * 1000:.0f} ms")
    report(f"first frame in a real tmux, median of {args.runs}", f"{o * 1000:.0f} ms (first data {d * 1000:.0f} ms)",
           f"bare Textual app with a Footer: {b * 1000:.0f} ms", o / b, "bench/first_frame.py")


if __name__ == "__main__":
    main()
