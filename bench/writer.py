"""A training job's log at a chosen rate: `python bench/writer.py PATH --rate 100000 [--lines N] [--rotate-every M]`.

Lines look like a verl run's (Ray prefixes, ANSI colour, Python-logging timestamps of the moment,
tqdm `\\r` redraws, step lines, NCCL noise); about a third match the default filter. Every line ends
in ` seq=N`, so a reader can tell how far behind it is. Written in 10 ms batches; rotation is
logrotate's (rename to PATH.1, start a new PATH).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

ESC = "\x1b"
BODIES = [
    "root INFO [ACTOR] update_policy micro_batch={r} loss=0.{r}1 grad_norm=1.{r}",
    "root INFO [ROLLOUT] generate_sequences batch={r} tokens={r}00",
    "root INFO loading shard {r} of model tokenizer cache ok",
    "root INFO NCCL INFO Channel {r}/0 : 1[1] -> 2[2] via P2P/CUMEM/read",
    "root INFO kv block alloc free batch seq len done mem GiB {r}",
    "root INFO Processed prompts: 10%|█ | {r}/100 [00:01<00:09, 9.1it/s]\rProcessed prompts: 50%|█████ | 50/100",
    "root WARNING WARN torch.distributed: barrier took 1.{r}s",
    "root INFO step:{r} - actor/pg_loss:0.12 - actor/entropy:1.3 - timing_s/step:31.2 - timing_s/gen:12.0",
    "root INFO dataloader worker 3 fetched batch of 512 samples from shard {r}",
]
WEIGHTS = [25, 10, 20, 10, 20, 4, 3, 1, 7]  # mostly noise; a step line in a hundred


def templates(n: int = 1000, seed: int = 11) -> list[str]:
    """`n` line bodies with a `{ts}` slot for the time of writing and a Ray prefix on most."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        body = rng.choices(BODIES, WEIGHTS)[0].replace("{r}", str(rng.randint(0, 999)))
        prefix = f"(WorkerDict pid={2000 + i % 8}, ip=10.0.0.{i % 4 + 1}) " if i % 4 else ""
        if prefix and i % 3 == 0:
            prefix = f"{ESC}[36m{prefix[:-1]}{ESC}[0m "
        out.append(prefix.replace("{", "{{").replace("}", "}}") + "{ts} " + body.replace("{", "{{").replace("}", "}}"))
    return out


def asctime(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f",{int(t * 1000) % 1000:03d}"


def write(path: str, rate: float, lines: int | None, rotate_every: int | None, seconds: float | None) -> int:
    """Append lines to `path` at `rate` per second until `lines` or `seconds`; returns the count written."""
    tpl = templates()
    k = len(tpl)
    fh = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - reopened on rotation
    started = time.monotonic()
    seq = 0
    in_file = 0
    try:
        while True:
            now = time.monotonic()
            elapsed = now - started
            if seconds is not None and elapsed >= seconds:
                break
            target = int(elapsed * rate) + 1 if rate > 0 else seq + 10_000
            if lines is not None:
                target = min(target, lines)
            if target > seq:
                ts = asctime(time.time())
                end = target
                if rotate_every:
                    end = min(end, seq + rotate_every - in_file)
                fh.write("".join(tpl[i % k].format(ts=ts) + f" seq={i}\n" for i in range(seq, end)))
                fh.flush()
                in_file += end - seq
                seq = end
                if rotate_every and in_file >= rotate_every:
                    fh.close()
                    os.replace(path, path + ".1")
                    fh = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115
                    in_file = 0
                continue
            if lines is not None and seq >= lines:
                break
            time.sleep(0.01)
    finally:
        fh.close()
    return seq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--rate", type=float, default=1000, help="lines per second (0: as fast as possible)")
    parser.add_argument("--lines", type=int, help="stop after this many lines")
    parser.add_argument("--seconds", type=float, help="stop after this long")
    parser.add_argument("--rotate-every", type=int, help="rotate after this many lines")
    args = parser.parse_args()
    n = write(args.path, args.rate, args.lines, args.rotate_every, args.seconds)
    print(f"wrote {n} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
