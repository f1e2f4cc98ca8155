"""`gkdtop serve` under hostile tabs (issue 30): 15 WebSocket clients each asking for a 1000x1000 screen.

Usage: .venv/bin/python bench/serve_large_tabs.py [--tabs 15] [--seconds 10] [--against main]

For this tree (and, with --against REV, gkdtop as it was at REV, run from a `git archive` of it in the same
run, on the same machine): the server's RSS with one normal tab, with the large tabs drawn too, and a few
seconds after they all closed, for each of --rounds rounds of opening and closing them; its CPU over S
seconds with them open; how long a normal tab's first frame takes while they are open; and the stop
(SIGTERM -> exit) with them open. The clients are raw WebSockets (what an
attacker's script would be), each reading every frame, so none is closed for falling behind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil
from common import ROOT, report

from tests.gkdlog import startup


def start(root: Path, log: Path, tmp: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(root), "XDG_CONFIG_HOME": str(tmp / "config"),
           "XDG_CACHE_HOME": str(tmp / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "gkdtop", "serve", "--port", "0", "--log", str(log),
                             "--ray-address", "http://127.0.0.1:9", "--max-viewers", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp)
    assert proc.stdout is not None
    match = re.search(r"(http://\S+/)", proc.stdout.readline())
    assert match, "gkdtop serve printed no URL"
    url = match.group(1)
    return proc, url.replace(url.split("/")[2].split(":")[0], "127.0.0.1", 1)


class Client:
    """One tab's WebSocket: reads every frame until closed; `drawn` is set once the dashboard is on it."""

    def __init__(self, url: str, width: int, height: int) -> None:
        self.url = f"{url.replace('http', 'ws', 1)}ws?width={width}&height={height}"
        self.origin = "/".join(url.split("/")[:3])
        self.drawn = asyncio.Event()
        self.task = asyncio.create_task(self.run())

    async def run(self) -> None:
        import aiohttp

        text = ""
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(self.url, headers={"Origin": self.origin}, max_msg_size=0) as ws:
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY and not self.drawn.is_set():
                    text += message.data.decode("utf-8", "replace")
                    if "Phases" in text:
                        self.drawn.set()

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def rss(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 2**20


async def measure(name: str, root: Path, log: Path, tabs: int, seconds: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(root, log, Path(tmp))
        me = psutil.Process(proc.pid)
        try:
            normal = Client(url, 160, 48)
            await asyncio.wait_for(normal.drawn.wait(), 60)
            one = rss(me)
            afters: list[float] = []
            for round_ in range(rounds):
                large = [Client(url, 1000, 1000) for _ in range(tabs)]
                waits = [asyncio.create_task(c.drawn.wait()) for c in large]
                await asyncio.wait(waits, timeout=300)
                if round_ == 0:
                    drew = sum(c.drawn.is_set() for c in large)
                    many = rss(me)
                    before = sum(me.cpu_times()[:2])
                    await asyncio.sleep(seconds)
                    load = 100 * (sum(me.cpu_times()[:2]) - before) / seconds
                    opened = time.perf_counter()
                    viewer = Client(url, 160, 48)
                    await asyncio.wait_for(viewer.drawn.wait(), 120)
                    first = time.perf_counter() - opened
                    await viewer.close()
                for client in large:
                    await client.close()
                await asyncio.sleep(5)  # the tabs' apps end, their memory is (or is not) given back
                afters.append(rss(me))
            after = afters[-1]
            # The stop with the large tabs open, as a hostile viewer would leave them.
            large = [Client(url, 1000, 1000) for _ in range(tabs)]
            await asyncio.wait([asyncio.create_task(c.drawn.wait()) for c in large], timeout=300)
            stopping = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            while proc.poll() is None and time.perf_counter() - stopping < 60:
                await asyncio.sleep(0.01)
            stop = time.perf_counter() - stopping
            await normal.close()
            for client in large:
                await client.close()
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    result = {"one": one, "many": many, "after": after, "cpu": load, "first": first, "stop": stop,
              "afters": afters}
    print(f"{name}: RSS 1 tab {one:.0f} MiB, +{tabs} tabs of 1000x1000 ({drew} drawn) {many:.0f} MiB, "
          f"5 s after they closed, round by round "
          f"{', '.join(f'{a:.0f}' for a in afters)} MiB; CPU with them open {load:.0f}% of a core; "
          f"a normal tab's first frame {first:.2f} s; "
          f"stop with them open {stop:.2f} s")
    return result


def checkout(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "gkdtop"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3, help="times the large tabs open and close")
    ap.add_argument("--against", metavar="REV", help="also measure gkdtop as it was at REV (e.g. main)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        lines, last = startup(time.time() - 200, steps=3, step_s=30)
        log.write_text("".join(line + "\n" for line in lines))
        os.utime(log, (last, last))
        ours = asyncio.run(measure("this tree", ROOT, log, args.tabs, args.seconds, args.rounds))
        then = None
        if args.against:
            then = asyncio.run(measure(args.against, checkout(args.against, Path(tmp)), log, args.tabs, args.seconds,
                                       args.rounds))

    def row(r: dict[str, Any]) -> str:
        return (f"{r['many']:.0f} MiB, {r['cpu']:.0f}% CPU, {r['after']:.0f} MiB after {len(r['afters'])} rounds; "
                f"normal tab {r['first']:.1f} s; stop {r['stop']:.1f} s")

    report(f"serve: {args.tabs} tabs of 1000x1000 (RSS, CPU, RSS after they close, a normal tab's first frame)",
           row(ours), f"{args.against}: {row(then)}" if then else "-",
           then["many"] / ours["many"] if then else None,
           command=f"bench/serve_large_tabs.py{' --against ' + args.against if args.against else ''}")


if __name__ == "__main__":
    main()
