"""The reward role as the trainer sees it: responses in, one score per response out.

Combines the rule/custom reward function (through a reward manager) with an optional reward model:
score = function_weight x function score + reward_model_weight x reward-model score. With
`reward.workers` the function score comes from the workers that claim each sample's tag
(`posttrain.rewards.routing`). Built once per stage from the `reward` section; the trainer calls
`score` (or `start`, whose job it joins later: reward.launch_reward_fn_async) and `close`.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import torch

from posttrain.algorithms import overlong_penalty
from posttrain.cluster.parallel import DataParallel, contiguous_shares
from posttrain.config.schema import Config
from posttrain.errors import ConfigError, ModelError, UserError
from posttrain.records import RolloutBatch
from posttrain.rewards import RewardFunction, RewardInput, RewardOutput, build_reward_manager, load_reward_function
from posttrain.config.sections.reward import JUDGE
from posttrain.config.sections.auxiliary import CHAT_JUDGES
from posttrain.rewards.auxiliary import AuxiliaryServers, start_auxiliary
from posttrain.rewards.chat_judges import ChatJudgeSpec, chat_judge_spec
from posttrain.rewards.judge import JudgeSpec, judge_spec
from posttrain.rewards.query_filter import GroupFilter, filter_groups
from posttrain.rewards.routing import RewardRouter, RoutedWorker, label_worker
from posttrain.rewards.scorers import BUILTIN_SCORERS, load_scorer
from posttrain.rewards.types import WorkerTally
from posttrain.workers.microbatch import SINGLE

class Scored(NamedTuple):
    """A scored batch: final scores (B,) (function x function_weight + reward model + overlong
    penalty), the batch's reward metrics, the extra values of dict-returning functions (each (B,)),
    and the reward function's own scores (B,) before weights and penalties."""

    scores: torch.Tensor
    metrics: dict[str, float]
    extra: dict[str, list[float]]
    function_scores: torch.Tensor


# What scores a stage's responses: one reward function, or each reward worker's by name (an LLM
# judge's is its checked spec; its model loads when the reward stage is built; a chat judge's
# connects to its auxiliary model's server then).
Worker = RewardFunction | JudgeSpec | ChatJudgeSpec
Scorers = RewardFunction | dict[str, Worker]


def reward_function(cfg: Config) -> Scorers:
    """The configured reward function (or each reward worker's), imported and its signature checked."""
    if cfg.reward.workers:
        return {name: worker_function(cfg, name) for name in cfg.reward.workers}
    f = cfg.reward.custom_reward_function
    if f.path is None and f.name in BUILTIN_SCORERS:  # a built-in scorer for every sample, by its name
        return load_scorer(f.name, dict(f.reward_kwargs), "reward.custom_reward_function.name")
    return load_reward_function(f.path, f.name, dict(f.reward_kwargs))


def worker_function(cfg: Config, name: str) -> Worker:
    """Reward worker `name`'s scorer, called with its reward_kwargs (and reward_type when set), or
    an LLM judge's or a chat judge's checked spec."""
    w = cfg.reward.workers[name]
    if w.worker_cls in CHAT_JUDGES:
        return chat_judge_spec(w.worker_cls, dict(w.reward_kwargs), f"reward.workers.{name}")
    if w.worker_cls == JUDGE:
        return judge_spec(f"reward.workers.{name}", judge_prompt=w.judge_prompt, model_args=dict(w.model_args),
                          generating_args=dict(w.generating_args), infer_batch_size=w.infer_batch_size,
                          reward_kwargs=dict(w.reward_kwargs), chat_template_name=w.chat_template_name,
                          engine=w.engine, cluster=cfg.cluster)
    kwargs = dict(w.reward_kwargs)
    if w.reward_type is not None:
        kwargs["reward_type"] = w.reward_type
    remote = cfg.reward.sandbox_fusion
    if w.worker_cls == "code" and remote.url:  # the code worker's programs run on the remote sandbox
        kwargs["sandbox_fusion"] = {"url": remote.url, "max_concurrent": remote.max_concurrent, "memory_limit_mb": remote.memory_limit_mb}
    return load_scorer(w.worker_cls, kwargs, f"reward.workers.{name}.worker_cls")


def worker_manager(cfg: Config, name: str) -> tuple[str, dict[str, Any]]:
    """(manager, options) of reward worker `name`: reward.reward_manager's, or with world_size a
    process pool of that many processes."""
    size = cfg.reward.workers[name].world_size
    options = manager_options(cfg)
    if size is None:
        return cfg.reward.reward_manager, options
    options["num_workers"] = size
    return "parallel", options


def build_router(cfg: Config, fns: dict[str, Worker], urls: dict[str, str] | None = None) -> RewardRouter:
    """The reward workers of `cfg.reward.workers`, each with its own manager (`fns`: their scorers;
    an LLM judge or a chat judge is a manager of its own, run on the calling thread; `urls`: the
    auxiliary models' servers the chat judges call)."""
    routed = []
    for name, w in cfg.reward.workers.items():
        kind, options = worker_manager(cfg, name)
        fn = fns[name]
        if isinstance(fn, ChatJudgeSpec):
            manager, kind = fn.build(urls or {}), "naive"
        elif isinstance(fn, JudgeSpec):
            manager = fn.build(on_error=cfg.reward.on_error, failure_reward=cfg.reward.failure_reward, seed=cfg.trainer.seed)
            kind = "naive"
        else:
            manager = build_reward_manager(kind, fn, **options)
            label_worker(manager, name)
        routed.append(RoutedWorker(name, manager, tuple(w.tag_included), w.weight, w.response_length_penalty_coef, kind == "naive"))
    return RewardRouter(routed)


def group_filters(cfg: Config) -> dict[str, list[tuple[str, GroupFilter]]]:
    """tag -> [(worker, filter)] of the reward workers with a query filter; empty when none has one."""
    out: dict[str, list[tuple[str, GroupFilter]]] = {}
    for name, w in cfg.reward.workers.items():
        qf = w.query_filter_config
        if qf.type == "no_filter":
            continue
        for tag in w.tag_included:
            out.setdefault(tag, []).append((name, GroupFilter.from_config(qf.type, qf.filter_args)))
    return out


def manager_options(cfg: Config) -> dict[str, Any]:
    """The keyword arguments of the configured reward manager."""
    r = cfg.reward
    options: dict[str, Any] = {"on_error": r.on_error, "failure_reward": r.failure_reward, "timeout_s": r.timeout_s}
    if r.reward_manager == "parallel":
        options.update(num_workers=r.num_workers)
    return options


def input_tokenizer(cfg: Config) -> Any:
    """reward.reward_model.input_tokenizer loaded (None when unset); a ModelError names the key."""
    path = cfg.reward.reward_model.input_tokenizer
    if path is None:
        return None
    from posttrain.models.loading import load_tokenizer

    try:
        return load_tokenizer(path, trust_remote_code=cfg.model.trust_remote_code)
    except ModelError as err:
        raise ModelError(f"reward.reward_model.input_tokenizer: {err}") from None


class RewardStage:
    """Scores decoded responses; `score` returns (scores (B,), metrics)."""

    def __init__(self, cfg: Config, tokenizer: Any, fn: Scorers | None = None, dp: DataParallel = SINGLE,
                 device: torch.device | str = "cpu"):
        """``fn``: what `reward_function` already loaded (loaded here when None). ``device``: where
        the reward model computes (this worker's device; reward_model.param_offload keeps its weights
        in host memory between passes).
        ``dp``: with several worker processes each scores a consecutive share of the rows (a reward
        function runs once per sample in the whole run) and every rank receives all the scores."""
        self.dp = dp
        r = cfg.reward
        fn = fn or reward_function(cfg)
        # reward.auxiliary_models: served while this stage scores (their URLs in POSTTRAIN_AUX_<NAME>_URL)
        self.auxiliary: AuxiliaryServers | None = None
        if r.auxiliary_models:
            self.auxiliary = start_auxiliary(r.auxiliary_models, seed=cfg.trainer.seed, cluster=cfg.cluster)
        try:
            if isinstance(fn, dict):
                self.manager = build_router(cfg, fn, self.auxiliary.urls if self.auxiliary else None)
            else:
                self.manager = build_reward_manager(r.reward_manager, fn, **manager_options(cfg))
        except BaseException:
            if self.auxiliary is not None:  # no server outlives a stage that failed to build
                self.auxiliary.stop()
            raise
        self.tokenizer = tokenizer
        self.group_filters = group_filters(cfg)
        self.reads_prompts = any(w.worker_cls in (JUDGE, *CHAT_JUDGES) for w in r.workers.values())  # a judge reads the question
        # the detection scorer rescales a pixel-answering policy's boxes by the row's processed image size
        self.passes_image_grids = any(w.worker_cls == "detection" for w in r.workers.values()) or (
            not r.workers and r.custom_reward_function.path is None and r.custom_reward_function.name == "detection")
        self.function_weight = r.function_weight
        # algorithm.adv_estimator gdpo: the components each training batch's rows carry (reward_components)
        self.component_keys = list(cfg.algorithm.gdpo_reward_keys) if cfg.algorithm.adv_estimator == "gdpo" else []
        crf = r.custom_reward_function
        self.fn_label = "of reward.workers" if r.workers else f"{crf.path}:{crf.name}" if crf.path else repr(crf.name)
        # function_weight 0 with a reward model: its score is the reward and the function is not called
        # (verl's rule; a data source without a scorer then trains); reward workers are always called
        self.skips_function = r.function_weight == 0 and r.reward_model.enable and not r.workers
        self.rm_weight = r.reward_model_weight
        self.overlong = r.overlong_buffer if r.overlong_buffer.enable else None
        self.overlong_settings = r.overlong_buffer  # the ramp, also for validation entries that turn it on alone
        # where the overlong ramp ends: verl DAPO's max_resp_len, else the response budget
        self.max_response_length = r.overlong_buffer.max_resp_len or cfg.rollout.response_length or cfg.data.max_response_length
        self.reward_model = None
        self.rm_input_tokenizer = None  # reward_model.input_tokenizer: decodes responses for re-rendering
        if r.reward_model.enable:
            from posttrain.rewards import RewardModelScorer

            rm = r.reward_model
            self.reward_model = RewardModelScorer(
                rm.path, micro_batch_size=rm.micro_batch_size_per_gpu, max_length=rm.max_length,
                max_tokens=rm.forward_max_token_len_per_gpu if rm.use_dynamic_bsz else None,
                trust_remote_code=rm.trust_remote_code, external_lib=rm.external_lib,
                remove_padding=rm.use_remove_padding, device=str(device), offload=rm.param_offload, truncation=rm.truncation,
            )
            self.rm_input_tokenizer = input_tokenizer(cfg)
        # reward.launch_reward_fn_async: one background thread runs the reward function of a batch
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="reward") if r.launch_reward_fn_async else None

    def informative_rows(self, batch: RolloutBatch, scores: torch.Tensor) -> tuple[list[int] | None, dict[str, float]]:
        """The rows the query filters keep (None: every row) and their counts of groups."""
        if not self.group_filters:
            return None, {}
        rows, metrics = filter_groups(batch.group_index, batch.data_source, scores, self.group_filters)
        return (None if len(rows) == len(batch) else rows), metrics

    def decode(self, batch: RolloutBatch) -> list[str]:
        return response_texts(self.tokenizer, batch)

    def score(
        self, batch: RolloutBatch, texts: list[str], overlong_rows: list[bool] | None = None,
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, list[float]]]:
        """Scores (B,), batch metrics, and the per-sample extra values of dict-returning functions.
        ``overlong_rows``: which rows get the overlong penalty (validation entries with their own
        setting, data.val_file_settings); None: every row when reward.overlong_buffer.enable."""
        scored = self.start(batch, texts, background=False, overlong_rows=overlong_rows).result()
        return scored.scores, scored.metrics, scored.extra

    def score_parts(self, batch: RolloutBatch, texts: list[str]) -> Scored:
        """`score`'s results, with the reward function's own scores beside the final ones, for a
        training batch: with adv_estimator gdpo its `reward_components` are filled too."""
        return self.start(batch, texts, background=False, training=True).result()

    def start(self, batch: RolloutBatch, texts: list[str], *, background: bool, overlong_rows: list[bool] | None = None,
              training: bool = False) -> "RewardJob":
        """Begin scoring: the reward model scores now; the reward function runs now, or with
        `background` on this stage's thread (reward.launch_reward_fn_async) while the caller computes
        log-probs. `RewardJob.result` joins it. Only the function goes to the thread: the gather
        across ranks is a collective and stays on the main thread, in step with the other ranks.
        A `training` batch gets its GDPO reward components when the result is joined."""
        rows = contiguous_shares(len(batch), self.dp.size)[self.dp.rank]  # every row with one process
        lengths = batch.response_mask.sum(1).long().tolist()  # response tokens: a worker's length penalty
        questions = self.questions(batch, rows) if self.reads_prompts else {}
        samples = [
            RewardInput(data_source=batch.data_source[i], solution_str=texts[i], ground_truth=batch.ground_truth[i],
                        extra_info=_extra_info(batch, i, self.passes_image_grids), index=i, response_length=lengths[i], prompt=questions.get(i, ""),
                        group=batch.group_index[i])
            for i in rows
        ]
        rm = None
        if self.reward_model is not None:
            rm = self._reward_model_scores(batch[rows], [texts[i] for i in rows]).tolist() if rows else []
        if self.skips_function or not samples:  # the reward model alone (function_weight 0): not called, as in verl
            call = functools.partial(RewardOutput, [0.0] * len(samples))
        else:
            call = functools.partial(self.manager.score, samples)
        components = batch if training and self.component_keys else None
        if background and self.executor is not None:
            return RewardJob(self, self.executor.submit(call), rm, lengths, overlong_rows, components)
        done: Future = Future()
        done.set_result(call())  # a reward error is raised here, as before
        return RewardJob(self, done, rm, lengths, overlong_rows, components)

    def finish(self, out: RewardOutput, rm: list[float] | None, lengths: list[int], overlong_rows: list[bool] | None = None) -> Scored:
        """Combine this rank's function output and reward-model scores (gathered from every rank
        first) into the batch's scores (B,), metrics, per-sample extra values and the function's own
        scores."""
        if self.dp.distributed:  # each rank scored its share: every rank assembles the batch's
            parts = self.dp.gather_objects((out, rm))
            out = merge_outputs([o for o, _ in parts])
            rm = None if rm is None else [v for _, values in parts for v in values]
        scores = out.tensor() * self.function_weight  # (B,)
        metrics = out.metrics()
        if rm is not None:
            rm_scores = torch.tensor(rm, dtype=torch.float32)  # (B,)
            scores = scores + self.rm_weight * rm_scores
            metrics["reward/rm_score"] = float(rm_scores.mean())
        rows = overlong_rows if overlong_rows is not None else [self.overlong is not None] * len(lengths)
        if any(rows):  # DAPO's soft overlong punishment on every score (of the rows that take it), as verl's DAPO manager
            buf = self.overlong_settings
            penalty = overlong_penalty(torch.tensor(lengths), self.max_response_length, buf.len, buf.penalty_factor)
            penalty = penalty * torch.tensor(rows, dtype=penalty.dtype)  # (B,): 0 on rows whose entry turned it off
            scores = scores + penalty  # (B,)
            if buf.log:
                metrics.update({"reward/overlong_reward": float(penalty.mean()), "reward/overlong": float((penalty < 0).float().mean())})
        return Scored(scores, metrics, out.extra, out.tensor())

    def questions(self, batch: RolloutBatch, rows: list[int]) -> dict[int, str]:
        """Each row's question for a judge: the last user message of its raw chat (data.return_raw_chat),
        else its prompt decoded without special tokens, from after the last "user" line (as ROLL)."""
        out = {}
        for i in rows:
            chat = batch.raw_chat[i] if batch.raw_chat is not None else None
            users = [m.get("content", "") for m in chat or [] if isinstance(m, dict) and m.get("role") == "user"]
            if users:
                out[i] = str(users[-1])
                continue
            text = self.tokenizer.decode(batch.prompt_ids[i][batch.prompt_mask[i] > 0].tolist(), skip_special_tokens=True)
            text = text.rpartition("user\n")[2]  # drop a template's system turn and role name
            out[i] = text.removesuffix("assistant\n").rstrip().removesuffix("assistant").rstrip()
        return out

    def _reward_model_scores(self, batch: RolloutBatch, texts: list[str]) -> torch.Tensor:
        """The reward model's score of each response. With reward_model.input_tokenizer (the reward
        model's chat template differs from the policy's, as verl's switch): the response decoded by
        that tokenizer without its eos text, appended to the prompt's chat messages and rendered in
        the reward model's own template. Without: the policy's rendering, prompt text + response."""
        if self.rm_input_tokenizer is None:
            return self.reward_model.score_texts([p + t for p, t in zip(self._prompt_texts(batch), texts)])
        if batch.raw_chat is None or any(chat is None for chat in batch.raw_chat):
            raise ConfigError("reward.reward_model.input_tokenizer: a prompt of this batch has no chat messages to re-render; "
                              "set data.return_raw_chat: true")
        source = self.rm_input_tokenizer
        eos = source.eos_token or ""
        lengths = batch.response_mask.sum(1).long().tolist()
        answers = [source.decode(ids[:n].tolist(), skip_special_tokens=False) for ids, n in zip(batch.response_ids, lengths)]
        answers = [a.replace(eos, "") if eos else a for a in answers]  # the reward model's template closes the turn itself
        return self.reward_model.score_conversations(batch.raw_chat, answers)

    def _prompt_texts(self, batch: RolloutBatch) -> list[str]:
        """Templated prompt texts: the dataset's (data.return_full_prompt), else decoded from the ids."""
        if all(p is not None for p in batch.raw_prompt):
            return list(batch.raw_prompt)
        rows = [ids[mask > 0].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=False)

    def baseline_scores(self, greedy: RolloutBatch, batch: RolloutBatch) -> torch.Tensor:
        """Scores of `greedy` (one response per prompt) for every row of `batch`, matched by prompt
        uid (`group_index`): the per-sample baseline (B,) of estimators such as ReMax."""
        scores, _, _ = self.score(greedy, self.decode(greedy))
        by_prompt = dict(zip(greedy.group_index, scores.tolist()))
        rows = [by_prompt[uid] for uid in batch.group_index]
        return torch.tensor(rows, dtype=torch.float32, device=batch.response_mask.device)  # (B,)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        self.manager.close()
        if self.auxiliary is not None:
            self.auxiliary.stop()


class RewardJob:
    """A batch being scored (`RewardStage.start`); `result` joins the reward function and returns the
    batch's `Scored`, raising the reward function's error if it failed."""

    def __init__(self, stage: RewardStage, future: Future, rm: list[float] | None, lengths: list[int],
                 overlong_rows: list[bool] | None = None, components: RolloutBatch | None = None):
        self.stage, self.future, self.rm, self.lengths, self.overlong_rows = stage, future, rm, lengths, overlong_rows
        self.components = components  # the batch whose reward_components the result fills (GDPO), else None

    def result(self) -> Scored:
        scored = self.stage.finish(self.future.result(), self.rm, self.lengths, self.overlong_rows)
        if self.components is not None:
            self.components.reward_components = reward_components(scored.extra, self.stage.component_keys, self.stage.fn_label)
        return scored


def reward_components(extra: dict[str, list[float]], keys: list[str], fn_label: str) -> torch.Tensor:
    """(B, K) the named components of each response's reward (algorithm.gdpo_reward_keys), from the
    numeric keys of the reward function's returned dicts; a key some response lacks is a UserError
    naming it, the function and the keys it did return."""
    rows = len(next(iter(extra.values()), []))
    columns = []
    for key in keys:
        values = torch.tensor(extra.get(key, []), dtype=torch.float32)
        missing = rows if key not in extra else int(torch.isnan(values).sum())
        if missing or not rows:
            shown = ", ".join(sorted(extra)) or "none besides score"
            raise UserError(f"algorithm.gdpo_reward_keys: the reward function {fn_label} returned no number under {key!r} for "
                            f"{missing or 'all'} of the batch's responses (its dicts' numeric keys: {shown}); return "
                            f"{{'score': ..., {key!r}: ...}} for every response, or name the keys it returns")
        columns.append(values)
    return torch.stack(columns, dim=-1)  # (B, K)


def response_texts(tokenizer: Any, batch: RolloutBatch) -> list[str]:
    """Response texts without padding (special tokens kept, as verl passes them to scorers)."""
    lengths = batch.response_mask.sum(1).long().tolist()
    return [tokenizer.decode(ids[:n].tolist(), skip_special_tokens=False) for ids, n in zip(batch.response_ids, lengths)]


def merge_outputs(parts: list[RewardOutput]) -> RewardOutput:
    """The outputs of consecutive shares of a batch as one output of the whole batch: scores and extra
    values in row order (NaN for the rows of a share whose samples never returned that key, as a
    sample that lacked it gets within one share), failures and reward workers' tallies summed.

    >>> merge_outputs([RewardOutput([1.0], {"acc": [1.0]}), RewardOutput([0.0, 0.5], num_failures=1)]).extra
    {'acc': [1.0, nan, nan]}
    """
    keys = list(dict.fromkeys(k for p in parts for k in p.extra))
    extra = {k: [v for p in parts for v in p.extra.get(k, [float("nan")] * len(p.scores))] for k in keys}
    workers: dict[str, WorkerTally] = {}
    for p in parts:
        for name, tally in p.workers.items():
            workers[name] = workers[name] + tally if name in workers else tally
    return RewardOutput([s for p in parts for s in p.scores], extra, sum(p.num_failures for p in parts), workers)


def _extra_info(batch: RolloutBatch, i: int, image_grids: bool) -> Any:
    """Row i's extra_info, with its chat messages before the template under ``raw_chat`` when
    data.return_raw_chat kept them (a reward function can then read the conversation), and with
    ``image_grids`` its images' patch grids under ``image_grid_thw`` ([[t, h, w], ...], one per image:
    what the detection scorer rescales pixel boxes by) when the row has images."""
    added: dict[str, Any] = {}
    chat = batch.raw_chat[i] if batch.raw_chat is not None else None
    if chat is not None:
        added["raw_chat"] = chat
    vision = batch.vision[i] if image_grids and batch.vision is not None else None
    if vision is not None:
        added["image_grid_thw"] = vision.image_grid_thw.tolist()
    return {**(batch.extra_info[i] or {}), **added} if added else batch.extra_info[i]


def val_overlong_rows(dataset: Any, groups: list[str], row_of: dict[str, int], cfg: Config) -> list[bool] | None:
    """Whether each validation row's score carries the overlong penalty: its entry's own setting
    (data.val_file_settings.<entry>.overlong_penalty), else reward.overlong_buffer.enable; None when
    no entry has one (every row as the training scores). ``groups``: each row's prompt uid,
    ``row_of``: the dataset row of each uid."""
    own = getattr(dataset, "overlong_penalty", None)
    if own is None or not getattr(dataset, "entry_overlong", None):
        return None
    stage = cfg.reward.overlong_buffer.enable
    flags = [own(row_of[uid]) for uid in groups]
    return [stage if flag is None else flag for flag in flags]
