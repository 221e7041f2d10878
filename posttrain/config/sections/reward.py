"""`reward`: rule-based scorers, custom reward functions and reward models.

A response's reward is `function_weight x function score + reward_model_weight x model score`: the
function score comes from `custom_reward_function` (or the built-in scorer of the sample's data
source), the model score from `reward_model` when it is enabled. verl uses the model score alone when
a reward model is on; set `function_weight: 0` for that.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.access import is_rl
from posttrain.config.fields import param, section
from posttrain.config.sections.data import CHAT_TEMPLATE_NAMES
from posttrain.config.sections.profiler import ProfilerConfig


@section
class CustomRewardFunctionConfig:
    """A user reward function: `name(data_source, solution_str, ground_truth, extra_info, **reward_kwargs) -> float | dict`."""

    path: str | None = param(None, doc="Python file defining the function; null uses a built-in scorer: the one `name` names, else posttrain's task scorer for each data source.", refs=["verl:custom_reward_function.path"])
    name: str = param("compute_score", doc="Name of the function inside `path`; with path null, a built-in scorer for every sample (math, math_verify_first, multiple_choice, code, ifeval, think_answer, countdown_equation, math_boxed, dapo_math, detection: docs/rewards.md), any other name the task scorers.", refs=["verl:custom_reward_function.name"])
    reward_kwargs: dict[str, Any] = param(factory=dict, doc="Extra keyword arguments passed to every call of the function.", refs=["verl:custom_reward_function.reward_kwargs"])


@section
class RewardModelConfig:
    """A Hugging Face sequence-classification model whose score on (prompt, response) is the reward."""

    enable: bool = param(False, doc="Score responses with the reward model at `path`.", refs=["verl:reward_model.enable"])
    path: str = param("", doc="Local Hugging Face directory of an AutoModelForSequenceClassification reward model.", refs=["verl:reward_model.model.path"])
    micro_batch_size_per_gpu: int = param(8, doc="Responses per reward-model forward pass on one device.", ge=1, refs=["verl:reward_model.micro_batch_size_per_gpu"])
    input_tokenizer: str | None = param(None, doc="Local tokenizer directory of the policy, set when the reward model's chat template differs: each response is decoded with it (its eos text removed), appended to the prompt's chat messages (data.return_raw_chat) as the assistant turn, and the conversation is rendered with the reward model's own chat template and tokenizer; null: the reward model reads the policy's rendering (prompt text + response).", refs=["verl:reward_model.model.input_tokenizer"])
    max_length: int | None = param(None, doc="Truncate reward-model inputs to their last this many tokens (the end of the response is what it judges; a warning says when it happens); null never truncates.", ge=1, refs=["verl:reward_model.max_length"])
    truncation: str = param("left", doc="How an input longer than max_length is cut: left drops its beginning (the end of the response, what the reward model judges, is kept), right drops its end (verl's legacy reward-model worker), error stops the run naming the input's length.", choices=["left", "right", "error"])
    trust_remote_code: bool = param(False, doc="Allow Python code shipped with the reward model's directory (its config, model and tokenizer classes) to run.", refs=["verl:reward_model.model.trust_remote_code"])
    external_lib: str | None = param(None, doc="Python module imported before the reward model loads, so it can register custom model classes with transformers' Auto classes.", refs=["verl:reward_model.model.external_lib"])
    use_dynamic_bsz: bool = param(False, doc="Group consecutive responses into reward-model forward passes of at most forward_max_token_len_per_gpu tokens instead of micro_batch_size_per_gpu responses.", refs=["verl:reward_model.use_dynamic_bsz"])
    forward_max_token_len_per_gpu: int = param(32768, doc="Token budget of one reward-model micro-batch when use_dynamic_bsz.", ge=1, refs=["verl:reward_model.forward_max_token_len_per_gpu"])
    use_remove_padding: bool = param(False, doc="Run the reward model on packed texts without padding tokens (as model.use_remove_padding does for the policy): the same scores to float rounding, no compute on padding. Where the model cannot (no `score` head, a decoder that does not keep packed sequences apart) padded batches run and a logged line says why.", refs=["verl:reward_model.model.use_remove_padding"])
    use_fused_kernels: bool = param(False, doc="verl's fused kernels compute token log-probs and entropy over the vocabulary; the reward model is a sequence classifier whose head gives one score per sequence, so there is nothing to fuse (verl's reward-model worker does not read the key either; its default copies the policy's value): accepted, no effect.", refs=["verl:reward_model.model.use_fused_kernels"])
    param_offload: bool = param(False, doc="Keep the reward model's weights in host memory between scoring passes and copy them to the worker's device for each pass (then back): the same scores, less device memory outside the reward phase, one copy per pass. false keeps them on the device.", refs=["verl:reward_model.model.fsdp_config.param_offload"])
    use_shm: bool = param(False, doc="verl copies the reward model to /dev/shm before reading; posttrain reads the local model directory directly (the OS page cache serves repeated reads), so true reads the same bytes the same way: accepted, no effect.", refs=["verl:reward_model.model.use_shm"])
    profiler: ProfilerConfig = param(factory=ProfilerConfig, doc="Profiling of the reward phase (reward function and reward model) in profiler.steps.", refs=["verl:reward_model.profiler"])


@section
class OverlongBufferConfig:
    """DAPO soft overlong punishment: a penalty ramping up over the last `len` tokens of the budget."""

    enable: bool = param(False, doc="Add DAPO's soft overlong penalty to every training and validation score (a validation entry may differ: data.val_file_settings): 0 up to response_length - len tokens, then linearly down to -penalty_factor at response_length (posttrain.algorithms.overlong_penalty).", refs=["verl:reward_model.overlong_buffer.enable", "verl:reward_model.reward_kwargs.overlong_buffer_cfg.enable"])
    len: int = param(0, doc="Length of the penalty ramp in tokens at the end of the response budget (at least 1, at most the budget, when enabled).", ge=0, refs=["verl:reward_model.overlong_buffer.len", "verl:reward_model.reward_kwargs.overlong_buffer_cfg.len"])
    penalty_factor: float = param(1.0, doc="Penalty at the full response budget.", ge=0, refs=["verl:reward_model.overlong_buffer.penalty_factor", "verl:reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor"])
    log: bool = param(False, doc="Log the penalty: reward/overlong_reward (its mean) and reward/overlong (the share of responses it hit).", refs=["verl:reward_model.overlong_buffer.log", "verl:reward_model.reward_kwargs.overlong_buffer_cfg.log"])
    max_resp_len: int | None = param(None, doc="Response length at which the ramp ends (the penalty reaches penalty_factor; it starts len tokens before); null: the response budget (rollout.response_length, else data.max_response_length). verl's DAPO manager takes it as max_resp_len.", ge=1, refs=["verl:reward_model.reward_kwargs.max_resp_len"])


@section
class SandboxFusionConfig:
    """A remote code-execution sandbox used by code reward functions."""

    url: str | None = param(None, doc="URL of a SandboxFusion service (its run_code endpoint) that runs the code workers' programs; null runs them in the local sandbox.", refs=["verl:reward_model.sandbox_fusion.url"])
    max_concurrent: int = param(64, doc="Most requests in flight to the sandbox from one scoring process.", ge=1, refs=["verl:reward_model.sandbox_fusion.max_concurrent"])
    memory_limit_mb: int = param(1024, doc="Memory limit of one program on the remote sandbox, in MB.", ge=1, refs=["verl:reward_model.sandbox_fusion.memory_limit_mb"])


# ROLL's reward worker classes and the posttrain scorer (worker_cls) each is translated to; None:
# no posttrain scorer yet, with the reason the translation refuses the worker.
_ROLL_RLVR = "roll.pipeline.rlvr.rewards."
ROLL_WORKER_CLASSES: dict[str, str] = {
    f"{_ROLL_RLVR}math_rule_reward_worker.MathRuleRewardWorker": "math",
    f"{_ROLL_RLVR}code_sandbox_reward_worker.CodeSandboxRewardWorker": "code",
    f"{_ROLL_RLVR}crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker": "multiple_choice",
    f"{_ROLL_RLVR}multiple_choice_boxed_rule_reward_worker.MultipleChoiceBoxedRuleRewardWorker": "multiple_choice",
    f"{_ROLL_RLVR}llm_judge_reward_worker.LLMJudgeRewardWorker": "llm_judge",
    f"{_ROLL_RLVR}ifeval_rule_reward_worker.GeneralRuleRewardWorker": "ifeval",
    f"{_ROLL_RLVR}detection_reward_worker.DetectionRewardWorker": "detection",
    f"{_ROLL_RLVR}video_r1_reward_worker.VideoR1RewardWorker": "video_r1",
}
ROLL_WORKER_TODO: dict[str, str] = {
    f"{_ROLL_RLVR}general_val_rule_reward_worker.GeneralValRuleRewardWorker": "ROLL's general validation rules; reward routing issue",
    f"{_ROLL_RLVR}remote_reward_system_worker.RemoteRewardSystemWorker": "remote reward services; reward routing issue",
}
# ROLL worker classes posttrain refuses, and why (a reason true of its design).
ROLL_WORKER_REFUSED: dict[str, str] = {}
# The worker_cls of the LLM judge and the keys only it reads (posttrain.rewards.judge).
JUDGE = "llm_judge"
JUDGE_KEYS = ("judge_prompt", "judge_model_type", "model_args", "generating_args", "infer_batch_size", "chat_template_name", "engine")


# The engines a judge can generate with (posttrain.rollout.engines; the config layer cannot import it).
JUDGE_ENGINES = ("hf", "vllm", "sglang")
_GPU_JUDGE = "vllm and sglang only (the hf judge has no such setting)"


@section
class JudgeEngineConfig:
    """The engine an LLM judge generates with: a rollout engine (posttrain.rollout.engines) over the judge's own weights."""

    name: str = param("hf", doc="The judge's engine: hf (the built-in engine, on CPU), vllm or sglang (built as rollout.name builds them, reading the judge's weights from model_args.model_name_or_path; a machine without the package or a CUDA GPU is refused, and posttrain smoke substitutes hf).", choices=JUDGE_ENGINES, refs=["roll:.strategy_name"])
    tensor_model_parallel_size: int = param(1, doc=f"Devices one judge engine is split over (vLLM tensor_parallel_size, SGLang tp_size); {_GPU_JUDGE}.", ge=1, refs=["roll:.strategy_config.tensor_parallel_size"])
    gpu_memory_utilization: float = param(0.5, doc=f"Share of device memory the judge engine may take for weights and KV cache (SGLang mem_fraction_static); {_GPU_JUDGE}.", gt=0, le=1, refs=["roll:.strategy_config.gpu_memory_utilization", "roll:.strategy_config.mem_fraction_static"])
    max_model_len: int | None = param(None, doc=f"Longest judge prompt + answer in tokens (SGLang context_length); null: the judge model's max_position_embeddings; {_GPU_JUDGE}.", ge=1, refs=["roll:.strategy_config.max_model_len", "roll:.strategy_config.context_length"])
    enforce_eager: bool = param(True, doc=f"Run the judge engine without CUDA graphs (SGLang disable_cuda_graph); {_GPU_JUDGE}.", refs=["roll:.strategy_config.enforce_eager"])
    max_num_batched_tokens: int = param(8192, doc=f"Most tokens the judge engine processes in one scheduler step (SGLang chunked_prefill_size); {_GPU_JUDGE}.", ge=1, refs=["roll:.strategy_config.max_num_batched_tokens"])
    free_cache_engine: bool = param(True, doc="Put the judge engine to sleep between scorings (vLLM sleep level 1, SGLang memory release with the weights kept on the host) so training has the device memory; vllm and sglang only (the hf judge runs on CPU).")
    kwargs: dict[str, Any] = param(factory=dict, doc="Keyword arguments passed as they are to vllm.LLM(...) or sglang.Engine(...) of the judge (block_size, swap_space, attention_backend, ...); vllm and sglang only.")


@section
class AuxiliaryModelConfig:
    """One auxiliary model: its weights, their dtype and the engine that serves them."""

    model_path: str = param("", doc="The auxiliary model: a local directory or a cached hub name (required).")
    dtype: str = param("fp32", doc="Dtype the model is loaded in: fp32, bf16, fp16 or auto (the one its config.json saves).", choices=["fp32", "bf16", "fp16", "auto"])
    engine: JudgeEngineConfig = param(factory=JudgeEngineConfig, doc="The engine that serves it and that engine's options (as an LLM judge's engine).")


@section
class QueryFilterConfig:
    """Which prompt groups of a reward worker's tags train: all, or those whose rewards vary."""

    type: str = param("no_filter", doc="no_filter keeps every group; mean_filter drops a group whose mean reward is <= threshold_down or >= threshold_up; std_filter drops one whose reward std is <= std_threshold.", choices=["no_filter", "mean_filter", "std_filter"], refs=["roll:.type"])
    filter_args: dict[str, float] = param(factory=dict, doc="The filter's thresholds: threshold_up (default +inf) and threshold_down (default -1) of mean_filter, std_threshold (default -1) of std_filter.", refs=["roll:.filter_args"])


@section
class RewardWorkerConfig:
    """One reward worker: a scorer for the samples whose tag is in `tag_included`."""

    worker_cls: str = param("tasks", doc="The scorer: a built-in (tasks, math, multiple_choice, code, ifeval, think_answer, countdown_equation, detection, video_r1, llm_judge; ruler_judge and rubric_judge call an auxiliary model, reward_kwargs.model), `file.py:function` or `module:function` (a class there is built once with reward_kwargs and called per sample).", refs=["roll:.worker_cls"])
    tag_included: list[str] = param(factory=list, doc="Tags (the data.reward_fn_key column) of the samples this worker scores; at least one.", refs=["roll:.tag_included"])
    reward_kwargs: dict[str, Any] = param(factory=dict, doc="Extra keyword arguments of every call of the scorer (for a class: of its constructor).")
    weight: float = param(1.0, doc="Weight of this worker's score in a sample's reward, the sum over every worker that claims its tag.", ge=0)
    reward_type: str | None = param(None, doc="Reward table of the multiple_choice scorer: loose, soft or strict (ROLL's, from +1 to -1 by answer and format); null: 1 for a right boxed answer, else 0.", choices=[None, "loose", "soft", "strict"], refs=["roll:.reward_type"])
    response_length_penalty_coef: float = param(0.0, doc="Adds coef x ROLL's length reward: -0.5 below 100 response tokens, rising linearly to 0 at 400 and above.", refs=["roll:.response_length_penalty_coef"])
    world_size: int | None = param(None, doc="Processes scoring this worker's samples (a parallel pool of that size); null follows reward.reward_manager and reward.num_workers.", ge=1, refs=["roll:.world_size"])
    use_local: bool = param(True, doc="Run a code worker's programs on this machine (ROLL's key; true is posttrain's local sandbox, or reward.sandbox_fusion.url's service). false, ROLL's own HTTP sandbox API, is refused.", refs=["roll:.use_local"])
    query_filter_config: QueryFilterConfig = param(factory=QueryFilterConfig, doc="Drop the prompt groups of this worker's tags whose rewards carry no signal (posttrain.rewards.query_filter).", refs=["roll:.query_filter_config"])
    infer_batch_size: int | None = param(None, doc="LLM judge on the hf engine: judge prompts per generation pass; null: up to 1024 at once (rollout.max_num_seqs' default); vllm and sglang schedule the batch themselves.", ge=1, refs=["roll:.infer_batch_size"])
    judge_prompt: str | None = param(None, doc="LLM judge: a built-in template (reference_match, score_0_10) or a template with {response} (and {question}, {reference}); null: reference_match.", refs=["roll:.judge_prompt"])
    judge_model_type: str | None = param(None, doc="LLM judge: inference runs the judge model in the training process with its engine (engine.name); api, a model served over HTTP, is not implemented; null: inference.", choices=[None, "inference", "api"], refs=["roll:.judge_model_type"])
    model_args: dict[str, Any] = param(factory=dict, doc="LLM judge: model_name_or_path (a local directory or cached hub name) and dtype of the judge model.", refs=["roll:.model_args"])
    generating_args: dict[str, Any] = param(factory=dict, doc="LLM judge: max_new_tokens (32), do_sample (false), temperature, top_p, top_k, repetition_penalty of the judge's answers.", refs=["roll:.generating_args"])
    engine: JudgeEngineConfig = param(factory=JudgeEngineConfig, doc="LLM judge: the engine it generates with and that engine's options.", refs=["roll:.strategy_args"])
    chat_template_name: str | None = param(None, doc="LLM judge: the named prompt template its prompt is written in (data.chat_template_name's names, applied to the judge's tokenizer); null: the judge tokenizer's own chat template, or the plain text when it has none.", choices=[None, *CHAT_TEMPLATE_NAMES], refs=["roll:.data_args.template"])

@section
class SelfJudgeConfig:
    """The policy judges its own groups of responses, and learns to judge (posttrain.trainer.self_judge)."""

    enable: bool = param(False, doc="After the reward workers score a step's responses (the gold reward), the policy itself judges each prompt's group: with probability gold_probability the gold reward is known, the responses keep it and rollout.n judge replies train as a group of their own, rewarded 1 - the mean absolute gap between their scores and the gold rewards mapped to [0, 1]; otherwise one judge reply's scores are the responses' rewards (0 when it does not parse) and the reply is not trained on. Trinity-RFT's math_trainable_ruler_workflow.")
    gold_probability: float = param(0.2, doc="Share of prompts whose gold reward counts (drawn per prompt, seeded by trainer.seed and the prompt's uid); the rest are rewarded by the policy's own verdict.", ge=0, le=1)
    gold_range: list[float] = param(factory=lambda: [0.0, 1.0], doc="[low, high] of the gold reward, mapped linearly onto the judge's [0, 1] scores to reward the judge replies (think_answer's range is [-0.1, 1.1]).")
    instructions: str = param("", doc="Text shown to the judge after the question, e.g. the answer format the question asked for.")


@section
class RewardConfig:
    """How responses are scored."""

    reward_manager: str = param("naive", doc="How scoring is run: naive (in-process, one call at a time), parallel (process pool of num_workers; verl's prime) or dapo (naive, and every sample's acc is its function's acc, else its score, as verl's DAPO manager records it; its overlong penalty is overlong_buffer).", choices=["naive", "parallel", "dapo"], refs=["verl:reward_model.reward_manager"])
    num_workers: int = param(2, doc="Processes of the parallel reward manager.", ge=1)
    timeout_s: float = param(60.0, doc="Seconds one reward-function call may take before it counts as a failure (naive: interrupted in-process; parallel: its worker process is killed).", gt=0)
    on_error: str = param("raise", doc="When a scoring call raises or times out: raise stops the run, fixed scores the response failure_reward.", choices=["raise", "fixed"])
    failure_reward: float = param(0.0, doc="Reward of a response whose scoring failed when on_error is fixed.")
    function_weight: float = param(1.0, doc="Weight of the reward-function score; 0 skips the function (reward model only).", ge=0)
    reward_model_weight: float = param(1.0, doc="Weight of the reward-model score when reward_model.enable.", ge=0)
    custom_reward_function: CustomRewardFunctionConfig = param(factory=CustomRewardFunctionConfig, doc="User reward function (file and name).")
    reward_model: RewardModelConfig = param(factory=RewardModelConfig, doc="Model-based reward.")

    launch_reward_fn_async: bool = param(False, doc="Run the reward function (manager or workers) on a background thread while the old and reference log-probs and the values are computed, and join it before the advantages; the scores are the same. The reward model still scores before the log-probs, as in verl.", refs=["verl:reward_model.launch_reward_fn_async"])
    overlong_buffer: OverlongBufferConfig = param(factory=OverlongBufferConfig, doc="DAPO soft overlong punishment.")
    sandbox_fusion: SandboxFusionConfig = param(factory=SandboxFusionConfig, doc="Remote code-execution sandbox.")
    workers: dict[str, RewardWorkerConfig] = param(factory=dict, doc="Reward workers by name, each scoring the samples whose tag (data.reward_fn_key) is in its tag_included; empty scores every sample with custom_reward_function.", refs=["roll:rewards"])
    auxiliary_models: dict[str, AuxiliaryModelConfig] = param(factory=dict, doc="Models by name that the run loads and serves over an OpenAI-compatible endpoint on 127.0.0.1 (a free port) while it scores: the chat judges (worker_cls ruler_judge, rubric_judge) call them, and custom reward functions and agent functions (rollout.agent.function, served for the whole stage) find each URL in POSTTRAIN_AUX_<NAME>_URL (docs/rewards.md).", refs=["trinity:explorer.auxiliary_models"])
    self_judge: SelfJudgeConfig = param(factory=SelfJudgeConfig, doc="The policy as the judge of its own responses, trained on its verdicts where the gold reward is known (posttrain.trainer.self_judge).")


# The thresholds each query filter reads (posttrain.rewards.query_filter; the config layer cannot import it).
QUERY_FILTER_ARGS: dict[str, tuple[str, ...]] = {
    "no_filter": (),
    "mean_filter": ("threshold_up", "threshold_down"),
    "std_filter": ("std_threshold",),
}


#: Keys any value of which changes nothing in posttrain, with the reason (the loaders drop them).
NO_EFFECT: dict[str, str] = {
    "verl:reward_model.ulysses_sequence_parallel_size": "splits the reward model's sequences over devices: the same scores",
    "verl:data.return_raw_input_ids": "verl's code never reads it: a reward model with another chat template re-renders each conversation from the prompt's chat messages (data.return_raw_chat) when reward_model.model.input_tokenizer is set, in verl as in posttrain (reward.reward_model.input_tokenizer)",
}

# ROLL reads reward_system_config only in its remote reward-system worker (a file without one drops it).
REMOTE_WORKER = f"{_ROLL_RLVR}remote_reward_system_worker.RemoteRewardSystemWorker"
REWARD_SYSTEM = ("ROLL's remote reward-system worker (a reward service over HTTP, with its URLs and credentials): "
                 "posttrain scores with reward functions and workers in its own processes (reward.*), not a remote service "
                 "(a file without that worker has the key dropped: nothing else reads it)")

# The reward model is not sharded: every worker process holds a full copy (posttrain.trainer.rewarding).
_RM_REPLICATED = ("posttrain does not shard the reward model: every worker process holds a full copy and scores its "
                  "share of the batch (a forward pass only, with no gradients or optimizer state to shard); remove the key")
_RM_FSDP = "verl:reward_model.model.fsdp_config"

#: Keys of the reference frameworks that belong here but that posttrain refuses, with the reason.
_USER_MANAGER = ("a reward-manager class of the user's, imported by verl (source importlib); posttrain's reward managers are its "
                 "own (reward.reward_manager): a user's scoring goes in reward.custom_reward_function, or a reward worker "
                 "(reward.workers.<name>.worker_cls)")
_RM_POOL = ("a device pool of its own for verl's reward model; posttrain's reward model runs in the trainer's worker processes "
            "(reward.reward_model): verl's default (false, 0) is accepted")
UNSUPPORTED: dict[str, str] = {
    **{f"verl:{k}": _USER_MANAGER for k in ("reward.reward_manager.source", "reward.reward_manager.module.path", "reward.reward_manager.module.name",
                                            "reward_model.reward_loop_source", "reward_model.reward_loop_module_path", "reward_model.reward_loop_class_name",
                                            "reward_manager.source", "reward_manager.module.path", "reward_manager.module.name", "reward_manager.name")},
    **{f"verl:{section}.{k}": _RM_POOL for section in ("reward.reward_model", "reward_model") for k in ("enable_resource_pool", "n_gpus_per_node", "nnodes")},
    "verl:reward_model.strategy": _RM_REPLICATED,
    **{f"{_RM_FSDP}{k}": _RM_REPLICATED for k in ("", ".wrap_policy.min_num_params", ".reshard_after_forward", ".fsdp_size", ".forward_prefetch")},
    "verl:reward_model.megatron": _RM_REPLICATED,  # verl's Megatron trainer: how it splits the reward model
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    "verl:reward_model.reward_kwargs": "keyword arguments of verl's reward manager classes: posttrain's managers read their settings from the reward section (the DAPO manager's overlong_buffer_cfg and max_resp_len are reward.overlong_buffer)",
    "roll:reward_system_config": REWARD_SYSTEM,
    "roll:reward": "ROLL's reward-model role, a model served by its inference engine to score responses: posttrain's reward model is reward.reward_model (a sequence classifier on every worker), and a generative judge is a reward worker (reward.workers.<name>.worker_cls: llm_judge)",
    "roll:reward_model": "ROLL's shared reward-model cluster served by its inference engine, with no LLM judge of judge_model_type cluster to serve (such a judge runs as a judge worker with this role's model, template and engine): posttrain's reward model is reward.reward_model (a sequence classifier on every worker), and a generative judge is a reward worker (reward.workers.<name>.worker_cls: llm_judge)",
}


def check_reward_workers(cfg: Any) -> list[str]:
    """reward.workers: each worker names tags and a scorer, and no user reward function competes
    with them (checks that need no files; the scorers are imported before training starts)."""
    reward = getattr(cfg, "reward", None)
    workers = getattr(reward, "workers", None)
    if reward is not None and reward.sandbox_fusion.url and not any(w.worker_cls == "code" for w in (workers or {}).values()):
        return ["reward.sandbox_fusion.url: only a code reward worker (reward.workers.<name>.worker_cls: code) runs programs; add one or drop the url"]
    if not workers:
        return []
    problems = []
    if reward.custom_reward_function.path is not None:
        problems.append(
            "reward.custom_reward_function.path and reward.workers both choose how samples are scored; give the "
            "function to a worker instead (worker_cls: path/to/file.py:function_name)"
        )
    for name, worker in workers.items():
        key = f"reward.workers.{name}"
        if not name or "/" in name:
            problems.append(f"{key}: a worker name must be non-empty and without '/' (it names the metrics reward/<worker>/...)")
        if not worker.tag_included:
            problems.append(f"{key}.tag_included: name at least one tag (a value of the data.reward_fn_key column) this worker scores")
        qf = worker.query_filter_config
        allowed = QUERY_FILTER_ARGS[qf.type]
        unknown = sorted(set(qf.filter_args) - set(allowed))
        if unknown:
            problems.append(f"{key}.query_filter_config.filter_args: {qf.type} does not read {', '.join(unknown)}; it takes: {', '.join(allowed) or 'nothing'}")
        problems.extend(_judge_problems(key, worker))
        if not worker.use_local:
            problems.append(f"{key}.use_local: false sends programs to ROLL's own HTTP sandbox service, whose API posttrain does not "
                            "speak; posttrain runs a code worker's programs in its local sandbox, or on a SandboxFusion service "
                            "(reward.sandbox_fusion.url): leave use_local true")
        if worker.worker_cls in ROLL_WORKER_CLASSES or worker.worker_cls in ROLL_WORKER_TODO:
            native = ROLL_WORKER_CLASSES.get(worker.worker_cls)
            fix = f"write worker_cls: {native}" if native else f"not implemented yet: {ROLL_WORKER_TODO[worker.worker_cls]}"
            problems.append(f"{key}.worker_cls: {worker.worker_cls!r} is ROLL's class; {fix} (posttrain config convert translates ROLL files)")
        elif worker.worker_cls in ROLL_WORKER_REFUSED:
            problems.append(f"{key}.worker_cls: {worker.worker_cls!r}: {ROLL_WORKER_REFUSED[worker.worker_cls]}")
    return problems


def _judge_problems(key: str, worker: Any) -> list[str]:
    """An LLM judge's keys on another worker, a served judge, a judge in a process pool."""
    if worker.worker_cls != JUDGE:
        return [f"{key}.{k}: only an LLM judge (worker_cls: {JUDGE}) reads it" for k in JUDGE_KEYS
                if getattr(worker, k) not in (None, {}, JudgeEngineConfig())]
    problems = []
    if worker.judge_model_type == "api":
        problems.append(f"{key}.judge_model_type: api (a judge served over HTTP) is not implemented; run the judge model "
                        "in the training process with judge_model_type: inference")
    if worker.world_size is not None:
        problems.append(f"{key}.world_size: an LLM judge runs its model in the training process, not in a pool of "
                        "processes; leave world_size out (infer_batch_size sets its batch)")
    return problems


def check_overlong_buffer(cfg: Any) -> list[str]:
    """The penalty ramp must fit in the response budget and have a length."""
    buf = getattr(getattr(cfg, "reward", None), "overlong_buffer", None)
    rollout, data = getattr(cfg, "rollout", None), getattr(cfg, "data", None)
    if buf is None:
        return []
    budget = getattr(rollout, "response_length", None) or getattr(data, "max_response_length", None)
    end = getattr(buf, "max_resp_len", None)
    if end is not None and buf.enable and not (1 <= buf.len <= end):
        return [f"reward.overlong_buffer.len ({buf.len}) must be between 1 and max_resp_len ({end}) when the overlong penalty is enabled: the penalty ramps over the last len tokens before max_resp_len"]
    if end is None and buf.enable and not (1 <= buf.len <= (budget or buf.len)):
        return [f"reward.overlong_buffer.len ({buf.len}) must be between 1 and the response length ({budget}) when the overlong penalty is enabled: the penalty ramps over the last len tokens of the budget"]
    return []


def check_reward_model(cfg: Any) -> list[str]:
    """An input_tokenizer re-renders each conversation from its chat messages, which the prompts
    keep only with data.return_raw_chat (verl reads them from the same place)."""
    rm = getattr(getattr(cfg, "reward", None), "reward_model", None)
    data = getattr(cfg, "data", None)
    if rm is None or not rm.enable or rm.input_tokenizer is None or getattr(data, "return_raw_chat", True):
        return []
    return ["reward.reward_model.input_tokenizer re-renders each conversation in the reward model's chat template from "
            "the prompt's chat messages: set data.return_raw_chat: true so that the prompts keep them (or set "
            "input_tokenizer: null when both models share one chat template)"]


def check_async_reward(cfg: Any) -> list[str]:
    """launch_reward_fn_async joins the scores after the log-prob passes: nothing before them may need
    the scores (posttrain.trainer.rl)."""
    reward = getattr(cfg, "reward", None)
    if reward is None or not reward.launch_reward_fn_async:
        return []
    users = [f"reward.workers.{name}.query_filter_config" for name, w in reward.workers.items() if w.query_filter_config.type != "no_filter"]
    judges = [f"reward.workers.{name}" for name, w in reward.workers.items() if w.worker_cls == JUDGE]
    if judges:  # a judge generates with the trainer's device and random generator, which the passes use meanwhile
        return [f"reward.launch_reward_fn_async: {', '.join(judges)} is an LLM judge, which generates with a model on the "
                "trainer's device and its random generator; it scores in place: turn launch_reward_fn_async off"]
    pipeline = getattr(getattr(getattr(cfg, "data_processor", None), "experience_pipeline", None), "operators", None)
    if pipeline:
        users.append("data_processor.experience_pipeline.operators")
    filter_groups = getattr(getattr(cfg, "algorithm", None), "filter_groups", None)
    if filter_groups is not None and filter_groups.enable:
        users.append("algorithm.filter_groups (dynamic sampling)")
    if not users:
        return []
    return [f"reward.launch_reward_fn_async scores in the background while the log-probs are computed, but {', '.join(users)} "
            "choose(s) the rows to train from the scores before those passes; turn launch_reward_fn_async off or remove them"]



def check_self_judge(cfg: Any) -> list[str]:
    """What the self-judge (posttrain.trainer.self_judge) works with: it judges the finished text
    responses of a prompt stage's groups right after they are scored, and adds rows of its own."""
    judge = getattr(getattr(cfg, "reward", None), "self_judge", None)
    if judge is None or not judge.enable:
        return []
    low_high = list(judge.gold_range)
    problems = []
    if len(low_high) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in low_high) or low_high[0] >= low_high[1]:
        problems.append(f"reward.self_judge.gold_range: expected [low, high] with low < high (the gold reward's range), got {low_high!r}")
    if not is_rl(cfg):
        return problems + ["reward.self_judge applies to RL stages, where the policy generates the responses it judges"]
    others = {
        "an agentic stage (env.train_env_manager.tags)": bool(cfg.env.train_env_manager.tags),
        "an agent function (rollout.agent.function)": cfg.rollout.agent.function is not None,
        "tool calling (rollout.multi_turn.enable)": cfg.rollout.multi_turn.enable,
        "reward.launch_reward_fn_async (the verdicts replace scores before the log-prob passes)": cfg.reward.launch_reward_fn_async,
        f"algorithm.filter_groups.metric {cfg.algorithm.filter_groups.metric} (the judge rows have the final score only: use seq_reward)":
            cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric in ("acc", "score"),
        "explorer.max_timeout (a deadline on the responses, which the judge's generation would pass)": cfg.explorer.max_timeout is not None,
        "explorer.over_rollout": cfg.explorer.over_rollout.ratio > 0,
    }
    from posttrain.algorithms import estimator_needs  # the config layer may read the registries

    others[f"{cfg.algorithm.adv_estimator}'s greedy baseline (the judge rows have none)"] = estimator_needs(cfg.algorithm.adv_estimator).greedy_baseline
    clashes = [name for name, on in others.items() if on]
    if clashes:
        problems.append(f"reward.self_judge judges the text responses of a prompt stage's groups once they are scored, and adds "
                        f"judge rows to the batch; it does not combine with {', '.join(clashes)}")
    return problems
