"""The subcommand registry (gkdtop/commands/): one module per subcommand, each wired in by its name alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gkdtop.commands
from gkdtop import commands
from gkdtop.cli import build_parser


def test_every_command_module_is_registered_and_has_a_parser_and_run() -> None:
    modules = {p.stem for p in Path(gkdtop.commands.__file__).parent.glob("*.py")} - {"__init__", "options"}
    assert set(commands.NAMES) == modules  # a module not in NAMES would be a subcommand nobody can call
    parser = build_parser()
    for name in commands.NAMES:
        module = commands.module(name)
        assert callable(module.add_parser) and callable(module.run), name
        argv = [name, "train.log"] if name == "replay" else [name]  # replay's LOG is required
        assert parser.parse_args(argv).command == name


def test_help_imports_no_command_s_work(tmp_path: Path) -> None:
    """`gkdtop --help` builds every subcommand's parser yet loads none of what they run, nor the config."""
    heavy = ("textual", "gkdtop.monitor", "gkdtop.config", "gkdtop.actions", "gkdtop.tui", "asyncio", "ray", "torch",
             "psutil", "yaml")
    probe = ("import sys, contextlib, io\n"
             "from gkdtop.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):\n"
             "    main(['--help'])\n"
             "assert 'snapshot' in out.getvalue() and 'serve' in out.getvalue(), out.getvalue()\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r} or m.startswith({heavy!r})))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_a_shared_option_before_the_subcommand_counts(tmp_path: Path) -> None:
    """`gkdtop --config X replay LOG` reads X as `gkdtop replay --config X LOG` does (the subcommand's
    default used to overwrite it: the config was silently ignored)."""
    args = build_parser().parse_args(["--config", "x.yaml", "--stall-after", "7", "replay", "train.log"])
    assert args.config == "x.yaml" and args.stall_after == 7
    assert build_parser().parse_args(["--config", "x.yaml", "replay", "--config", "y.yaml", "a"]).config == "y.yaml"
    assert build_parser().parse_args(["replay", "a"]).config is None
    bad = tmp_path / "config.yaml"
    bad.write_text("stall_after: nope\n")
    log = tmp_path / "train.log"
    log.write_text("hello\n")
    done = subprocess.run([sys.executable, "-m", "gkdtop", "--config", str(bad), "replay", str(log)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "stall_after: expected a number" in done.stderr, done.stderr
