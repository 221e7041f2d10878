"""Seconds to move a decoupled run's weights from the trainer to an explorer, by sync_method.

    python benchmarks/weight_sync.py --mb 64 256 1024

For each size, a state of float32 tensors of 16 MiB each (a stand-in for a model's weights) is
published by this process (the trainer's side) and taken by a second process (an explorer's side,
started with multiprocessing's spawn), as a decoupled run does:

- `checkpoint`: WeightFiles: the trainer writes step_<k>.safetensors (and latest.txt), the explorer
  reads the file (posttrain.buffer.weights);
- `nccl` / `memory` on a CPU machine: WeightServer / WeightClient: the trainer copies the state into
  host memory and the explorer receives it over a gloo pair group (posttrain.buffer.weight_channel).

Prints the trainer's publish time, the explorer's load time (until it has read every byte once; its
first load includes joining the store and the pair group: the second, steady-state load is shown too) and the checksum both sides
agree on. Files go to a temporary directory on the machine's disk (`--dir` to choose it).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from posttrain.buffer.weight_channel import WeightClient, WeightServer  # noqa: E402
from posttrain.buffer.weights import WeightFiles  # noqa: E402

TENSOR_MB = 16


def state_of(mb: int) -> dict[str, torch.Tensor]:
    n = max(1, mb // TENSOR_MB)
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(TENSOR_MB << 18, generator=g) for i in range(n)}  # 16 MiB of float32 each


def checksum(state: dict[str, torch.Tensor]) -> float:
    return float(sum(t.double().sum() for t in state.values()))


def explorer(method: str, directory: str, steps: list[int], out) -> None:
    weights = WeightFiles(directory) if method == "checkpoint" else WeightClient(directory, 0, timeout_s=600)
    for step in steps:
        while (weights.latest() or 0) < step:
            time.sleep(0.01)
        t = time.perf_counter()
        state = weights.load(step)
        for tensor in state.values():  # read every byte, as an engine copying them in does (safetensors maps the file lazily)
            tensor.sum()
        out.send((time.perf_counter() - t, checksum(state)))  # the trainer publishes the next step after this


def run(method: str, mb: int, root: Path) -> tuple[float, list[float], bool]:
    state = state_of(mb)
    with tempfile.TemporaryDirectory(dir=root) as directory:
        trainer = (WeightFiles(directory) if method == "checkpoint"
                   else WeightServer(directory, 1, "gloo", "cpu", timeout_s=600))
        ctx = mp.get_context("spawn")
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=explorer, args=(method, directory, [1, 2], theirs))
        proc.start()
        publish, loads, sums = [], [], []
        for step in (1, 2):
            t = time.perf_counter()
            trainer.publish(state, step)
            publish.append(time.perf_counter() - t)
            load_s, total = mine.recv()
            loads.append(load_s)
            sums.append(total)
        proc.join()
        if isinstance(trainer, WeightServer):
            trainer.close()
    return min(publish), loads, all(abs(s - checksum(state)) < 1e-6 * max(1.0, abs(s)) for s in sums)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    print(f"{'MiB':>6} {'method':>11} {'publish s':>10} {'first load s':>13} {'load s':>8} {'same':>5}")
    for mb in args.mb:
        for method in ("checkpoint", "nccl"):
            publish, loads, same = run(method, mb, args.dir)
            shown = method if method == "checkpoint" else "nccl (gloo)"
            print(f"{mb:>6} {shown:>11} {publish:>10.3f} {loads[0]:>13.3f} {loads[1]:>8.3f} {str(same):>5}", flush=True)


if __name__ == "__main__":
    main()
