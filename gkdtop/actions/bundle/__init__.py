"""`gkdtop bundle`: one `.tar.gz` with everything a bug report needs, secrets redacted, mode 0600.

It reads the store (the same state the TUI and `snapshot` show) plus the few things only a report
needs and the store does not keep: the tails of the log files, the job processes' allow-listed
environment, `nvidia-smi -q`, stack dumps, Flight Recorder dumps, package versions, the config.
Every text member goes through `redact` (names and shapes); the manifest lists what was redacted by
name, never by value. A step that fails is recorded in the manifest and the bundle goes on.

The package, by job: gather (what goes in: one step per source, each redacted through
actions/redact.py), write (where the archive may go, member names, 0600 modes, strict JSON), manifest
(the table of contents and the redaction record), build (`build_bundle`: the steps in order, the
manifest last, renamed into place when whole) and cli (`gkdtop bundle`). Redaction itself stays in
actions/redact.py, which the tests and bench/redaction.py read on their own. This module re-exports
the public API.
"""

from gkdtop.actions.bundle.build import Progress, build_bundle
from gkdtop.actions.bundle.cli import bundle_command
from gkdtop.actions.bundle.gather import (
    ENV_NAMES,
    ENV_PREFIXES,
    FILTERED_LINES,
    NVIDIA_SMI_TIMEOUT,
    PACKAGES,
    RAY_SESSION_PATTERNS,
    RAY_TIMEOUT,
    SESSION_LOGS,
    STACK_FILE_MAX,
    STACK_FILES,
    STACK_FR_FILES,
    STEPS,
    TAIL_BYTES,
    TAIL_LINES,
    TRACE_FILE_MAX,
    TRACE_TOTAL_MAX,
    default_stacks_dir,
    env_allowed,
    tail_lines,
)
from gkdtop.actions.bundle.manifest import SCHEMA
from gkdtop.actions.bundle.write import SYSTEM_TREES, BundlePathError, default_bundle_path

__all__ = [
    "ENV_NAMES", "ENV_PREFIXES", "FILTERED_LINES", "NVIDIA_SMI_TIMEOUT", "PACKAGES", "RAY_SESSION_PATTERNS",
    "RAY_TIMEOUT", "SCHEMA", "SESSION_LOGS", "STACK_FILES", "STACK_FILE_MAX", "STACK_FR_FILES", "STEPS",
    "SYSTEM_TREES", "TAIL_BYTES", "TAIL_LINES", "TRACE_FILE_MAX", "TRACE_TOTAL_MAX", "BundlePathError",
    "Progress", "build_bundle", "bundle_command", "default_bundle_path", "default_stacks_dir", "env_allowed",
    "tail_lines",
]
