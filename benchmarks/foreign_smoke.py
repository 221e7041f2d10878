"""Smoke every foreign example config the corpus sweep accepts: 2 RL steps each, here, on CPU.

    python benchmarks/foreign_smoke.py --verl /tmp/src/verl --roll /tmp/src/ROLL --trinity /tmp/src/Trinity2 --every 5
    python benchmarks/foreign_smoke.py --trinity /tmp/src/Trinity2 --only async --limit 3

`posttrain config plan` accepting a file (benchmarks/foreign_corpus.py) does not show that the run
works. This script takes the files that sweep counts ``accepted`` or ``machine`` (refused only for what
this machine lacks) and runs ``posttrain smoke`` on each, in a subprocess with a timeout and a fresh
``--workdir``, with the launch words and environment the sweep plans them with. One line per file:
dialect, file, outcome (``ok``, ``failed: <first line of the error>``, ``traceback: <last line>``,
``timeout``), seconds; then counts per dialect. Files run one at a time unless ``--jobs`` says more.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from foreign_corpus import CORPUS, ROLL_ENV, ROOT, TRINITY_ENV, _corpus_name, plan, verl_runs, yaml_runs  # noqa: E402

SMOKEABLE = {"accepted", "machine"}


def candidates(args: argparse.Namespace) -> list[tuple[str, str, Path, list[str], dict[str, str]]]:
    """``(dialect, file, checkout, smoke words, env)`` for each file the sweep accepts (or refuses only
    for the machine), filtered by ``--only`` and thinned by ``--every`` before planning (planning costs)."""
    held = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()}
    runs = []
    for dialect, checkout, env in (("verl", args.verl, {}), ("roll", args.roll, ROLL_ENV), ("trinity", args.trinity, TRINITY_ENV)):
        if checkout is None:
            continue
        found = verl_runs(checkout.resolve()) if dialect == "verl" else yaml_runs(checkout.resolve(), dialect)
        runs += [(dialect, rel, checkout.resolve(), words, env) for rel, words, _ in found
                 if words is not None and _corpus_name(dialect, rel) not in held and (args.only or "") in rel]
    runs = runs[args.offset::args.every]
    out = []
    for dialect, rel, checkout, words, env in runs:
        outcome, _ = plan(words, checkout, env)
        if outcome in SMOKEABLE:
            out.append((dialect, rel, checkout, ["smoke", *words[2:]], env))
        if args.limit and len(out) >= args.limit:
            break
    return out


def smoke(words: list[str], checkout: Path, env: dict[str, str], timeout: float) -> tuple[str, float]:
    """``(outcome, seconds)`` of one `posttrain smoke` run in a subprocess, from the checkout's root."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="foreign-smoke-") as workdir:
        cmd = [sys.executable, "-m", "posttrain", *words, "--workdir", workdir]
        full_env = {**os.environ, **env, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        try:
            done = subprocess.run(cmd, cwd=checkout, env=full_env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start
    seconds = time.monotonic() - start
    if done.returncode == 0:
        return "ok", seconds
    err = done.stderr.strip()
    if "Traceback (most recent call last)" in err:
        return "traceback: " + err.splitlines()[-1][:160], seconds
    first = next((line for line in err.splitlines() if line.strip()), f"exit {done.returncode}, no message")
    return "failed: " + first.removeprefix("posttrain: error: ")[:160], seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", type=Path)
    parser.add_argument("--roll", type=Path)
    parser.add_argument("--trinity", type=Path)
    parser.add_argument("--only", default=None, metavar="SUBSTRING", help="only files whose path contains this")
    parser.add_argument("--every", type=int, default=1, metavar="N", help="take every Nth file (a spread)")
    parser.add_argument("--offset", type=int, default=0, help="with --every: start at this file")
    parser.add_argument("--limit", type=int, default=0, metavar="N", help="stop after N smoke runs")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per file")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    args = parser.parse_args()
    todo = candidates(args)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seconds: dict[str, list[float]] = collections.defaultdict(list)

    def one(item):
        dialect, rel, checkout, words, env = item
        return dialect, rel, *smoke(words, checkout, env, args.timeout)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for dialect, rel, outcome, secs in pool.map(one, todo):
            print(f"{dialect:8s} {rel}  {outcome}  {secs:.0f}s", flush=True)
            counts[dialect][outcome.split(":")[0]] += 1
            seconds[dialect].append(secs)
    print(f"\n{'dialect':8s} {'run':>4s} {'ok':>4s} {'failed':>7s} {'traceback':>10s} {'timeout':>8s} {'mean s':>7s}")
    for dialect, c in counts.items():
        mean = sum(seconds[dialect]) / len(seconds[dialect])
        print(f"{dialect:8s} {sum(c.values()):4d} {c['ok']:4d} {c['failed']:7d} {c['traceback']:10d} {c['timeout']:8d} {mean:7.1f}")
    return 1 if any(c["traceback"] for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
