"""The GRPO example on 1 and on N worker processes: step time, throughput, weight-sync time, memory.

    python benchmarks/scaling.py                              # 1 and 2 workers, 20 GRPO steps, CPU
    python benchmarks/scaling.py --workers 1 2 4 --steps 40 --workdir /tmp/scaling
    python benchmarks/scaling.py --launcher ray               # the workers as Ray actors

Each count runs `posttrain train examples/grpo.yaml cluster.n_gpus_per_node=N` (N = 1 is the plain
single process) in a working directory where the tiny model and the sort task were built once, with
the GRPO stage cut to `--steps` steps (the SFT warm-up runs as written). From the GRPO stage's
metrics.jsonl it prints, averaged over the steps after the first two (compilation, allocator
warm-up): seconds per step, tokens per second, and the phases that change with the worker count
(rollout, actor update, weight sync); from /proc, every worker process's peak resident memory. It
also checks that the first GRPO step's score is the same for every count (sampling is keyed by
prompt and sample, not by rank).

On a 2-core machine two workers share the same two cores one process had, so they need not be
faster: what this measures is what the split costs (collectives, the engine's own copy of the
weights, the weight sync) and that nothing is lost. Timing lives here, never in a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIDS = re.compile(r"\(pids ([\d, ]+)\)")


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run(workers: int, steps: int, workdir: Path, launcher: str) -> dict:
    run_dir = workdir / f"run-{workers}-{launcher}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a finished run in place would be reported, not run again
    args = [sys.executable, "-u", "-m", "posttrain", "train", str(ROOT / "examples" / "grpo.yaml"),
            f"trainer.default_local_dir={run_dir}", f"cluster.n_gpus_per_node={0 if workers == 1 else workers}",
            f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[jsonl]", f"cluster.launcher={launcher}"]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if workers > 1:
        env.pop("OMP_NUM_THREADS", None)  # the launcher gives each worker its share of the cores
    proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks: dict[int, float] = {}
    pids = [proc.pid] if workers == 1 else []

    def sample() -> None:
        while proc.poll() is None:
            for pid in list(pids):
                rss = peak_rss_mib(pid)
                if rss is not None:
                    peaks[pid] = max(peaks.get(pid, 0.0), rss)
            time.sleep(0.2)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out = []
    for line in proc.stdout:
        out.append(line)
        found = PIDS.search(line)
        if found:
            pids.extend(int(p) for p in found.group(1).split(", "))
    proc.wait()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{workers} workers: posttrain train failed (exit {proc.returncode}):\n{''.join(out)[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "rl" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "timing/step_s" in r]
    steady = rows[2:] or rows

    def mean(key: str) -> float:
        values = [r[key] for r in steady if key in r]
        return sum(values) / len(values) if values else float("nan")

    return {
        "workers": workers, "step_s": mean("timing/step_s"), "tokens_per_s": mean("perf/tokens_per_s"),
        "gen_s": mean("timing/gen_s"), "update_s": mean("timing/update_actor_s"), "sync_s": mean("timing/sync_s"),
        "first_score": rows[0]["critic/score/mean"], "peak_rss_mib": sorted(peaks.values(), reverse=True),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=20, help="GRPO steps per run")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/posttrain-scaling"))
    parser.add_argument("--launcher", choices=["local", "ray"], default="local")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for cmd in (["make-model", "tiny", "outputs/tiny-model"], ["make-data", "sort", "outputs/sort"]):
        if not (args.workdir / cmd[2]).exists():
            subprocess.run([sys.executable, "-m", "posttrain", *cmd], cwd=args.workdir, check=True, capture_output=True)
    results = [run(n, args.steps, args.workdir, args.launcher) for n in args.workers]
    print(f"GRPO example, {args.steps} steps (mean over steps 3..{args.steps}), {os.cpu_count()} CPU cores, launcher {args.launcher}")
    print(f"{'workers':>7}  {'s/step':>7}  {'tokens/s':>9}  {'gen s':>6}  {'update s':>8}  {'sync s':>7}  {'1st score':>9}  peak RSS per process (MiB)")
    for r in results:
        rss = ", ".join(f"{v:.0f}" for v in r["peak_rss_mib"])
        print(f"{r['workers']:>7}  {r['step_s']:>7.3f}  {r['tokens_per_s']:>9.0f}  {r['gen_s']:>6.3f}  {r['update_s']:>8.3f}  "
              f"{r['sync_s']:>7.4f}  {r['first_score']:>9.4f}  {rss}")
    same = len({round(r["first_score"], 6) for r in results}) == 1
    print("first-step score equal across worker counts:", "yes" if same else "NO")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
