"""Drive a program inside a real tmux server (its own socket), read the screen, send keys."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import uuid


class Tmux:
    def __init__(self, width: int = 120, height: int = 40) -> None:
        self.socket = f"gkdtop-test-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height
        self.session = "t"

    def _run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20)
        if check and proc.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {proc.stderr.strip()}")
        return proc.stdout

    def start(self, command: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        # COLUMNS/LINES leak in from pytest's environment and would pin the app at 80x24.
        line = (f"cd {shlex.quote(cwd)} && " if cwd else "") + f"env -u COLUMNS -u LINES {exports} "
        line += " ".join(shlex.quote(c) for c in command)
        self._run("-f", "/dev/null", "new-session", "-d", "-s", self.session, "-x", str(self.width),
                  "-y", str(self.height), "bash", "--norc", "-c", line + "; echo EXITED $?; sleep 30")
        self._run("set-option", "-t", self.session, "remain-on-exit", "on", check=False)

    def screen(self) -> str:
        return self._run("capture-pane", "-p", "-t", self.session, check=False)

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", self.session, *keys)

    def wait_for(self, text: str, timeout: float = 60.0, interval: float = 0.05) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(interval)
        raise TimeoutError(f"{text!r} not on screen after {timeout}s; screen was:\n{screen}")

    def wait_gone(self, text: str, timeout: float = 20.0, interval: float = 0.05) -> str:
        deadline = time.monotonic() + timeout
        screen = self.screen()
        while text in screen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} still on screen after {timeout}s; screen was:\n{screen}")
            time.sleep(interval)
            screen = self.screen()
        return screen

    def pane_pid(self) -> int:
        return int(self._run("display-message", "-p", "-t", self.session, "#{pane_pid}").strip())

    def kill(self) -> None:
        self._run("kill-server", check=False)


def tmux_available() -> bool:
    return shutil.which("tmux") is not None
