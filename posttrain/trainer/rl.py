"""The RL trainer: one stage of PPO-family training on one machine.

`RLTrainer.step` is the whole algorithm, top to bottom: `explore` (rollout -> reward) then `learn`
(old/reference log-probs -> values -> advantages -> critic update -> actor update), then the weight
sync. Which estimator, loss, KL terms or critic are used are options of the step
(set in the config and resolved in `rl_build`), never branches on an algorithm's name.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posttrain.algorithms import TOKEN_FILTERS, estimator_needs, teacher_routes, variance_proxy_metrics
from posttrain.buffer.experience import Experience
from posttrain.buffer.operators import run_pipeline
from posttrain.checkpoint import Checkpointer, Parts
from posttrain.data import collate_prompts, make_sampler, pad_token_id
from posttrain.data.domains import tag_locations, worker_tag_map
from posttrain.data.loader import ExampleReader
from posttrain.data.rows import prompt_cell
from posttrain.data.train_sampler import make_train_sampler
from posttrain.errors import ConfigError, UserError
from posttrain.records import PromptBatch, RolloutBatch
from posttrain.rollout.base import SamplingParams
from posttrain.rollout.progress import OverRollout
from posttrain.rollout.turn_rows import windowed
from posttrain.tracking import Generation, phase
from posttrain.trainer.agent_fn import has_agent_fn, make_agent_fn
from posttrain.trainer.agentic import AgenticRollout, check_agentic, is_agentic, training_rows
from posttrain.trainer.advantages import (
    agentic_scores, compute_advantages, correct_rollout_mismatch, episode_advantages, filter_by_reward, filter_tokens, make_shaping_state, mask_samples,
    reject_tokens,
)
from posttrain.trainer.metrics import PhaseTimer, batch_metrics, validation_metrics
from posttrain.trainer.preflight import stage_inputs
from posttrain.trainer.deadlines import Attempt, cut_groups, explore_with_deadline, late_prompts, over_rolled_groups
from posttrain.trainer.dynamic_sampling import Round, gather_groups, metric_values
from posttrain.trainer.rewarding import RewardStage, val_overlong_rows
from posttrain.trainer.rollout_mock import RolloutMock
from posttrain.trainer.rollout_tracing import open_rollout_tracer, trace_rollout
from posttrain.trainer.self_judge import JUDGE_SUFFIX, SelfJudge
from posttrain.trainer.mixing import ExpertRows, check_expert_passes, expert_dataset
from posttrain.trainer.images import image_inputs
from posttrain.trainer.rl_build import build_roles
from posttrain.trainer.rl_settings import baseline_sampling_params, mixes_expert_rows, response_length, rollout_seed, sampling_params
from posttrain.trainer.task_log import append_rows, task_rows
from posttrain.trainer.stage import StageContext, StageResult, final_model_dir, open_stage, seed_everything
from posttrain.trainer.tools import make_tool_rollout
from posttrain.trainer.throughput import StepObserver


class RLTrainer:
    """Holds the roles of one RL stage and runs its steps, validations and logging."""

    def __init__(self, ctx: StageContext, halves: str = "both"):
        """`halves`: "both" for the synchronous loop, or one half of a decoupled run
        (`posttrain.trainer.decoupled`): "explorer" (engine and reward; writes no stage files) or
        "learner" (actor, reference, critic)."""
        cfg = ctx.cfg
        seed_everything(cfg.trainer.seed)
        self.ctx, self.cfg = ctx, cfg
        inputs = ctx.inputs or stage_inputs(cfg)  # every check before training (posttrain.trainer.preflight)
        self.tokenizer, self.train_set, self.val_set = inputs.tokenizer, inputs.train_set, inputs.val_set
        # an agentic stage plays environments (posttrain.trainer.agentic): no dataset, sampler or reward function
        self.agent = AgenticRollout(cfg, self.tokenizer, check_agentic(cfg)) if is_agentic(cfg) else None
        # trainer.mode bench without data.train_files (preflight): the validation rows size the stage, never drawn from
        rows = self.val_set if self.train_set is None and self.agent is None else self.train_set
        self.derived, self.trackers = open_stage(ctx, len(rows) if self.agent is None else self.agent.plan.train_size(cfg), writes=halves != "explorer")
        self.tools = make_tool_rollout(cfg, self.tokenizer, ctx.run_dir)  # rollout.multi_turn: conversations with tools
        self.tracer = open_rollout_tracer(ctx, self.trackers, self.tokenizer, writes=halves != "explorer")  # rollout.trace
        self.sampler = None if self.agent else make_train_sampler(cfg.data, rows, worker_tag_map(cfg.reward.workers))
        # data.dataloader_num_workers: processes that template and tokenise each batch
        self.reader = ExampleReader(rows, cfg.data.dataloader_num_workers if self.sampler else 0)
        self.pad_id = pad_token_id(self.tokenizer)
        # expert SFT rows joined to each batch for the mix losses (algorithm.mix); the learning half only
        self.expert = None
        if mixes_expert_rows(cfg) and halves != "explorer":
            expert_set = inputs.expert_set if inputs.expert_set is not None else expert_dataset(cfg, self.tokenizer, image_inputs(cfg, self.tokenizer))
            check_expert_passes(cfg.algorithm.mix, len(expert_set), self.derived.total_training_steps)  # before any model loads
            self.expert = ExpertRows(expert_set, cfg.algorithm.mix.expert_batch_size, self.pad_id, cfg.trainer.seed)
        check_teacher_tags(cfg, None if self.agent else rows)  # before any model loads
        self.roles = build_roles(cfg, self.derived, self.tokenizer, ctx.world, halves, run_dir=ctx.run_dir)
        dp = self.dp = (self.roles.actor or self.roles.rollout).dp
        # rollout.agent.function: a user's agent over a loopback endpoint returns each episode's reward
        self.agent_fn = make_agent_fn(cfg, self.tokenizer, inputs, self.pad_id, ctx.world.size, halves) if has_agent_fn(cfg) else None
        scored = halves != "learner" and not self.agent and self.agent_fn is None
        self.rewards = RewardStage(cfg, self.tokenizer, inputs.reward_fn, dp, ctx.world.torch_device) if scored else None
        # reward.launch_reward_fn_async overlaps scoring with this process's log-prob passes: only when
        # one process explores and learns (a decoupled explorer scores while the trainer trains anyway)
        self.score_in_background = cfg.reward.launch_reward_fn_async and halves == "both" and self.rewards is not None
        self.shaping = make_shaping_state(cfg.algorithm)
        self.operators = list(cfg.data_processor.experience_pipeline.operators)
        self.sampling, self.val_sampling = sampling_params(cfg, self.tokenizer)
        # reward.self_judge: the policy judges each scored group, and trains on its verdicts where the gold reward counts
        self.self_judge = SelfJudge(cfg, self.tokenizer, self.pad_id, self.sampling) if scored and cfg.reward.self_judge.enable else None
        self.baseline_sampling = baseline_sampling_params(cfg, self.sampling)  # None unless the estimator needs it
        self.max_new_tokens = response_length(cfg)
        # perf/* and the profiler; a decoupled explorer holds no policy to measure
        self.observer = StepObserver(cfg, self.roles, ctx, self.derived.total_training_steps) if halves != "explorer" else None
        if cfg.trainer.rollout_mock is not None and halves != "both":
            raise UserError(f"trainer.rollout_mock={cfg.trainer.rollout_mock} dumps or replays the synchronous loop's steps; this run "
                            "explores and trains in two processes (a lagging synchronizer or the engine on devices of its own)")
        self.mock = RolloutMock(cfg.trainer.rollout_mock, cfg.trainer.rollout_mock_dir, writes=ctx.world.is_main)
        self.clock = time.time  # explorer.max_timeout: sets each attempt's deadline and checks the scoring against it; tests pass a fake one

    # ---------------------------------------------------------------- the RL step
    def step(self, prompts: PromptBatch | int, step: int) -> dict[str, float]:
        """One RL step on a batch of prompts: explore it (rollout, reward), learn from it (log-probs,
        advantages, updates), hand the new weights to the engine; returns its metrics. A decoupled
        run (`posttrain.trainer.decoupled`) runs the same two halves in two processes."""
        timer = PhaseTimer(self.observer.watch())
        refill = functools.partial(self._next_prompts, step)  # round r's prompts, for dynamic sampling
        if self.mock.replays:  # trainer.rollout_mock=replay: a dump run's rollouts and rewards of this step
            experience = self.mock.load(self.ctx.step_offset + step)
        else:
            experience = self.explore(prompts, timer, expected_version=self.roles.actor.version, refill=refill)
            self.mock.dump(self.ctx.step_offset + step, experience)  # trainer.rollout_mock=dump
        metrics, train = self.learn(experience, step, timer)
        with timer("sync"):
            self.roles.sync.push(self.roles.actor.version)
        return self.step_metrics(experience, metrics, timer, step, train)

    def explore(
        self, prompts: PromptBatch | int, timer: PhaseTimer, *, expected_version: int, policy_step: int = 0,
        refill: Callable[[int], PromptBatch] | None = None,
    ) -> Experience:
        """Rollout and reward of a batch of prompts with the engine's weights, which must be
        `expected_version` (a missed weight sync fails here, not silently) and are those of trainer
        step `policy_step`. An agentic stage's "prompts" is the step number its env groups are
        seeded by (`posttrain.trainer.agentic`). With algorithm.filter_groups, `refill(r)` gives
        round r's prompts (r >= 2) until enough informative groups are kept
        (`posttrain.trainer.dynamic_sampling`)."""
        rollout, version = self.roles.rollout, expected_version
        if isinstance(prompts, int):  # an agentic step: the step number seeds its env groups
            return self.agent.explore(rollout, self.sampling, prompts, version, timer, policy_step)
        if self.agent_fn is not None:  # the user's agent function: its recorded calls are the rows
            return self.agent_fn.explore(rollout, prompts, self.sampling, version, timer, policy_step, self.operators)
        if self.score_in_background:  # reward.launch_reward_fn_async: `learn` joins it after the log-probs
            batch, tool_metrics = self._rollout(prompts, timer, version)
            with timer("reward"):
                texts = self.rewards.decode(batch)
                job = self.rewards.start(batch, texts, background=True, training=True)
            return Experience(batch, None, texts, tool_metrics, policy_step=policy_step, reward_job=job)
        dynamic: dict[str, float] = {}
        if self.cfg.algorithm.filter_groups.enable:
            def explore_round(r: int) -> Round:
                return self._explore_round(prompts if r == 1 else refill(r), timer, version)

            rnd, dynamic = gather_groups(explore_round, self.cfg.algorithm.filter_groups, self.cfg.data.train_batch_size)
        else:
            rnd = self._explore_round(prompts, timer, version)
        batch, scores, texts, reward_metrics = rnd.batch, rnd.scores, rnd.texts, {**rnd.metrics, **dynamic}
        if self.operators:  # data_processor.experience_pipeline (posttrain.buffer.operators)
            with timer("reward"):
                batch, scores, texts, piped = run_pipeline(self.operators, batch, scores, texts)  # (B'',)
                reward_metrics.update(piped)
        return Experience(batch, scores, texts, reward_metrics, policy_step=policy_step)

    def _rollout(self, prompts: PromptBatch, timer: PhaseTimer, version: int, deadline: float | None = None,
                 over: OverRollout | None = None) -> tuple[RolloutBatch, dict[str, float]]:
        """The responses to a batch of prompts (with the greedy baseline's scores when the estimator
        needs them) and the tool/* metrics. With a `deadline` (explorer.max_timeout) the engine stops
        at it and `batch.timed_out` flags the rows it cut (a cut baseline response flags its group's);
        with `over` (explorer.over_rollout) it also stops once enough groups have finished, flagging
        those rows in `batch.over_rolled` too. The greedy baseline waits for every group."""
        sampling = self.sampling if deadline is None and over is None else dataclasses.replace(self.sampling, deadline=deadline, over_rollout=over)
        with timer("gen"):
            batch, tool_metrics = self._generate(prompts, sampling, version)
        if self.baseline_sampling is not None:
            baseline = self.baseline_sampling if deadline is None else dataclasses.replace(self.baseline_sampling, deadline=deadline)
            with timer("gen_baseline"):
                greedy, _ = self._generate(prompts, baseline, version)
                late = cut_groups(greedy)
                if late:  # the group's baseline is part of its work: unfinished, the whole group is late
                    batch.timed_out = batch.timed_out | torch.tensor([g in late for g in batch.group_index], device=batch.timed_out.device)
                    greedy.timed_out = None
                batch.reward_baselines = self.rewards.baseline_scores(greedy, batch)  # (B,)
        return batch, tool_metrics

    def _explore_round(self, prompts: PromptBatch, timer: PhaseTimer, version: int) -> Round:
        """Rollout and reward of one batch of prompts, the query filters' groups dropped, with the
        filter_groups metric of every response kept; with explorer.max_timeout only the groups that
        finished by the deadline, the late ones generated again or left out (posttrain.trainer.deadlines);
        with explorer.over_rollout the groups still decoding after the first ones finished are left out."""
        x = self.cfg.explorer
        over = OverRollout(x.over_rollout.ratio, x.over_rollout.wait_after_min) if x.over_rollout.ratio > 0 else None
        if x.max_timeout is None:
            rnd = self._attempt(prompts, timer, version, None, over).round
        else:
            rnd = explore_with_deadline(lambda p, deadline, first: self._attempt(p, timer, version, deadline, over if first else None),
                                        prompts, x.max_timeout, x.max_retry_times, self.clock)
        self._feedback(prompts.uid, rnd.batch, rnd.scores)
        return rnd

    def _attempt(self, prompts: PromptBatch, timer: PhaseTimer, version: int, deadline: float | None,
                 over: OverRollout | None = None) -> Attempt:
        """Generate and score the prompts' groups; with a `deadline`, those it cut are late and left
        unscored, and when the scoring ends past it every group is (each rank sees the same). With
        `over` (explorer.over_rollout) the groups its deadline cut are dropped: left out, not late."""
        batch, tool_metrics = self._rollout(prompts, timer, version, deadline, over)
        cancelled = over_rolled_groups(batch)  # every rank gets the gathered batch, flags included: all agree
        late = cut_groups(batch) - cancelled
        batch.timed_out = batch.over_rolled = None
        if over is not None:
            tool_metrics = {**tool_metrics, "rollout/over_rollout_groups": float(len(cancelled))}
        gone = late | cancelled  # the groups this attempt does not score
        if gone:
            on_time = [i for i, g in enumerate(batch.group_index) if g not in gone]
            batch = batch[torch.tensor(on_time, dtype=torch.long)]  # (B',) the on-time groups (long even when empty)
        if len(batch) == 0:  # nothing finished: nothing to score
            rnd = Round(batch, torch.zeros(0), [], dict(tool_metrics), torch.zeros(0))
            return Attempt(rnd, late_prompts(prompts.uid, late), len(cancelled))
        with timer("reward"):  # one phase per step: the profiler's and the timer's "reward" range
            texts = self.rewards.decode(batch)
            scored = self.rewards.score_parts(batch, texts)  # scores (B,)
            values = metric_values(self.cfg.algorithm.filter_groups.metric, scored.scores, scored.function_scores, scored.extra)  # (B,)
            rnd = Round(batch, scored.scores, texts, {**scored.metrics, **tool_metrics}, values)
            responses = len(batch)  # the step's responses; the self-judge's rows follow them
            if self.self_judge is not None:  # reward.self_judge: the policy's verdicts, and its judge rows to train
                with timer("self_judge"):  # a part of the reward phase: timing/self_judge_s
                    judged = self.self_judge(batch, texts, scored.scores, self.rewards.questions(batch, list(range(len(batch)))),
                                             lambda p, sp: self._generate(p, sp, version)[0])
                batch = judged.batch
                rides = {uid: uid.removesuffix(JUDGE_SUFFIX) for uid in batch.group_index[responses:]}  # dynamic sampling keeps them with their prompt
                rnd = Round(batch, judged.scores, judged.texts, {**rnd.metrics, **judged.metrics}, judged.scores, rides)  # (B',)
            # scored past the deadline on any rank: every group scored here is late (the batch is scored together)
            scored_late = deadline is not None and self.dp.sum({"late": float(self.clock() > deadline)})["late"] > 0
            if not scored_late:
                rows, dropped = self.rewards.informative_rows(batch, rnd.scores)  # the query filters
                rnd.metrics.update(dropped)
                if self.cfg.explorer.task_rewards_file is not None and self.ctx.world.is_main:  # every group, before the filters
                    # a late group logs nothing here: like a cancelled Trinity-RFT task, it logs when an attempt finishes it
                    done = [i for i, uid in enumerate(prompts.uid) if uid not in gone]
                    self._log_tasks(prompts[torch.tensor(done, dtype=torch.long)], batch[:responses], rnd.scores[:responses], version)
                rnd = rnd if rows is None else rnd.take(rows)  # (B',)
        if scored_late:
            late |= set(batch.group_index)
            return Attempt(rnd.take([]), late_prompts(prompts.uid, late), len(cancelled))
        return Attempt(rnd, late_prompts(prompts.uid, late), len(cancelled))

    def _log_tasks(self, prompts: PromptBatch, batch: RolloutBatch, scores: torch.Tensor, version: int) -> None:
        """explorer.task_rewards_file: one line per task (posttrain.trainer.task_log)."""
        questions = [prompt_cell(self.train_set.table, i, self.cfg.data)[0] for i in prompts.index]
        append_rows(self.cfg.explorer.task_rewards_file, task_rows(prompts, questions, batch, scores, version))

    def _feedback(self, uids: list[str], batch: RolloutBatch, scores: torch.Tensor) -> None:
        """A data.sampler curriculum sees a batch's scores before it picks the next batch."""
        if hasattr(self.sampler, "feedback"):
            asked = set(uids)  # the prompts' responses (not reward.self_judge's judge rows)
            rows = [i for i, g in enumerate(batch.group_index) if g in asked]
            batch = batch if len(rows) == len(batch) else batch[torch.tensor(rows, dtype=torch.long)]
            self.sampler.feedback(uids, batch.group_index, scores[rows].tolist(), batch.data_source)

    def _generate(self, prompts: PromptBatch, params: SamplingParams, version: int, seed: int | None = None) -> tuple[RolloutBatch, dict[str, float]]:
        """The rollout role's responses, or with tool calling the conversations of the tool rollout
        (each of its turns one batched `generate`); and the tool/* metrics (empty without tools)."""
        rollout = self.roles.rollout
        if self.tools is None:
            return rollout.generate(prompts, params, expected_version=version, seed=seed), {}
        return self.tools.generate(lambda p, sp: rollout.generate(p, sp, expected_version=version, seed=seed), prompts, params, version)

    def _teachers(self, batch: RolloutBatch, on_rows: Callable, metrics: dict[str, float]) -> dict[str, Any]:
        """ref.teachers' inputs of the on_policy_distill estimator: each teacher's log-probs of the
        whole batch (rows it does not take are multiplied by 0: scoring them keeps every worker's
        forward the same size), the rows each takes by tag as ROLL routes them, and the coefficients."""
        spec = self.cfg.ref.teachers
        rows = teacher_routes(list(batch.data_source), [list(t.tag_included) for t in spec.values()], worker_tag_map(self.cfg.reward.workers))
        logprobs = []
        for (name, teacher), taken in zip(self.roles.teachers.items(), rows):
            logprobs.append(on_rows(teacher.compute_logprobs))  # (B, T)
            metrics[f"distill/{name}/row_fraction"] = float(taken.float().mean())
        metrics["distill/untaught_row_fraction"] = float((~rows.any(0)).float().mean())
        return {"teacher_logprobs": logprobs, "teacher_rows": rows.to(batch.response_mask.device), "teacher_coefs": [t.kl_coef for t in spec.values()]}

    def learn(self, experience: Experience, step: int, timer: PhaseTimer) -> tuple[dict[str, float], RolloutBatch]:
        """Old and reference log-probs, values, advantages, critic and actor updates on an explored
        batch; returns their metrics and the rows the updates trained on (fewer under PF-PPO)."""
        actor, critic, ref = self.roles.actor, self.roles.critic, self.roles.reference
        batch, metrics = experience.batch, {}
        if len(batch) == 0:  # the query filters (or explorer.max_timeout) dropped every group: nothing to learn from
            experience.settle()
            timed_out = experience.reward_metrics.get("rollout/timed_out_groups", 0.0) > 0
            metrics["rollout/skipped_update" if timed_out else "query_filter/skipped_update"] = 1.0
            return metrics, batch
        # a window prompt mode's actions each follow a prompt of their own: these passes run on its turn rows
        on_rows = functools.partial(windowed, batch=batch, pad_id=self.pad_id)
        with timer("old_log_prob"):
            if actor.s.router_replay:  # R2: the same forward records every token's experts, which the update replays
                batch.old_logprobs, batch.routes = actor.old_logprobs_and_routes(batch)  # (B, T), (B, S, L, K)
            else:
                batch.old_logprobs = on_rows(actor.old_logprobs)  # (B, T), maybe the rollout's (reuse_rollout_logprobs)
            # sum_v pi^2 of the same (pre-update) policy: the variance-proxy metrics and the OTB estimators
            if self.cfg.actor.calculate_sum_pi_squared or estimator_needs(self.cfg.algorithm.adv_estimator).sum_pi_squared:
                batch.sum_pi_squared = on_rows(actor.sum_pi_squared)  # (B, T)
            pi_squared = batch.sum_pi_squared  # (B, T) or None
            token_filter = self.cfg.algorithm.token_filter.type  # Clip_B / Clip_V: their signal, same policy
            signal = on_rows(lambda rows: actor.token_signal(rows, TOKEN_FILTERS[token_filter].signal)) if token_filter else None  # (B, T)
        keep = None  # tokens rollout correction keeps, when it rejects some
        if self.cfg.algorithm.rollout_is_threshold is not None:
            keep, correction = correct_rollout_mismatch(batch, self.cfg.algorithm)
            metrics.update(correction)
            if keep is not None and not self.cfg.algorithm.rollout_reject_after_advantages:
                reject_tokens(batch, keep)  # verl's order: the advantages count only the kept tokens
                keep = None
        if ref is not None:
            with timer("ref"):
                topk = actor.s.topk_kl
                if topk is None:
                    batch.ref_logprobs = on_rows(ref.compute_logprobs)  # (B, T)
                else:  # actor.topk_kl: the same forward also gives the teacher's k most likely tokens at each position, (B, T, K)
                    batch.ref_logprobs, batch.teacher_topk_logprobs, batch.teacher_topk_ids = on_rows(
                        lambda rows: ref.compute_topk(rows, topk.k, topk.teacher_temperature))
        teachers = None
        if self.roles.teachers:  # ref.teachers: each scores the batch; its rows (by tag) count in the advantage
            with timer("ref"):
                teachers = self._teachers(batch, on_rows, metrics)
        if critic is not None:
            with timer("values"):
                batch.values = on_rows(critic.compute_values)  # (B, T)
        if experience.reward_job is not None:  # reward.launch_reward_fn_async: it ran beside the passes above
            with timer("reward_wait"):
                experience.settle()
            # no query filter runs with background scoring, so every prompt's group is here, in order
            self._feedback(list(dict.fromkeys(batch.group_index)), batch, experience.scores)
        scores = experience.scores.to(batch.response_mask.device)  # (B,) scored on the CPU; the batch may be on a GPU
        with timer("adv"):
            shaped = scores if self.agent is None else agentic_scores(scores, batch, self.cfg.algorithm.agentic_reward_norm)
            # an agent function's calls as turns of their episodes count each episode once (advantages.episode_advantages)
            advantages = episode_advantages if self.agent_fn is not None and self.cfg.env.train_rows == "turn" else compute_advantages
            metrics.update(advantages(batch, shaped, self.cfg.algorithm, self.shaping, len(batch), teachers))
            if keep is not None:  # ROLL's order: advantages over every trained token, rejection in the losses only
                reject_tokens(batch, keep)
            metrics.update(mask_samples(batch, scores, self.cfg.algorithm, response_length(self.cfg)))  # ROLL's filters
            metrics.update(filter_tokens(batch, signal, self.cfg.algorithm))  # Clip_B / Clip_V
            train, pf_metrics = filter_by_reward(batch, self.cfg.algorithm, self.cfg.trainer.seed, step)  # PF-PPO, else batch
            metrics.update(pf_metrics)
            rows = training_rows(self.cfg, train, self.pad_id)  # env.train_rows turn: one row per model turn
            train = rows.batch
        if critic is not None:
            with timer("update_critic"):
                metrics.update(critic.update(train, rows.critic_mini))
        if step > self.cfg.trainer.critic_warmup:
            if self.expert is not None:  # after the critic: expert rows train the actor only
                train = self.expert.join(train, step, actor.version, ref.compute_logprobs if ref is not None else None)
            with timer("update_actor"):
                metrics.update(actor.update(train, step, rows.actor_mini))
        if pi_squared is not None:  # verl's variance proxies of this batch's policy gradient
            metrics.update(variance_proxy_metrics(batch.old_logprobs, pi_squared, batch.advantages, batch.response_mask,
                                                  metrics.get("actor/grad_norm"), batch.rollout_is_weights))
        return metrics, train

    def step_metrics(
        self, experience: Experience, metrics: dict[str, float], timer: PhaseTimer, step: int, train: RolloutBatch
    ) -> dict[str, float]:
        """A step's metrics: its updates', its batch's, its phases' times and throughput (the
        explorer's times come with a decoupled run's experience); dumps the batch when asked."""
        batch, scores = experience.batch, experience.scores
        metrics.update(experience.reward_metrics)
        metrics.update(batch_metrics(batch, scores, self.max_new_tokens))
        metrics.update(timer.metrics())
        metrics.update(experience.explore_metrics)
        metrics.update(self.observer.metrics(timer, batch, train))  # tokens/s, MFU, peak memory
        if "timing/gen_s" in experience.explore_metrics:  # a decoupled run: the explorer generated it
            metrics["perf/generated_tokens_per_s"] = batch.num_response_tokens() / max(metrics["timing/gen_s"], 1e-9)
        metrics["dist/world_size"] = float(self.ctx.world.size)
        for name in ("actor", "reference", "critic"):  # roles that split each sequence (Ulysses)
            seq = getattr(getattr(getattr(self.roles, name), "dp", None), "seq", None)
            if seq is not None:
                metrics[f"dist/sequence_parallel/{name}"] = float(seq.size)
        self._dump(self.cfg.trainer.rollout_data_dir, step, batch, experience.texts, scores)
        trace_rollout(self.tracer, batch, scores, self.ctx.step_offset + step, validate=False)
        return metrics

    # ---------------------------------------------------------------- validation
    def validate(self, step: int) -> dict[str, float]:
        """Generate for every validation prompt with `val_kwargs` and score per data source (an
        agentic stage: play the validation env groups and report success per tag)."""
        rollout = self.roles.rollout
        # the actor's version in step with it; an explorer's engine has no actor beside it
        version = self.roles.actor.version if self.roles.actor is not None else self.roles.engine.weights_version
        if self.agent is not None:
            renders = self.cfg.env.render_save_dir
            render_dir = Path(renders) / f"global_step_{step}" if renders and self.ctx.world.is_main else None
            return self.agent.validate(rollout, self.val_sampling, version, render_dir)
        if self.agent_fn is not None:
            return self.agent_fn.validate(rollout, self.val_sampling, version)
        if self.val_set is None:
            return {}
        sampler = make_sampler(self.cfg.data, len(self.val_set), split="val")
        batches: list[RolloutBatch] = []
        tools: list[dict[str, float]] = []
        row_of: dict[str, int] = {}  # prompt uid -> its dataset row, for the rows' entry settings
        for rows in phase(sampler, len(sampler), "validation", self.ctx.world.is_main):  # a bar on a terminal
            prompts = collate_prompts([self.val_set[i] for i in rows], self.pad_id, uid_prefix="val")
            row_of.update(zip(prompts.uid, prompts.index))
            batch, tool_metrics = self._generate(prompts, self.val_sampling, version, seed=rollout_seed(self.cfg))
            batches.append(batch)
            tools.append({k: v * len(batch) for k, v in tool_metrics.items()})  # weighted by rows, averaged below
        batch = RolloutBatch.cat(batches)
        texts = self.rewards.decode(batch)
        scores, _, extra = self.rewards.score(batch, texts, overlong_rows=val_overlong_rows(self.val_set, batch.group_index, row_of, self.cfg))
        answers = [t.split(self.tokenizer.eos_token)[0].strip() for t in texts]
        metrics = validation_metrics(batch.data_source, batch.group_index, scores.tolist(), answers, extra)
        metrics.update({f"val/{k}": sum(t[k] for t in tools) / len(batch) for k in (tools[0] if tools else {})})
        self._dump(self.cfg.trainer.validation_data_dir, step, batch, texts, scores)
        trace_rollout(self.tracer, batch, scores, self.ctx.step_offset + step, validate=True)
        self._log_generations(step, batch, texts, scores)
        return metrics

    # ---------------------------------------------------------------- the loop
    def fit(self) -> StageResult:
        cfg, total = self.cfg.trainer, self.derived.total_training_steps
        offset, final = self.ctx.step_offset, final_model_dir(self.ctx)
        last: dict[str, float] = {}
        ckpt = Checkpointer(self.ctx, total, self.checkpoint_parts())
        try:
            start = ckpt.restore()  # 0, or the step the resumed checkpoint was saved after
            self.roles.sync.push(self.roles.actor.version)
            if (cfg.val_before_train or cfg.val_only) and start == 0:
                last = self.validate(0)
                self._log(last, offset)
                if cfg.val_only:
                    return StageResult(ckpt.final_model(self.save_final, final), last, 0)
            for step in range(start + 1, total + 1):
                prompts = step if self.agent else self._next_prompts(step)
                with self.observer.step(step):  # the profiler's window when this step is profiled
                    metrics = self.step(prompts, step)
                metrics["training/epoch"] = float(self.sampler.epoch) if self.sampler else 0.0
                if (self.val_set is not None or self.agent is not None) and (step == total or (cfg.test_freq > 0 and step % cfg.test_freq == 0)):
                    metrics.update(self.validate(step))
                self._log(metrics, offset + step)
                ckpt.after_step(step)
                last = metrics
            return StageResult(ckpt.final_model(self.save_final, final), last, total)
        finally:
            self.roles.close()  # a reference crew stops with the trainer
            self.reader.close()
            if self.agent_fn is not None:
                self.agent_fn.close()
            if self.rewards is not None:
                self.rewards.close()
            self.trackers.close()

    def _next_prompts(self, step: int, gen_round: int = 1) -> PromptBatch:
        """The sampler's next batch; uids name the step (and a dynamic-sampling round after the first),
        so no two groups of a step share one and each round's sampling noise is its own."""
        rows = self.sampler.next_batch()
        prefix = f"s{step}" if gen_round == 1 else f"s{step}g{gen_round}"
        return collate_prompts(self.reader(rows), self.pad_id, uid_prefix=prefix)

    def save_final(self, out: Path) -> None:
        self.roles.actor.save_pretrained(out, self.tokenizer)

    def checkpoint_parts(self) -> Parts:
        """What this stage's checkpoints hold: actor (and critic) with optimizer and extra state,
        the sampler and the reward-shaping state. The rollout engine has no sampler state: its noise
        is keyed by seed, step and prompt (posttrain.rollout.sampling)."""
        roles = {"actor": self.roles.actor.checkpoint_role(self.tokenizer)}
        if self.roles.critic is not None:
            roles["critic"] = self.roles.critic.checkpoint_role()
        states = {"sampler": self.sampler, "running": self.shaping.running} if self.sampler else {"running": self.shaping.running}
        if self.shaping.kl_ctrl is not None:
            states["kl_ctrl"] = self.shaping.kl_ctrl
        if self.expert is not None:
            states["expert"] = self.expert
        return Parts(roles, states)

    def _log(self, metrics: dict[str, float], step: int) -> None:
        self.trackers.log(metrics, step)

    def _dump(self, directory: str | None, step: int, batch: RolloutBatch, texts: list[str], scores: torch.Tensor) -> None:
        """One JSONL file per step with prompt, response, ground truth and score of every sample."""
        if not directory or not self.ctx.world.is_main:
            return
        path = Path(directory) / f"{step}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        prompts = self._prompt_texts(batch)
        chats = batch.raw_chat if batch.raw_chat is not None else [None] * len(prompts)  # data.return_raw_chat
        with path.open("w", encoding="utf-8") as f:
            for p, t, gt, s, ds, chat in zip(prompts, texts, batch.ground_truth, scores.tolist(), batch.data_source, chats):
                row = {"step": step, "data_source": ds, "prompt": p, "response": t, "ground_truth": gt, "score": s}
                f.write(json.dumps(row if chat is None else {**row, "raw_chat": chat}) + "\n")

    def _prompt_texts(self, batch: RolloutBatch) -> list[str]:
        """Prompts as text, padding removed, chat special tokens kept."""
        rows = [ids[mask > 0].tolist() for ids, mask in zip(batch.prompt_ids, batch.prompt_mask)]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=False)

    def _log_generations(self, step: int, batch: RolloutBatch, texts: list[str], scores: torch.Tensor) -> None:
        n = self.cfg.trainer.log_val_generations
        if n <= 0 or not self.ctx.world.is_main:
            return
        prompts = self._prompt_texts(batch[:n])
        with (self.ctx.run_dir / "val_generations.jsonl").open("a", encoding="utf-8") as f:
            for p, t, s in zip(prompts, texts[:n], scores[:n].tolist()):
                f.write(json.dumps({"step": step, "prompt": p, "response": t, "score": s}) + "\n")
        glob = self.ctx.step_offset + step  # trackers count global steps, the file the stage's own
        self.trackers.log_generations([Generation(glob, p, t, s) for p, t, s in zip(prompts, texts[:n], scores[:n].tolist())], glob)


def run_rl(ctx: StageContext) -> StageResult:
    start = time.perf_counter()
    result = RLTrainer(ctx).fit()
    result.last_metrics["timing/stage_s"] = time.perf_counter() - start
    return result


def check_teacher_tags(cfg: Any, dataset: Any) -> None:
    """ref.teachers route rows by tag: each tag_included tag must be one the training data or a
    reward worker holds (a typo would leave the teacher's rows untaught), and rows need tags (no
    agentic stage)."""
    if not cfg.ref.teachers:
        return
    if dataset is None:
        raise ConfigError("ref.teachers: several teachers route dataset rows by their tag (data.reward_fn_key); an agentic stage's "
                          "episodes have none: use one teacher (ref.model_path)")
    known = set(tag_locations(dataset, "data.train_files")) | {tag for w in cfg.reward.workers.values() for tag in w.tag_included}
    for name, t in cfg.ref.teachers.items():
        unknown = [tag for tag in t.tag_included if tag not in known]
        if unknown:
            raise ConfigError(f"ref.teachers.{name}.tag_included: {unknown} is in no row of the training data (data.reward_fn_key) "
                              f"and in no reward worker's tag_included; known tags: {sorted(known)}")
