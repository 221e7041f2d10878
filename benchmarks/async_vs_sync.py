"""The GRPO example in step and decoupled (explorer + trainer processes): time to reach a reward.

    python benchmarks/async_vs_sync.py                          # 100 GRPO steps: sync, interval 1 (split), 2, 4
    python benchmarks/async_vs_sync.py --steps 200 --target 0.6 --workdir /tmp/async

Each variant runs `posttrain train examples/grpo.yaml` (the SFT warm-up, then GRPO cut to
`--steps` steps, validation only at the end) with the synchronizer settings of the variant:
the synchronous loop ("in step"), and `mode: both` as an explorer and a trainer process with
`sync_interval` 1 (`rollout.hybrid_engine: false`: interval 1 with offset 0 is otherwise the
synchronous loop itself), 2 and 4; in a
working directory where the tiny model and the sort task were built once. From the console it
timestamps every GRPO step as it is logged; from metrics.jsonl it reads each step's training reward
and staleness. It prints, per variant: the GRPO stage's wall time and seconds per step, the wall time
until the training reward (mean over the last 10 steps) first reaches `--target` (the same reward for
every variant), the final greedy validation accuracy, and the staleness histogram: how many steps
trained on batches 0, 1, 2... steps stale.

On 2 cores the explorer and the trainer share the same two cores the synchronous loop had, so the
overlap buys little: what this shows is what the split costs or saves here, and that learning
survives staleness. Timing lives here, never in a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^\[rl\] step (\d+)/")
VARIANTS = {
    "in step": [],
    "interval 1 (split)": ["rollout.hybrid_engine=false"],  # both processes, on-policy: what the split alone costs
    "interval 2": ["synchronizer.sync_interval=2"],
    "interval 4": ["synchronizer.sync_interval=4"],
    "interval 1, offset 1": ["synchronizer.sync_offset=1"],
    # split placement by device: a trainer process beside an explorer of two engine processes
    "split, 2 engines": ["cluster.n_gpus_per_node=3", "cluster.device_mapping.actor=[0]", "cluster.device_mapping.rollout=[1,2]"],
}


def run(name: str, overrides: list[str], steps: int, workdir: Path) -> dict:
    run_dir = workdir / ("run-" + re.sub(r"\W+", "-", name))
    args = [sys.executable, "-u", "-m", "posttrain", "train", str(ROOT / "examples" / "grpo.yaml"),
            f"trainer.default_local_dir={run_dir}", f"trainer.total_training_steps={steps}", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[console,jsonl]", *overrides]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stamps: dict[int, float] = {}
    out = []
    for line in proc.stdout:
        out.append(line)
        found = STEP.match(line)
        if found:
            stamps[int(found.group(1))] = time.monotonic() - start
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: posttrain train failed (exit {proc.returncode}):\n{''.join(out)[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "rl" / "metrics.jsonl").read_text().splitlines()]
    scores = {r["step"] - 30: r["critic/score/mean"] for r in rows if "critic/score/mean" in r}  # 30 SFT steps before
    final = next((r for r in reversed(rows) if "val/score/mean" in r), {})
    accuracy = next((v for k, v in final.items() if k.startswith("val/") and "/acc/" in k), float("nan"))
    return {
        "name": name, "stamps": stamps, "scores": scores, "accuracy": accuracy,
        "staleness": Counter(int(r["async/staleness"]) for r in rows if "async/staleness" in r),
    }


def time_to(result: dict, target: float, window: int = 10) -> float | None:
    steps = sorted(result["scores"])
    for i in range(window - 1, len(steps)):
        recent = [result["scores"][s] for s in steps[i - window + 1 : i + 1]]
        if sum(recent) / window >= target:
            return result["stamps"].get(steps[i])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="GRPO steps per run")
    parser.add_argument("--target", type=float, default=0.5, help="training reward (mean of 10 steps) to time")
    parser.add_argument("--variants", nargs="+", default=["in step", "interval 1 (split)", "interval 2", "interval 4"], choices=list(VARIANTS))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/posttrain-async"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for cmd in (["make-model", "tiny", "outputs/tiny-model"], ["make-data", "sort", "outputs/sort"]):
        if not (args.workdir / cmd[2]).exists():
            subprocess.run([sys.executable, "-m", "posttrain", *cmd], cwd=args.workdir, check=True, capture_output=True)
    results = [run(v, VARIANTS[v], args.steps, args.workdir) for v in args.variants]
    print(f"GRPO example, {args.steps} steps after the SFT warm-up, {os.cpu_count()} CPU cores")
    print(f"{'variant':>22}  {'GRPO wall s':>11}  {'s/step':>7}  {f'to reward {args.target}':>15}  {'final acc':>9}  staleness: steps")
    for r in results:
        stamps = r["stamps"]
        first, last = min(stamps), max(stamps)
        wall = stamps[last] - stamps[first]
        reach = time_to(r, args.target)
        reach_text = f"{reach - stamps[first]:.1f} s" if reach is not None else "not reached"
        stale = ", ".join(f"{k}: {v}" for k, v in sorted(r["staleness"].items())) or "0: all (in step)"
        print(f"{r['name']:>22}  {wall:>11.1f}  {wall / max(last - first, 1):>7.3f}  {reach_text:>15}  {r['accuracy']:>9.3f}  {stale}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
