"""`build_bundle`: the gather steps in order into one private archive, the manifest last.

A step that fails is recorded and the bundle goes on (one broken source must not lose the rest of the
report); the archive is written to a private temporary file and renamed into place only when complete,
so a bundle on disk is always a whole one.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gkdtop.actions.bundle.gather import STEPS, Gatherer
from gkdtop.actions.bundle.manifest import manifest
from gkdtop.actions.bundle.write import (
    ArchiveWriter,
    default_bundle_path,
    json_bytes,
    open_private,
    output_path,
    root_name,
)

Progress = Callable[[str, int, int], None]


def build_bundle(
    monitor_or_store: Any,
    out: Path | None = None,
    progress: Progress | None = None,
    *,
    now: float | None = None,
    stacks_dir: Path | None = None,
    trace_prefix: str | None = None,
    ray_tmp: Path | None = None,
) -> Path:
    """Write the bundle; returns its path. `out` may be a file or an existing directory.

    stacks_dir, trace_prefix and ray_tmp override where stack dumps, Flight Recorder dumps and the
    Ray sessions are looked for (tests; defaults: ~/.cache/gkdtop/stacks, /tmp/nccl_trace_rank_*, $RAY_TMPDIR/ray).
    """
    now = time.time() if now is None else now
    if out is None:
        out = default_bundle_path(now)
    out = output_path(Path(out).expanduser(), now)
    bundle = Gatherer(monitor_or_store, now, stacks_dir, trace_prefix, ray_tmp)
    root = root_name(out)
    total = len(STEPS) + 1
    fd, tmp = open_private(out)
    try:
        with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz", compresslevel=6) as tar:
            writer = ArchiveWriter(tar, root, now)
            for done, (label, method) in enumerate(STEPS):
                if progress is not None:
                    progress(label, done, total)
                try:
                    getattr(bundle, method)(writer)
                except Exception as exc:  # one broken source must not lose the rest of the report
                    bundle.errors.append({"step": label, "error": f"{type(exc).__name__}: {exc}"[:500]})
            if progress is not None:
                progress("manifest", len(STEPS), total)
            writer.add("manifest.json", json_bytes(manifest(bundle, writer, now)), "this file")
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if progress is not None:
        progress("done", total, total)
    return out
