"""Config loading: defaults, user overrides, and one-line errors that name the file, line and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gkdtop.config import ConfigError, load_config


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = load_config()
    assert cfg.stall_after == 120
    assert cfg.source == ""
    assert "weight sync" in [r.name for r in cfg.phases]


def test_xdg_config_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gkdtop").mkdir()
    (tmp_path / "gkdtop" / "config.yaml").write_text("stall_after: 45\nfilters:\n  default: 'ERROR|WARN'\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    cfg = load_config()
    assert cfg.stall_after == 45
    assert cfg.default_filter == "ERROR|WARN"


def test_replace_mode_drops_builtins(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("phases_mode: replace\nphases:\n  - name: only\n    start: 'go'\n")
    assert [r.name for r in load_config(f).phases] == ["only"]


def test_user_phase_with_builtin_name_replaces_it_in_place(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("phases:\n  - name: weight sync\n    start: 'SYNC BEGIN'\n    stall_after: 900\n")
    rules = load_config(f).phases
    names = [r.name for r in rules]
    assert names.count("weight sync") == 1
    rule = rules[names.index("weight sync")]
    assert rule.start.pattern == "SYNC BEGIN" and rule.stall_after == 900
    assert names.index("weight sync") == names.index("teacher") + 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stall_after: [1, 2\n", ":2: invalid YAML"),
        ("stall_after: soon\n", ":1: stall_after: expected a number of seconds, got 'soon'"),
        ("stal_after: 3\n", ":1: stal_after: unknown key"),
        ("phases:\n  - name: x\n    start: '(unclosed'\n", ":3: phases[0].start: invalid regular expression"),
        ("phases:\n  - name: x\n", ":2: phases[0]: missing 'start'"),
        ("filters:\n  errors: '[bad'\n", ":2: filters.errors: invalid regular expression"),
        ("refresh:\n  gpus: -1\n", ":2: refresh.gpus: must be positive"),
        ("- just\n- a list\n", ":1: the config must be a mapping"),
        ("stall_after: 60\nframework: verll\n",
         ":2: framework: unknown framework 'verll' (expected auto or one of: verl,"),
    ],
)
def test_malformed_config_is_one_line_naming_file_line_key(tmp_path: Path, text: str, expected: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(f))
    assert expected in message


def test_cli_reports_a_bad_config_without_traceback(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("phases:\n  - name: x\n    start: '(unclosed'\n")
    proc = subprocess.run([sys.executable, "-m", "gkdtop", "snapshot", "--json", "--config", str(f)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert f"{f}:3: phases[0].start: invalid regular expression" in proc.stderr


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
