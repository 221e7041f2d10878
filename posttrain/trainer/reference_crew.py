"""The reference model on devices of its own: a crew of k processes that the trainer asks for log-probs.

With cluster.device_mapping.ref apart from the actor's devices (ROLL's `reference.device_mapping`),
the reference is not built on the trainer workers. The run starts a crew beside the trainer (the
launcher's `launch_halves`, as it starts a split explorer), one process per device of the ref list,
and the RL step's `ref.compute_logprobs(batch)` becomes a request to it:

    trainer rank 0 --batch--> crew rank 0 --(crew world)--> every crew rank computes its share of rows
    trainer rank 0 <--log-probs (B, T)-- crew rank 0 <--(gathered on every crew rank)--
    trainer rank 0 --(trainer world)--> every trainer rank

The two rank 0s meet the way the weight channel's ends do (posttrain.buffer.weight_channel): the
trainer's rank 0 opens a TCP store, writes its address with a token to `reference_crew/channel.json`
in the run directory, and the crew's rank 0 joins it and a process group of two. Each request's size
(and each answer's shape, or the crew's error) goes through the store; the bytes go over the pair
group (gloo, from host memory: a batch of token ids is small beside the weights).

The crew builds its reference as the trainer would (`rl_build.crew_reference`): the stage's starting
model (or `ref.model_path`'s teacher), frozen, with ref.* micro-batching, and each of `ref.teachers`
(on-policy distillation's several teachers, which then live on the crew's devices too). A request
names the model it is for ("" for the reference, else the teacher's name): the trainer's teachers are
`CrewModel`s of the one client. With several crew processes
the model is sharded over them with FSDP2 (`ref.fsdp_config`) and each computes a share of the rows,
exactly as a colocated reference shards over the trainer workers: one memory footprint per device
whatever k is, and the same code path, so a crew of k computes what k trainer workers would.

Ends: the trainer's `close` tells the crew to stop and waits briefly for it to leave; a trainer that
dies takes its store with it, and the crew ends with an error (the launcher reports whichever ended
first). A crew that dies or hangs leaves the trainer's request unanswered: the launcher stops the
trainer and names the crew process, or the request times out after cluster.rpc_timeout_s.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from posttrain.buffer.weight_channel import broadcast, open_channel, pair_group, reach_store, read_channel
from posttrain.checkpoint.manager import kill_point
from posttrain.errors import UserError
from posttrain.records import RolloutBatch

CREW_ENV = "POSTTRAIN_REFERENCE_CREW"  # "reference" in the crew's processes; the other halves' name in theirs
CHANNEL = "channel.json"
_POLL_S = 0.005  # how often a waiting end looks at the store
_BYE_S = 5.0  # how long the trainer's close waits for the crew to leave (the crew polls every _POLL_S)


class ReferenceCrewError(UserError):
    """The reference crew failed, did not answer, or could not be reached."""


def crew_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "reference_crew"


def forward_rows(batch: RolloutBatch) -> RolloutBatch:
    """What the reference forward reads of a batch, on the CPU: ids, masks, images, with the record's
    other required fields (small); texts and later stages' tensors stay behind."""
    rows = len(batch)

    def cpu(t: Tensor) -> Tensor:
        return t.detach().to("cpu")

    return RolloutBatch(
        prompt_ids=cpu(batch.prompt_ids), prompt_mask=cpu(batch.prompt_mask), response_ids=cpu(batch.response_ids),
        response_mask=cpu(batch.response_mask), rollout_logprobs=cpu(batch.rollout_logprobs),
        weights_version=cpu(batch.weights_version), group_index=list(batch.group_index), data_source=[""] * rows,
        ground_truth=[None] * rows, extra_info=[{}] * rows, raw_prompt=[""] * rows, vision=batch.vision,
    )


def _to_bytes(obj) -> Tensor:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes(data: Tensor):
    # our own two processes wrote it (a RolloutBatch with lists and images): not weights-only
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=False)


class ReferenceCrewClient:
    """The trainer's side, the `reference` role of its `RLRoles`: `compute_logprobs(batch)` as the
    colocated `ReferencePolicy` answers it. Every trainer rank holds one and calls it together; rank
    0 alone talks to the crew and hands the answer to the others (`world.from_main`)."""

    def __init__(self, run_dir: Path, world, timeout_s: float):
        self.dir, self.world, self.timeout_s = crew_dir(run_dir), world, timeout_s
        self.store = self.group = None
        self.n = 0
        if world.is_main:
            self._open()

    def _open(self) -> None:
        """The store the crew joins, and its address with a fresh token (a rerun's crew may read an older file first)."""
        self.store = open_channel(self.dir / CHANNEL, self.timeout_s)

    def _wait(self, key: str, what: str) -> bytes:
        """The value of `key` once the crew sets it; a crew that leaves it unset past cluster.rpc_timeout_s fails the run."""
        deadline = time.monotonic() + self.timeout_s
        while not self.store.check([key]):
            if time.monotonic() > deadline:
                # "timed out": the launcher then names the crew process that stopped responding (cluster.launch)
                raise ReferenceCrewError(
                    f"timed out waiting for the reference crew (cluster.device_mapping.ref) to {what}: nothing within "
                    f"cluster.rpc_timeout_s={self.timeout_s:g} s; see its log reference.log (and reference_rank<r>.log) in the run's log folder")
            time.sleep(_POLL_S)
        return self.store.get(key)

    def compute_logprobs(self, batch: RolloutBatch, model: str = "") -> Tensor:
        """log pi of each response token under the crew's `model` ("": the reference; else a teacher of
        ref.teachers), (B, T), 0 on padding: the crew's answer."""
        logprobs = self._ask(batch, model) if self.world.is_main else None
        logprobs = self.world.from_main(logprobs)  # (B, T) on every trainer rank
        return logprobs.to(batch.response_mask.device)

    def _ask(self, batch: RolloutBatch, model: str) -> Tensor:
        if self.group is None:  # the crew joins once its model is loaded
            self._wait("hello", "come up")
            self.group = pair_group(dist.PrefixStore("pair/", self.store), 0, "gloo", self.timeout_s, torch.device("cpu"))
        n = self.n
        self.n += 1
        payload = _to_bytes(forward_rows(batch))
        self.store.set(f"req/{n}", json.dumps({"bytes": payload.numel(), "model": model}))
        broadcast(self.group, payload, root=0)
        meta = json.loads(self._wait(f"res/{n}", "answer a request for reference log-probs"))
        if "error" in meta:
            raise ReferenceCrewError(f"the reference crew failed on a request for log-probs: {meta['error']}")
        out = torch.empty(meta["shape"], dtype=getattr(torch, meta["dtype"]))
        broadcast(self.group, out, root=1)
        return out

    def close(self) -> None:
        """Tell the crew to stop, and give it a moment to leave before this process (and the store) goes."""
        if self.store is None:
            return
        self.store.set("stop", "1")
        deadline = time.monotonic() + _BYE_S
        while time.monotonic() < deadline and not self.store.check(["bye"]):
            time.sleep(_POLL_S)
        self.store = None


class CrewModel:
    """One of ref.teachers served by the crew: the trainer's teacher role, asking the one client."""

    def __init__(self, client: ReferenceCrewClient, name: str):
        self.client, self.name = client, name

    def compute_logprobs(self, batch: RolloutBatch) -> Tensor:
        return self.client.compute_logprobs(batch, self.name)


# ---------------------------------------------------------------- the crew
STOP = "stop"


class CrewEnd:
    """The crew rank 0's end of the line to the trainer: `next()` waits for the next request (its
    batch) or the trainer's stop (None); `answer` sends the log-probs back."""

    def __init__(self, run_dir: Path, timeout_s: float):
        self.dir, self.timeout_s = crew_dir(run_dir), timeout_s
        self.store = self.group = None
        self.n = 0

    def connect(self) -> None:
        """Join the current trainer's store (a rerun's trainer writes a new channel file) and the pair
        group. No deadline: the trainer may take long to build its roles, and a trainer that fails or
        finishes without asking (a complete run) ends the crew through the launcher."""
        while True:
            info = read_channel(self.dir / CHANNEL)
            store = reach_store(info, self.timeout_s) if info is not None else None
            if store is not None:
                break
            time.sleep(0.2)
        self.store = store
        store.set("hello", "1")
        self.group = pair_group(dist.PrefixStore("pair/", store), 1, "gloo", self.timeout_s, torch.device("cpu"))

    def next(self) -> tuple[RolloutBatch, str] | None:
        """The next request's batch and the name of the model it is for, or None once the trainer stops."""
        key = f"req/{self.n}"
        while True:
            try:  # (`check` of several keys is true only when all are there: one key at a time)
                if self.store.check([key]):
                    break
                if self.store.check([STOP]):  # the trainer is done
                    self.store.set("bye", "1")
                    return None
            except (RuntimeError, dist.DistStoreError):
                raise ReferenceCrewError("the trainer went away without stopping the reference crew (see the trainer's log)") from None
            time.sleep(_POLL_S)
        request = json.loads(self.store.get(key))
        payload = torch.empty(int(request["bytes"]), dtype=torch.uint8)
        broadcast(self.group, payload, root=0)
        return _from_bytes(payload), str(request["model"])

    def answer(self, logprobs: Tensor) -> None:
        out = logprobs.detach().to("cpu").contiguous()
        self.store.set(f"res/{self.n}", json.dumps({"shape": list(out.shape), "dtype": str(out.dtype).removeprefix("torch.")}))
        broadcast(self.group, out, root=1)
        self.n += 1

    def fail(self, err: BaseException) -> None:
        """Tell the trainer why this request has no answer (it stops with the message)."""
        try:
            self.store.set(f"res/{self.n}", json.dumps({"error": f"{type(err).__name__}: {err}"}))
        except (RuntimeError, dist.DistStoreError):
            pass


def crew_devices(cfg) -> list[int] | None:
    """The reference crew's devices when this run starts one: its RL stage (one: the config checks
    refuse a crew with stages) trains with a reference (a KL term, or a teacher) or ref.teachers, and
    cluster.device_mapping.ref lies apart from the actor's devices (or on some of them); None
    otherwise. An explorer alone (trainer.mode explore) has no reference to serve."""
    from posttrain.config import stage_configs
    from posttrain.config.access import reference_crew_devices
    from posttrain.config.checks import role_needs

    stages = [s.config for s in stage_configs(cfg)]
    if len(stages) != 1 or stages[0].algorithm.kind != "rl" or stages[0].trainer.mode not in ("both", "train"):
        return None
    return reference_crew_devices(stages[0]) if role_needs(stages[0]).reference or stages[0].ref.teachers else None


def serve_reference(cfg, run_dir: Path, world, build) -> None:
    """A crew process's whole life: build the models it serves (`build(cfg, tokenizer, world)`:
    `rl_build.crew_reference`, which builds the trainer's roles and so imports this module; by
    request name), join the trainer (rank 0), answer its requests until it stops."""
    from posttrain.models.loading import tokenizer_from_config
    from posttrain.trainer.stage import seed_everything

    seed_everything(cfg.trainer.seed)
    models = build(cfg, tokenizer_from_config(cfg.model), world)
    end = CrewEnd(run_dir, cfg.cluster.rpc_timeout_s) if world.is_main else None
    if end is not None:
        end.connect()
    served = serve(models, world, end)
    if world.is_main:
        print(f"posttrain: the reference crew ({world.size} process(es)) answered {served} request(s) for log-probs", flush=True)


def serve(models: dict, world, end: CrewEnd | None) -> int:
    """The crew's loop on every crew rank: rank 0 takes each request from the trainer and hands the
    batch to the others; every rank computes with the model the request names (`models`: "" the
    reference, else a teacher's name; a collective when sharded); rank 0 answers. Returns the number
    of requests served."""
    served = 0
    while True:
        request = end.next() if world.is_main else None
        request = world.from_main(request)
        if request is None:
            return served
        batch, name = request
        kill_point("reference", served + 1, "request", world.rank)  # the test hook (posttrain.checkpoint.manager)
        try:
            if name not in models:
                raise KeyError(f"the crew serves {sorted(models)}, not {name!r}")
            logprobs = models[name].compute_logprobs(batch.to(world.torch_device))  # (B, T)
        except Exception as err:
            if end is not None:
                end.fail(err)
            raise
        if end is not None:
            end.answer(logprobs)
        served += 1
