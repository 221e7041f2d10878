"""`trainer.mode: serve` (Trinity-RFT's serve mode): the run's policy behind an OpenAI-compatible
endpoint for outside agents, whose calls become the experiences a `trainer.mode: train` run learns from.

    agent -> POST /v1/chat/completions -> engine -> answer (token ids, log-probs), recorded
    agent -> POST /feedback {reward, msg_ids, task_id?, run_id?} -> those completions rewarded
    agent -> POST /commit -> the rewarded completions become the buffer's next explored batch
    train run (same config, trainer.mode train) -> claims that batch as its next step -> checkpoints
    this server, every explorer.service_status_check_interval s -> newest checkpoint -> served weights

The endpoint is `posttrain.rollout.server`'s, with the engine the stage's explorer would build
(`rollout.*`) over `model.path`, served at the policy's temperature (the request's is ignored, as in
Trinity-RFT: the trainer's log-probs assume it). Each completion is recorded in the served history
(`posttrain.buffer.served`, `explorer.db_url`) before its answer leaves; feedback for an id it never
recorded is a 404 that changes nothing; a commit the buffer refuses is a 503 and the completions wait
for the next one. `GET /health` and `GET /metrics` (the history's counts and the served step) are
there too. Concurrent completions share engine calls as `posttrain serve`'s do (posttrain.rollout.server:
requests at the policy's one temperature, batched apart only by seed), each recorded with its own
prompt ids and exactly the rows it would have drawn alone.

Weights follow the trainer's checkpoints (`trainer.save_freq`; Trinity-RFT's checkpoint
synchronizer): the newest intact `global_step_N` under the stage's checkpoint directory is copied
into the engine between two engine calls (under the engine's lock, which every batched call holds:
a request arriving meanwhile waits for the copy, none is refused, and no batch is split across two
weight versions), and every completion records the step of the weights that answered
it, which the trainer logs as `async/staleness`. A checkpoint this cannot read (sharded, LoRA) is
named once and the previous weights keep serving.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from posttrain.buffer.experience import Experience
from posttrain.buffer.operators import run_pipeline
from posttrain.buffer.served import ServedHistory, UnknownCompletion
from posttrain.checkpoint.layout import step_dirs
from posttrain.checkpoint.load import load_weights
from posttrain.checkpoint.manifest import verify_checkpoint
from posttrain.checkpoint.sharded import is_dcp_role
from posttrain.config.access import explorer_processes
from posttrain.config.schema import Config
from posttrain.errors import ConfigError
from posttrain.models.loading import causal_lm_from_config, tokenizer_from_config
from posttrain.models.lora import is_adapter_dir
from posttrain.models.precision import compute_dtype
from posttrain.rollout.server import BATCH_WINDOW_S, ChatService, NotFound, RequestError, Unavailable, make_server
from posttrain.trainer.decoupled import buffer_path, explorer_devices, open_buffer
from posttrain.trainer.preflight import check_model_dir
from posttrain.trainer.rl_build import engine_precision, make_engine
from posttrain.trainer.rl_settings import policy_temperature


def check_serve(cfg: Config) -> None:
    """What a serve run cannot do, refused before any model is built; the model directory is checked."""
    if cfg.algorithm.kind != "rl":
        raise ConfigError(f"trainer.mode=serve serves an RL stage's policy; algorithm.kind is {cfg.algorithm.kind!r}")
    if explorer_processes(cfg) > 1:
        raise ConfigError("trainer.mode=serve runs one engine in one process; give cluster.device_mapping.rollout one engine's devices "
                          "(Trinity: explorer.rollout_model.engine_num 1)")
    url = cfg.explorer.db_url
    if url and "://" in url and not url.startswith("sqlite:///"):
        raise ConfigError(f"explorer.db_url={url}: the served history is an SQLite file; give a path or a sqlite:/// URL")
    check_model_dir(cfg)


def history_path(cfg: Config, stage_dir: Path) -> Path:
    url = cfg.explorer.db_url
    return Path(url.removeprefix("sqlite:///")).expanduser() if url else stage_dir / "serve" / "proxy_history.sqlite"


@dataclass
class Serving:
    """A running endpoint (`start_serving`); `stop()` ends it."""

    server: Any
    service: ChatService
    history: ServedHistory
    checkpoints: Path
    interval_s: float
    step: int = 0  # the checkpoint step the engine serves (0: model.path)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _refused: set[int] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def follow(self) -> int:
        """Load the newest intact checkpoint newer than the served one; the step served after it."""
        found = [(s, p / "actor") for s, p in step_dirs(self.checkpoints) if s > self.step and s not in self._refused]
        for step, actor in reversed(found):
            if not verify_checkpoint(actor.parent).intact:
                continue  # still being written (or damaged): an older one, or the next look
            if is_dcp_role(actor) or is_adapter_dir(actor):
                self._refused.add(step)
                print(f"[serve] {actor}: a sharded or LoRA checkpoint; serve loads whole-model checkpoints, so the weights of "
                      f"step {self.step} keep serving", flush=True)
                continue
            engine = self.service.engine
            with self.service.lock:  # between two engine calls (a batched call holds the lock)
                load_weights(engine.model, actor)
                engine.update_weights(engine.model, step)  # the weights are in place: mark their version
            self.step = step
            print(f"[serve] serving the weights of global_step_{step}", flush=True)
            break
        return self.step

    def _follow_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.follow()
            except Exception as err:  # a checkpoint that fails to load: the old weights keep serving
                print(f"[serve] loading a checkpoint failed ({type(err).__name__}: {err}); serving step {self.step}", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        for t in self._threads:
            t.join()
        self.history.close()


def start_serving(cfg: Config, stage_dir: Path, checkpoints: Path, port: int | None = None) -> Serving:
    """Build the engine and start the endpoint, the weight follower and the history in threads of
    this process (`port`: explorer.proxy_port unless given; 0 picks a free one)."""
    check_serve(cfg)
    open_buffer(cfg, stage_dir).close()  # a buffer path that cannot be written is refused now, not at the first commit
    history = ServedHistory(history_path(cfg, stage_dir))
    _recover(cfg, stage_dir, history)
    tokenizer = tokenizer_from_config(cfg.model)
    engine = make_engine(cfg, _engine_model(cfg), tokenizer, owns_weights=True)

    def record(call_id: str, prompt_ids: list[int], out, version: int) -> None:
        texts = [tokenizer.decode(out.response_ids[i, : int(out.response_mask[i].sum())].tolist(), skip_special_tokens=True) for i in range(len(out))]
        history.record(call_id, prompt_ids, out, version, tokenizer.decode(prompt_ids), texts)

    service = ChatService(engine, tokenizer, Path(cfg.model.path).name, recorder=record, temperature=policy_temperature(cfg),
                          batch_window=BATCH_WINDOW_S)
    serving = Serving(None, service, history, checkpoints, cfg.explorer.service_status_check_interval)
    serving.follow()  # the newest checkpoint already there (Trinity's serve syncs once at start)
    host, port = cfg.explorer.listen_address, cfg.explorer.proxy_port if port is None else port
    try:
        serving.server = make_server(service, host, port, routes={"/feedback": lambda body: _feedback(history, body), "/commit": lambda body: _commit(cfg, stage_dir, history)},
        get_routes={"/health": lambda: {"status": "ok"},
                    "/metrics": lambda: {**history.counts(), "served_step": serving.step, "rollout/model_0/model_version": serving.step}},
        )
    except OSError as err:
        history.close()
        raise ConfigError(f"explorer.listen_address/proxy_port: cannot listen on {host}:{port} ({err.strerror or err}); "
                          "choose another port (0: a free one) or stop what holds it") from None
    for target in (serving.server.serve_forever, serving._follow_loop):
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        serving._threads.append(thread)
    return serving


def _engine_model(cfg: Config) -> Any:
    """The policy as the explorer's engine holds it (posttrain.trainer.rl_build.build_roles): on the
    first rollout device when CUDA is there (the CPU otherwise), in `rollout.dtype`."""
    device = torch.device("cuda", explorer_devices(cfg)[0]) if torch.cuda.is_available() else torch.device("cpu")
    policy = causal_lm_from_config(cfg.model, device=device)
    actor_compute = compute_dtype(cfg.actor.fsdp_config.mixed_precision.param_dtype, device)
    engine_dtype, _ = engine_precision(policy, actor_compute, cfg.rollout.dtype)
    return policy.eval().requires_grad_(False).to(engine_dtype)


def pipeline(cfg: Config) -> Callable[[Experience], Experience]:
    """data_processor.experience_pipeline's operators over a committed batch (Trinity-RFT runs them at
    its commit too); their metrics join the batch's."""
    operators = list(cfg.data_processor.experience_pipeline.operators)

    def apply(experience: Experience) -> Experience:
        if not operators:
            return experience
        batch, scores, texts, metrics = run_pipeline(operators, experience.batch, experience.scores, experience.texts)
        return dataclasses.replace(experience, batch=batch, scores=scores, texts=texts,
                                   reward_metrics={**experience.reward_metrics, **metrics})
    return apply


def _recover(cfg: Config, stage_dir: Path, history: ServedHistory) -> None:
    buffer = open_buffer(cfg, stage_dir)
    try:
        for b in history.recover(buffer, pipeline(cfg)):
            print(f"[serve] batch {b} was committed but not written (the server stopped between the two); written now", flush=True)
    finally:
        buffer.close()


def _feedback(history: ServedHistory, body: dict[str, Any]) -> dict[str, Any]:
    reward, ids = body.get("reward"), body.get("msg_ids")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not isinstance(ids, list) or not ids \
            or not all(isinstance(i, str) for i in ids):
        raise RequestError("feedback needs reward (a number) and msg_ids (a non-empty list of completion ids); task_id and run_id are optional")
    task, run = body.get("task_id"), body.get("run_id", 0)
    if task is not None and not isinstance(task, (str, int)) or isinstance(run, bool) or not isinstance(run, int):
        raise RequestError("feedback: task_id must be a string and run_id an integer")
    try:
        done = history.feedback(float(reward), ids, None if task is None else str(task), run)
    except UnknownCompletion as err:
        raise NotFound(f"feedback: no completion with id(s) {', '.join(err.args[0])} was served here; nothing was rewarded") from None
    return {"status": "success", **done}


def _commit(cfg: Config, stage_dir: Path, history: ServedHistory) -> dict[str, Any]:
    try:
        buffer = open_buffer(cfg, stage_dir)
        try:
            batch, rows = history.commit(buffer, pipeline(cfg))
        finally:
            buffer.close()
    except Exception as err:  # a refused path, a full disk, a locked file: a 503, never a dead server
        where = buffer_path(cfg, stage_dir)
        raise Unavailable(f"commit: the experience buffer {where} could not be written ({err}); the rewarded completions "
                          "wait for the next commit") from None
    if batch == 0:
        return {"status": "success", "batch": None, "rows": 0, "note": "no rewarded completion waits for a commit"}
    return {"status": "success", "batch": batch, "rows": rows}


def serve_forever(cfg: Config, stage_dir: Path, checkpoints: Path) -> int:
    """The command: serve until Ctrl-C (or SIGTERM)."""
    import signal

    serving = start_serving(cfg, stage_dir, checkpoints)
    host = cfg.explorer.listen_address
    print(f"[serve] serving {cfg.model.path} (step {serving.step}) on http://{host}:{serving.port}/v1; POST /feedback and /commit "
          f"write rewarded completions to {buffer_path(cfg, stage_dir)} (Ctrl-C stops)", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        serving.stop()
    return 0
