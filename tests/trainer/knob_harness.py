"""Run a tiny posttrain run and record what it did, so two runs that differ in one config key can be
compared (tests/trainer/test_honoured_keys.py; a module name no other test folder uses).

A run is the `posttrain train` command, in-process, on a 1-layer model and the sort task: the
`prepare` section, every stage, checkpoint, file and refusal. What it did is an `Observation`: the
rollouts it sampled, the embedding lookups of every forward pass (which model, what shape: the
batching), the worker pools it started, every logged metric, the weights of every model it wrote,
the files under its directory, what it printed and its exit status. Two runs of one config give
equal observations (timings aside), so a difference is the changed key's doing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import Qwen2ForSequenceClassification
from transformers.models.qwen2.modeling_qwen2 import Qwen2MLP

from posttrain.cli import main
from posttrain.models.tiny import build_tiny_tokenizer, make_tiny_config, make_tiny_model
from posttrain.rewards import parallel
from posttrain.rollout.hf_engine import HFEngine
from posttrain.tasks import write_task_data

# 8 training prompts in batches of 4 x 2 responses: two steps are one epoch. One mini-batch and one
# micro-batch per step, a learning rate large enough that every optimizer knob moves the weights.
BASE = (
    "data.max_prompt_length=32", "data.max_response_length=6", "data.train_batch_size=4", "rollout.n=2",
    "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=8", "critic.ppo_mini_batch_size=4",
    "critic.ppo_micro_batch_size_per_gpu=8", "trainer.total_training_steps=2", "trainer.logger=[jsonl]",
    "actor.optim.lr=1e-3", "critic.optim.lr=1e-3",
)
TIMED = ("timing/", "perf/")  # metrics that measure time differ between any two runs

# Reward functions for the reward-section knobs: `flaky` fails on about half the answers.
REWARD_PY = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return float(solution_str.strip()[:1] == str(ground_truth)[:1]) + bonus


def by_length(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str) / 10.0


def chat_turns(data_source, solution_str, ground_truth, extra_info=None):
    return float(len((extra_info or {}).get("raw_chat") or []))


def flaky(data_source, solution_str, ground_truth, extra_info=None):
    if len(set(solution_str)) % 2:
        raise ValueError("an odd number of distinct characters")
    return 1.0
'''


@dataclass(frozen=True)
class Observation:
    """What one run did; each field is one kind of observable a knob may change."""

    prompts: tuple  # prompt ids of every training rollout, in order
    responses: tuple  # response ids of every training rollout
    validation: tuple  # (prompt ids, response ids) of every validation rollout
    forwards: tuple  # every embedding lookup (which weights, ids shape) and MLP call (hidden shape)
    pools: tuple  # (kind, size) of every worker pool started: reward processes, filter processes, decode threads
    metrics: tuple  # every logged (file, step, name, value) but timings
    weights: tuple  # digest of the tensors of every model.safetensors written (final policies, exports)
    files: tuple  # every file written, relative, with a digest of its bytes unless it is a log or state
    printed: int  # lines printed
    exit: tuple  # (exit status, error message): a refused config or a failed run

    def differences(self, other: Observation) -> list[str]:
        """Names of the observables that differ."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


@dataclass(frozen=True)
class Assets:
    """What runs read, made once: the policy, a second critic model, a reward model, the sort task
    (and a copy with another seed, and prompts of varied lengths) and a reward-function file."""

    root: Path
    model: Path
    data: Path

    def expand(self, override: str, run_root: Path) -> str:
        """`{root}`: the run's own directory; `{data}`: the task data; `{assets}`: all of these."""
        return override.replace("{root}", str(run_root)).replace("{data}", str(self.data)).replace("{assets}", str(self.root))


def make_reward_model(path: Path) -> None:
    """A tiny sequence classifier with the character tokenizer (the scores of a reward model)."""
    make_tiny_model(path, layers=1, hidden=32, heads=4, seed=1)
    config = make_tiny_config(layers=1, hidden=32, heads=4, kv_heads=4, vocab_size=len(build_tiny_tokenizer()), max_position=512)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        Qwen2ForSequenceClassification(config).save_pretrained(path)


def _varied(data: Path) -> None:
    """The training prompts with 0, 6, ..., 42 extra digits: rows of 26 to 68 tokens (short ones
    pack two to a row), for packing and overlong filtering."""
    rows = pq.read_table(data / "train.parquet").to_pylist()
    for i, row in enumerate(rows):
        digits = row["prompt"][0]["content"].strip(":=") + ("1234567890" * 5)[: 6 * i]
        row["prompt"][0]["content"] = f":{digits}="
        row["reward_model"]["ground_truth"] = "".join(sorted(digits))
    pq.write_table(pa.Table.from_pylist(rows), data / "varied.parquet")


# A chat template that reads a keyword of apply_chat_template (data.apply_chat_template_kwargs).
# data.sampler: a curriculum whose order moves on by 3 rows for every update() (each scored step)
SAMPLER_PY = '''
class Rotating:
    def __init__(self, data_source, data_config):
        self.n, self.updates = len(data_source), 0
    def update(self, batch):
        assert len(batch.positions) == len(batch.scores) > 0
        self.updates += 1
    def __iter__(self):
        for i in range(self.n):  # lazily: a step's update moves the rest of the pass
            yield (i + 3 * self.updates) % self.n
'''

FLAG_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if flag %}!{% endif %}<|im_start|>assistant\n"
)


def make_assets(root: Path) -> Assets:
    """Everything under `root`; `root/lib` holds two modules for the external_lib keys, each
    printing one line when imported (put it on sys.path to use them)."""
    model = Path(make_tiny_model(root / "model", layers=1, hidden=32, heads=4, seed=0))
    make_tiny_model(root / "critic_model", layers=1, hidden=32, heads=4, seed=3)
    make_reward_model(root / "rm")
    write_task_data("sort", root / "data", train=8, test=4, sft=8, dpo=8)
    write_task_data("sort", root / "data2", train=8, test=4, sft=0, dpo=0, seed=1)
    _varied(root / "data")
    (root / "data" / "reward.py").write_text(REWARD_PY)
    (root / "data" / "flag.jinja").write_text(FLAG_TEMPLATE)
    (root / "data" / "sampler.py").write_text(SAMPLER_PY)
    tokenizer = root / "tokenizer"  # the policy's tokenizer with another chat template
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tokenizer / name).write_bytes((model / name).read_bytes())
    (tokenizer / "chat_template.jinja").write_text(FLAG_TEMPLATE.replace("{% if flag %}!{% endif %}", "#"))
    (root / "lib").mkdir()
    for name in ("knob_policy_lib", "knob_critic_lib"):
        (root / "lib" / f"{name}.py").write_text(f"print('{name} imported')\n")
    return Assets(root, model, root / "data")


@contextlib.contextmanager
def _recording() -> Iterator[dict[str, list]]:
    """Record every rollout, embedding lookup and worker pool while the run lasts."""
    seen: dict[str, list] = {"train": [], "val": [], "forwards": [], "weights": [], "pools": []}
    generate, embedding, mlp = HFEngine.generate, F.embedding, Qwen2MLP.forward
    thread_init, process_init = concurrent.futures.ThreadPoolExecutor.__init__, concurrent.futures.ProcessPoolExecutor.__init__
    worker_init = parallel._Worker.__init__

    def recording_generate(engine, prompts, params, **kw):
        out = generate(engine, prompts, params, **kw)
        rows = (out.prompt_ids.tolist(), out.response_ids.tolist())
        seen["val" if prompts.uid and prompts.uid[0].startswith("val") else "train"].append(rows)
        return out

    def recording_embedding(ids, weight, *args, **kw):
        if not any(w is weight for w in seen["weights"]):
            seen["weights"].append(weight)
        seen["forwards"].append((next(i for i, w in enumerate(seen["weights"]) if w is weight), tuple(ids.shape)))
        return embedding(ids, weight, *args, **kw)

    def recording_mlp(module, x):  # inside the decoder layer: run again in backward under checkpointing
        seen["forwards"].append(("mlp", tuple(x.shape)))
        return mlp(module, x)

    def pool(kind, init):
        def recording_init(self, max_workers=None, *args, **kw):
            seen["pools"].append((kind, max_workers))
            init(self, max_workers, *args, **kw)
        return recording_init

    def recording_worker(self, *args, **kw):
        seen["pools"].append(("reward process", 1))
        worker_init(self, *args, **kw)

    HFEngine.generate, F.embedding, Qwen2MLP.forward = recording_generate, recording_embedding, recording_mlp
    concurrent.futures.ThreadPoolExecutor.__init__ = pool("threads", thread_init)
    concurrent.futures.ProcessPoolExecutor.__init__ = pool("processes", process_init)
    parallel._Worker.__init__ = recording_worker
    try:
        yield seen
    finally:
        HFEngine.generate, F.embedding, Qwen2MLP.forward = generate, embedding, mlp
        concurrent.futures.ThreadPoolExecutor.__init__ = thread_init
        concurrent.futures.ProcessPoolExecutor.__init__ = process_init
        parallel._Worker.__init__ = worker_init


def _metrics(root: Path) -> tuple:
    out = []
    for path in sorted(root.rglob("metrics.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            step = record.pop("step")
            out += [(str(path.relative_to(root)), step, k, v) for k, v in sorted(record.items()) if not k.startswith(TIMED)]
    return tuple(out)


# Files compared by name only: their bytes differ between two runs of one config (timings, hosts,
# profiler traces),
# config.yaml and prepare.json echo the settings: a changed key must show in what the run made.
VOLATILE = (".jsonl", "stage_complete.json", "report.html", "tfevents", "config.yaml", "prepare.json", "_rank0.json")


def _files(root: Path) -> tuple:
    """Every file under `root` with a digest of its bytes (the run's own path replaced by <root>)."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = str(path.relative_to(root))
        if any(mark in name for mark in VOLATILE):
            out.append(name.split("events.out.tfevents")[0])  # TensorBoard names its files by host and time
        else:
            data = path.read_bytes().replace(str(root).encode(), b"<root>")
            out.append((name, hashlib.sha256(data).hexdigest()[:16]))
    return tuple(out)


def _weights(root: Path) -> tuple:
    out = []
    for path in sorted(root.rglob("model.safetensors")):
        h = hashlib.sha256()
        for name, tensor in sorted(load_file(str(path)).items()):
            h.update(name.encode())
            h.update(tensor.float().numpy().tobytes())
        out.append((str(path.relative_to(root)), h.hexdigest()[:16]))
    return tuple(out)


def observe(assets: Assets, overrides: tuple[str, ...], name: str, first: tuple[str, ...] | None = None) -> Observation:
    """Run `posttrain train` on the base config with `overrides` (later ones win) in a directory of
    its own, and record what it did; `first`: the overrides of an unrecorded run in the same
    directory before it (for the keys of a rerun: resuming, refusing a used directory)."""
    root = assets.root / "runs" / name
    root.mkdir(parents=True)
    config = root.parent / f"{name}.yaml"
    config.write_text("{}\n")

    def args(extra: tuple[str, ...]) -> list[str]:
        return [
            f"model.path={assets.model}", f"data.train_files={assets.data / 'train.parquet'}", *BASE,
            f"trainer.root_dir={root}", *(assets.expand(o, root) for o in extra),
        ]

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if first is not None and main(["train", str(config), *args(first)]) != 0:
            raise AssertionError(f"the first run of {name} failed: {err.getvalue()[-2000:]}")
    out, err = io.StringIO(), io.StringIO()
    with _recording() as seen, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["train", str(config), *args(overrides)])
    errors = [line for line in err.getvalue().splitlines() if line.startswith("posttrain: error")]
    return Observation(
        prompts=tuple(str(p) for p, _ in seen["train"]),
        responses=tuple(str(r) for _, r in seen["train"]),
        validation=tuple(str(v) for v in seen["val"]),
        forwards=tuple(seen["forwards"]),
        pools=tuple(seen["pools"]),
        metrics=_metrics(root),
        weights=_weights(root),
        files=_files(root),
        printed=len(out.getvalue().splitlines()),
        exit=(status, "\n".join(errors).replace(str(config), "<config>").replace(str(root), "<root>")),
    )
