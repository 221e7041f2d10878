"""Run the whole quickstart once per seed, as a new user would, and print what it achieved.

    python benchmarks/quickstart_seeds.py                      # seeds 1 2 3, 2 threads
    python benchmarks/quickstart_seeds.py --seeds 1 --threads 1 --workdir /tmp/qs

Each seed runs ``posttrain train examples/quickstart.yaml trainer.seed=S`` in its own fresh working
directory, so the timing includes what a fresh clone pays: building the tiny model and the task
(the `prepare` section), the SFT warm-up, GRPO, the evaluations and the report. Per seed it prints
greedy held-out accuracy before and after RL, the gain in points, sampled accuracy before and after,
and the wall time; then one summary line. The README's table comes from this script. Timing belongs
here, never in a test; run it on a quiet machine (other processes on the cores skew the wall time).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(sampled )?accuracy (before|after) RL(?: \([^)]*\))?: ([\d.]+)%$")


def run_seed(config: Path, seed: int, threads: int, workdir: Path, overrides: list[str]) -> dict:
    """One quickstart run in a fresh `workdir`; its accuracies (percent) and wall seconds."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "posttrain", "train", str(config), f"trainer.seed={seed}", *overrides],
                         cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (workdir / "stdout.txt").write_text(out.stdout)
    if out.returncode != 0:
        raise SystemExit(f"seed {seed}: posttrain train failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    found: dict[str, float] = {"wall_s": wall}
    for line in out.stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            found[("sampled_" if match.group(1) else "greedy_") + match.group(2)] = float(match.group(3))
    missing = {"greedy_before", "greedy_after"} - set(found)
    if missing:
        raise SystemExit(f"seed {seed}: no 'accuracy before/after RL' lines in the output ({workdir / 'stdout.txt'})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--threads", type=int, default=2, help="torch/OpenMP threads (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the per-seed directories (default: a temp dir)")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = parser.parse_args(argv)
    parent = args.workdir or Path(tempfile.mkdtemp(prefix="quickstart-seeds-"))
    print(f"config {args.config}, {args.threads} threads, runs under {parent}")
    print("seed | greedy before | greedy after | gain (points) | sampled before | sampled after | wall")
    results = []
    for seed in args.seeds:
        r = run_seed(args.config.resolve(), seed, args.threads, parent / f"seed{seed}", args.overrides)
        results.append(r)
        gain = r["greedy_after"] - r["greedy_before"]
        print(f"{seed} | {r['greedy_before']:.1f}% | {r['greedy_after']:.1f}% | {gain:+.1f} | "
              f"{r.get('sampled_before', float('nan')):.1f}% | {r.get('sampled_after', float('nan')):.1f}% | "
              f"{r['wall_s']:.0f} s", flush=True)
    gains = [r["greedy_after"] - r["greedy_before"] for r in results]
    walls = [r["wall_s"] for r in results]
    print(f"summary: {len(results)} seeds, greedy gain min {min(gains):+.1f} mean {sum(gains) / len(gains):+.1f} "
          f"max {max(gains):+.1f} points; wall max {max(walls):.0f} s mean {sum(walls) / len(walls):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
