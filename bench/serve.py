"""`gkdtop serve` vs textual-serve running `gkdtop` (a process per tab), in the same headless Chromium.

Usage: .venv/bin/python bench/serve.py [--seconds S] [--tabs N] [--presses K]
Needs Playwright and a system Chromium (apt-get install -y chromium). For each server: first frame
(page opened -> the app's text drawn), `?` answered (key pressed -> the help's text drawn),
processes and RSS of the server's process tree with 1 and with N tabs open (--tabs, 3), CPU of that
tree over S idle seconds with N tabs, and the stop (SIGINT -> process gone) with N tabs open. Requests that
would leave the machine are refused at once for both (a firewall that refuses, not one that drops).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import psutil
from common import report, tree

from tests.gkdlog import startup
from tests.test_serve import CHROMIUM, Tab


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ours(log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "gkdtop", "serve", "--port", "0", "--log", str(log),
                             "--ray-address", "http://127.0.0.1:9", "--max-viewers", "100"],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    match = re.search(r"(http://\S+/)", proc.stdout.readline())
    assert match
    return proc, match.group(1)


def start_textual_serve(log: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    command = f"{Path(sys.executable).parent / 'gkdtop'} --log {log} --ray-address http://127.0.0.1:9"
    code = f"from textual_serve.server import Server; Server({command!r}, host='127.0.0.1', port={port}).serve()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if time.monotonic() > deadline:
            raise TimeoutError("textual-serve did not listen")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/"


def footprint(proc: subprocess.Popen[str]) -> tuple[int, float]:
    procs = tree(psutil.Process(proc.pid))
    return len(procs), sum(p.memory_info().rss for p in procs) / 2**20


def cpu(proc: subprocess.Popen[str], tab: Tab, seconds: float) -> float:
    procs = tree(psutil.Process(proc.pid))
    before = sum(sum(p.cpu_times()[:2]) for p in procs)
    tab.page.wait_for_timeout(seconds * 1000)  # Playwright's wait: the tabs go on receiving frames
    return 100 * (sum(sum(p.cpu_times()[:2]) for p in procs) - before) / seconds


def measure(name: str, start: Any, browser: Any, log: Path, env: dict[str, str], seconds: float,
            presses: int, count: int) -> dict[str, Any]:
    proc, url = start(log, env)
    try:
        opened = time.perf_counter()
        first = Tab(browser, url, block_foreign=True)
        first.wait_text("Phases", timeout=60)
        first_frame = time.perf_counter() - opened
        first.page.focus(".xterm-helper-textarea")
        keys = []
        for _ in range(presses):
            since = len(first.frames)
            pressed = time.perf_counter()
            first.page.keyboard.press("?")
            first.wait_text("this help", since)
            keys.append(time.perf_counter() - pressed)
            first.page.keyboard.press("Escape")
            first.page.wait_for_timeout(700)
        key = statistics.median(keys)
        one = footprint(proc)
        tabs = [first, *(Tab(browser, url, block_foreign=True) for _ in range(count - 1))]
        for tab in tabs[1:]:
            tab.wait_text("Phases", timeout=60)
        first.page.wait_for_timeout(1000)
        many = footprint(proc)
        idle = cpu(proc, first, seconds)
        stopping = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        while proc.poll() is None and time.perf_counter() - stopping < 60:
            first.page.wait_for_timeout(10)
        stop = time.perf_counter() - stopping
        for tab in tabs:
            tab.page.close()
    finally:
        if proc.poll() is None:
            for p in reversed(tree(psutil.Process(proc.pid))):
                p.kill()
            proc.wait()
    result = {"first": first_frame, "key": key, "one": one, "many": many, "cpu": idle, "stop": stop}
    print(f"{name}: first frame {first_frame:.2f} s, '?' {key * 1000:.0f} ms (median of {presses}), "
          f"1 tab {one[0]} processes {one[1]:.0f} MiB, {count} tabs {many[0]} processes {many[1]:.0f} MiB, "
          f"idle CPU with {count} tabs {idle:.1f}%, stop with {count} tabs {stop:.2f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="idle CPU window with the tabs open")
    parser.add_argument("--tabs", type=int, default=3, help="tabs open for the footprint, CPU and stop")
    parser.add_argument("--presses", type=int, default=5, help="'?' presses timed (the median is reported)")
    args = parser.parse_args()
    if CHROMIUM is None:
        sys.exit("bench/serve.py: no system Chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        log = Path(tmp) / "train.log"
        lines, last = startup(time.time() - 200, steps=3, step_s=30)
        log.write_text("".join(line + "\n" for line in lines))
        os.utime(log, (last, last))
        env = {**os.environ, "XDG_CONFIG_HOME": tmp, "XDG_CACHE_HOME": tmp}
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        base = measure("textual-serve + gkdtop", start_textual_serve, browser, log, env, args.seconds,
                       args.presses, args.tabs)
        ours = measure("gkdtop serve", start_ours, browser, log, env, args.seconds, args.presses, args.tabs)
        browser.close()
    cmd = "bench/serve.py"
    report("serve: first frame in headless Chromium", f"{ours['first']:.2f} s",
           f"textual-serve: {base['first']:.2f} s", ours["first"] / base["first"], cmd)
    report(f"serve: `?` answered, median of {args.presses}", f"{ours['key'] * 1000:.0f} ms",
           f"textual-serve: {base['key'] * 1000:.0f} ms", ours["key"] / base["key"], cmd)
    report(f"serve: {args.tabs} tabs, processes / RSS", f"{ours['many'][0]} / {ours['many'][1]:.0f} MiB "
           f"(1 tab: {ours['one'][0]} / {ours['one'][1]:.0f} MiB)",
           f"textual-serve: {base['many'][0]} / {base['many'][1]:.0f} MiB "
           f"(1 tab: {base['one'][0]} / {base['one'][1]:.0f} MiB)", ours["many"][1] / base["many"][1], cmd)
    report(f"serve: CPU, {args.tabs} tabs, {args.seconds:g} s idle", f"{ours['cpu']:.1f}%",
           f"textual-serve: {base['cpu']:.1f}%", ours["cpu"] / base["cpu"] if base["cpu"] else None, cmd)
    report(f"serve: stop with {args.tabs} tabs open", f"{ours['stop']:.2f} s", f"textual-serve: {base['stop']:.2f} s",
           ours["stop"] / base["stop"], cmd)


if __name__ == "__main__":
    main()
