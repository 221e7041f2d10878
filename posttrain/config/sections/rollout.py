"""`rollout`: the generation engine and its sampling parameters.

The built-in engine is ``hf``: the policy's own torch module samples with a KV cache in the training
process, so actor and rollout always share weights (verl's "hybrid engine"). ``vllm`` and ``sglang``
are adapters over those libraries (posttrain.rollout.vllm_engine / sglang_engine, docs/engines.md).
Settings that only some engines read (``gpu_memory_utilization``, ``enforce_eager``,
``engine_kwargs.vllm``, ...) are accepted whatever engine runs, so a config written for vLLM plans
on a CPU laptop with ``rollout.name=hf``; `config plan` and `train` then name them once as unused.

Units: ``n`` is responses per prompt; lengths are tokens; ``max_num_seqs`` counts sequences.

`UNSUPPORTED` lists reference keys that have no field here, each with the reason.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.fields import param, section
from posttrain.config.sections.actor import NCCL_OFFLOAD
from posttrain.config.sections.data import TEMPLATE_UNREAD

_VERL = "verl:actor_rollout_ref.rollout"
_ROLL_GEN = "roll:actor_infer.generating_args"
_ROLL_STRAT = "roll:actor_infer.strategy_args.strategy_config"
_ROLL_VAL_GEN = "roll:validation.generating_args"
_TRINITY = "trinity:explorer.rollout_model"

_VLLM_ONLY = "Read by the vllm engine only (a setting of another engine is reported unused, not refused)."
_GPU_ENGINES = "Read by the vllm and sglang engines only (a setting of another engine is reported unused, not refused)."


@section
class ValKwargsConfig:
    """Sampling used for validation instead of the training sampling parameters."""

    do_sample: bool = param(False, doc="Sample during validation; false decodes greedily and ignores temperature/top_k/top_p.", refs=[f"{_VERL}.val_kwargs.do_sample"])
    temperature: float = param(0.0, doc="Validation sampling temperature (used when do_sample; must then be > 0).", ge=0, refs=[f"{_VERL}.val_kwargs.temperature", f"{_ROLL_VAL_GEN}.temperature"])
    top_k: int = param(-1, doc="Validation top-k: sample among the k most likely tokens; -1 or 0 disables.", ge=-1, refs=[f"{_VERL}.val_kwargs.top_k", f"{_ROLL_VAL_GEN}.top_k"])
    top_p: float = param(1.0, doc="Validation nucleus sampling: smallest token set with this total probability; 1.0 disables.", gt=0, le=1, refs=[f"{_VERL}.val_kwargs.top_p", f"{_ROLL_VAL_GEN}.top_p"])
    n: int = param(1, doc="Responses sampled per validation prompt (scores are averaged over them).", ge=1, refs=[f"{_VERL}.val_kwargs.n", f"{_ROLL_VAL_GEN}.num_return_sequences"])
    repetition_penalty: float | None = param(None, doc="Validation repetition penalty (as rollout.repetition_penalty); null: the training rollout's.", gt=0, refs=[f"{_ROLL_VAL_GEN}.repetition_penalty"])
    response_length: int | None = param(None, doc="Most tokens a validation response may have; null: the training budget (rollout.response_length, else data.max_response_length). The engine's context (rollout.max_model_len when null) makes room for the longer of the two.", ge=1, refs=[f"{_ROLL_VAL_GEN}.max_new_tokens"])


@section
class MultiTurnConfig:
    """Multi-turn rollouts with tool calls (verl's tool agent loop; docs/agentic.md, "Tool calling")."""

    enable: bool = param(False, doc="Roll out conversations in which the model may call the tools of tool_config_path (Hermes <tool_call> JSON); each response interleaves the model's turns with the tools' answers, and only the model's tokens are trained.", refs=[f"{_VERL}.multi_turn.enable"])
    max_assistant_turns: int | None = param(None, doc="Most model turns per conversation; null: until the model stops calling tools or the response length is used up.", ge=1, refs=[f"{_VERL}.multi_turn.max_assistant_turns", f"{_VERL}.multi_turn.max_turns"])
    max_user_turns: int | None = param(None, doc="Most tool (or interaction) turns added per conversation; the model turn after the last one ends it; null: no limit.", ge=1, refs=[f"{_VERL}.multi_turn.max_user_turns"])
    tool_config_path: str | None = param(None, doc="YAML file of the tools the model may call (verl's layout: tools: [{class_name, config, tool_schema}]); their schemas go into every prompt through the chat template.", refs=[f"{_VERL}.multi_turn.tool_config_path", "verl:data.tool_config_path"])
    interaction_config_path: str | None = param(None, doc="YAML file of interactions (simulated users: interaction: [{name, class_name, config}]) that answer a model turn without tool calls; each row names its own in extra_info.interaction_kwargs.name.", refs=[f"{_VERL}.multi_turn.interaction_config_path"])
    format: str = param("hermes", doc="Tool-call syntax the model writes: hermes (<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>, Qwen2.5's); tool answers are framed by the model's chat template. A verl config's older qwen (Hermes calls, answers framed as Qwen2.5's template frames them) is read as hermes.", choices=["hermes"], refs=[f"{_VERL}.multi_turn.format"])
    max_parallel_calls: int = param(1, doc="Tool calls of one model turn that run; the rest are dropped (counted in tool/dropped_calls).", ge=1, refs=[f"{_VERL}.multi_turn.max_parallel_calls"])
    max_tool_response_length: int = param(256, doc="Longest tool answer in characters; a longer one is cut on tool_response_truncate_side.", ge=1, refs=[f"{_VERL}.multi_turn.max_tool_response_length"])
    tool_response_truncate_side: str = param("middle", doc="Which part of a long tool answer is kept (as verl): left keeps its start, right its end, middle both ends.", choices=["left", "right", "middle"], refs=[f"{_VERL}.multi_turn.tool_response_truncate_side"])
    use_inference_chat_template: bool = param(False, doc="true: each turn's prompt is the conversation re-rendered by the chat template from its messages (a template may drop earlier reasoning), as at inference; false: the exact tokens so far. Training always uses the exact tokens. true needs data.return_raw_chat.", refs=[f"{_VERL}.multi_turn.use_inference_chat_template"])
    tokenization_sanity_check_mode: str = param("strict", doc="Compare each conversation's turn-by-turn tokens with the chat template's rendering of its messages: strict counts any difference, ignore_strippable only differences beyond whitespace, disable skips the check; a difference is logged once and counted in tool/tokenization_mismatch.", choices=["strict", "ignore_strippable", "disable"], refs=[f"{_VERL}.multi_turn.tokenization_sanity_check_mode", f"{_VERL}.multi_turn.enable_tokenization_sanity_check"])


@section
class AgentFnConfig:
    """A user's agent function trained online: its chat-completion calls to a loopback OpenAI-compatible endpoint become the training rows (docs/agentic.md, "Agent functions")."""

    function: str | None = param(None, doc="The agent: 'module:function' or 'path/to/file.py:function', async or plain, called as function(base_url, row) once per episode (rollout.n per task row of data.train_files) with the row's columns and a base URL served by this step's policy; it makes any number of chat-completion calls and returns the episode's reward (a number, or a dict with 'reward' and numeric metrics). Each call becomes one training row with the episode's reward; the reward function is not called. null: no agent.")
    kwargs: dict[str, Any] = param(factory=dict, doc="Keyword arguments given to the function with every episode, after (base_url, row): function(base_url, row, **kwargs); the settings of a built-in agent (docs/agentic.md, 'Built-in agents'). A name the function does not take is refused at start.")
    val_kwargs: dict[str, Any] = param(factory=dict, doc="Keyword arguments that replace kwargs' entries for validation episodes (Trinity-RFT: an evaluation taskset's own workflow_args, e.g. another search service or max_tokens); empty: validation runs with kwargs.")
    max_concurrency: int = param(8, doc="Episodes running at once (the calls they make at the same time are batched into one engine call; docs/agentic.md).", ge=1)
    timeout: float | None = param(600.0, doc="Seconds one episode may take; a slower one fails (its calls made so far count as under failure_penalty). null: no limit.", gt=0)
    failure_penalty: float | None = param(None, doc="A failed episode (the function raised, timed out, returned no reward or made no call): null drops it; a number trains the calls it made with this reward.")
    max_failure_rate: float = param(0.1, doc="Share of one step's (or one validation's) episodes that may fail before the run stops with the first failure's message.", ge=0, le=1)
    tool_call_parser: str | None = param("hermes", doc="How the endpoint reads tool calls from the policy's text when a request has tools and tool_choice auto: hermes (<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>, Qwen2.5/Qwen3's) answers them as the message's tool_calls (finish_reason tool_calls, content the text outside the calls); null leaves them in the text, and a request with tool_choice auto is refused. The request's tools are always rendered by the chat template.", choices=["hermes", None], refs=[f"{_TRINITY}.tool_call_parser"])
    enable_auto_tool_choice: bool = param(True, doc="Answer requests with tools and tool_choice auto (OpenAI's default when tools are given) by parsing the text with tool_call_parser; false refuses them with a 400 naming this key, as vLLM does without --enable-auto-tool-choice. tool_choice none is always answered as text; required or a named function is always refused (it needs constrained decoding).", refs=[f"{_TRINITY}.enable_auto_tool_choice"])
    log_requests: bool = param(False, doc="Log one line (INFO, in the run's log) per chat-completion request an episode makes: the episode, its message and tool counts, max_tokens, the prompt and completion tokens and the finish reasons (a refused request: its reason).", refs=["trinity:explorer.rollout_model.enable_log_requests"])
    reasoning_parser: str | None = param(None, doc="Split the policy's <think>...</think> into the message's reasoning_content: deepseek_r1 (the opening tag optional; without </think> all of the text is reasoning), qwen3 (only a text holding both tags has reasoning); null keeps it in the content. Tool calls are read from the text after the reasoning. Only the answer's JSON changes: every sampled token is recorded.", choices=["deepseek_r1", "qwen3", None], refs=[f"{_TRINITY}.reasoning_parser"])


@section
class TraceConfig:
    """Rollout traces to an external tracer (verl's rollout.trace; posttrain.tracking.rollout_traces)."""

    backend: str | None = param(None, doc="mlflow: one MLflow trace per response of every training and validation rollout (tags step, sample_index, rollout_n, validate; the prompt's and the response's token ids, the score), in the MLflow store and experiment of trainer.logger's mlflow tracker (tracker_kwargs.uri, MLFLOW_TRACKING_URI, else <run dir>/mlruns), attached to its run when it logs one; weave is refused; null traces nothing.", refs=[f"{_VERL}.trace.backend"])
    token2text: bool = param(False, doc="Add the decoded prompt and response text to each trace.", refs=[f"{_VERL}.trace.token2text"])
    max_samples_per_step_per_worker: int | None = param(None, doc="Trace at most this many prompts of a rollout (each with all its responses), chosen at random; null traces all. verl counts per agent-loop worker; posttrain traces in its driver, so the limit is the rollout's.", ge=0, refs=[f"{_VERL}.trace.max_samples_per_step_per_worker"])


@section
class HfEngineKwargs:
    """Options of the built-in hf engine."""

    decode_workers: int | None = param(None, doc="Threads that decode shards of a rollout batch at once, each with an equal share of the torch threads; null: on CPU one per torch thread with at least 8 rows each (a decode step's small ops use one core however many torch has), 1 on GPU. Sampled tokens depend on it (each shard has its own generator, seeded from the engine's); log-probs stay exact.", ge=1)


@section
class EngineKwargsConfig:
    """Engine-specific options, one group per engine; only the chosen engine's group is used."""

    hf: HfEngineKwargs = param(factory=HfEngineKwargs, doc="Options of the built-in hf engine.")
    vllm: dict[str, Any] = param(factory=dict, doc="Keyword arguments passed as they are to vllm.LLM(...) (e.g. swap_space, block_size, compilation_config; null values are left out, so vLLM's defaults hold).", refs=[f"{_VERL}.engine_kwargs.vllm"])
    sglang: dict[str, Any] = param(factory=dict, doc="Keyword arguments passed as they are to sglang.Engine(...) (e.g. attention_backend, mem_fraction_static; null values are left out).", refs=[f"{_VERL}.engine_kwargs.sglang"])


@section
class ExternalModelConfig:
    """An OpenAI-compatible endpoint served elsewhere as the policy (`rollout.name: external`).

    Only `trainer.mode: bench` samples from it (Trinity-RFT allows it in bench mode alone): a run that
    trains syncs the actor's weights into its engine, which a model served elsewhere cannot take."""

    model_name: str = param("", doc="The model id sent in every chat-completions request (`model`).")
    base_url_env: str = param("OPENAI_BASE_URL", doc="Environment variable holding the endpoint's base URL, up to and including /v1 (requests go to <url>/chat/completions).")
    api_key_env: str = param("OPENAI_API_KEY", doc="Environment variable holding the API key, sent as `Authorization: Bearer <key>`.")
    timeout_s: float = param(600.0, doc="Seconds one request may take before it counts as failed.", gt=0)
    max_retries: int = param(2, doc="Retries of a request that failed to connect, timed out or got HTTP 408/409/429/5xx (the OpenAI client's default, which Trinity-RFT's external engine uses), with 0.5 s, 1 s, 2 s, ... between tries; other HTTP errors fail at once.", ge=0)


@section
class RolloutConfig:
    """Sampling responses from the current policy."""

    # ---- engine ------------------------------------------------------------------------------
    name: str = param("hf", doc="Generation engine: hf (built in: the training model samples with a KV cache, CPU or GPU), vllm or sglang (pip install 'posttrain[vllm]' / 'posttrain[sglang]'; a CUDA GPU), external (an OpenAI-compatible endpoint, rollout.external; trainer.mode bench only).", choices=["hf", "vllm", "sglang", "external"], refs=[f"{_VERL}.name", "roll:actor_infer.strategy_args.strategy_name", f"{_TRINITY}.engine_type"])

    # ---- sampling ----------------------------------------------------------------------------
    n: int = param(1, doc="Responses sampled per prompt (the group size of GRPO/RLOO).", ge=1, refs=[f"{_VERL}.n", "roll:num_return_sequences_in_group", f"{_ROLL_GEN}.num_return_sequences", "trinity:algorithm.repeat_times"])
    temperature: float = param(1.0, doc="Sampling temperature: logits are divided by it (must be > 0 when do_sample).", ge=0, refs=[f"{_VERL}.temperature", f"{_ROLL_GEN}.temperature", "trinity:model.temperature"])
    top_k: int = param(-1, doc="Sample among the k most likely tokens only; -1 or 0 disables.", ge=-1, refs=[f"{_VERL}.top_k", f"{_ROLL_GEN}.top_k"])
    top_p: float = param(1.0, doc="Nucleus sampling: smallest token set with this total probability; 1.0 disables.", gt=0, le=1, refs=[f"{_VERL}.top_p", f"{_ROLL_GEN}.top_p", "trinity:model.top_p"])
    do_sample: bool = param(True, doc="Sample during training rollouts; false decodes greedily (every response of a group is then the same).", refs=[f"{_VERL}.do_sample", f"{_ROLL_GEN}.do_sample"])
    repetition_penalty: float = param(1.0, doc="Divide positive logits (multiply negative ones) of tokens already in the sequence by this; 1.0 disables.", gt=0, refs=[f"{_VERL}.repetition_penalty", f"{_ROLL_GEN}.repetition_penalty", "trinity:model.repetition_penalty"])
    ignore_eos: bool = param(False, doc="Keep generating after the end-of-sequence token until response_length.", refs=[f"{_VERL}.ignore_eos", f"{_TRINITY}.ignore_eos"])
    response_length: int | None = param(None, doc="Most tokens generated per response; null uses data.max_response_length. (A ROLL RLVR file's actor_infer max_new_tokens is not read: ROLL generates sequence_length - prompt_length tokens, data.max_response_length.)", ge=1, refs=[f"{_VERL}.response_length", f"{_ROLL_GEN}.max_new_tokens"])
    prompt_length: int | None = param(None, doc="Longest prompt the engine accepts in tokens: data.max_prompt_length bounds every prompt, so null or that same value (verl's default, ${data.max_prompt_length}); another value is refused.", ge=1, refs=[f"{_VERL}.prompt_length"])
    min_response_length: int = param(0, doc="Fewest tokens per response: the end-of-sequence and stop tokens cannot be drawn before it (vLLM's min_tokens), in training and validation rollouts; 0 disables. A row still ends at response_length or model.max_model_len.", ge=0, refs=["trinity:model.min_response_tokens"])
    use_fire_sampling: bool = param(False, doc="FIRE sampling (Chen et al., 2024): the first token of each training response is drawn at temperature 30 among the top_k tokens (16 when top_k is off), the rest as configured; log-probs stay at the regular temperature. Validation is not affected.", refs=[f"{_VERL}.use_fire_sampling"])
    num_beams: int = param(1, doc="Beam search width: 1, sampling (the only value: RL needs the n responses of a prompt drawn independently from the policy, with the policy's log-probs; beam search returns the n most likely sequences instead, which are neither independent nor distributed as the policy).", ge=1, refs=[f"{_ROLL_GEN}.num_beams"])
    stop_strings: list[str] = param(factory=list, doc="Strings that end a response: generation stops after the token whose decoded text completes one (training and validation rollouts, every engine); the response mask ends there too. Empty: only EOS and the length end a response.", refs=[f"{_ROLL_GEN}.stop_strings"])
    include_stop_str_in_output: bool = param(True, doc="Keep the stop string in the response (ROLL's default). false takes its tokens off again, from the token in which it starts (that token's text before the string goes with it), so the reward's text and the trained tokens both end before it.", refs=[f"{_ROLL_GEN}.include_stop_str_in_output"])
    seed: int | None = param(None, doc="Seed of the engine's sampler, which also reseeds it before every validation; null uses trainer.seed.", refs=[f"{_TRINITY}.seed"])
    calculate_log_probs: bool = param(False, doc="Return the engine's own log-probs of the sampled tokens (verl needs true for algorithm.rollout_is_threshold). The hf engine always returns them, since old-log-prob reuse and rollout importance sampling read them, so false changes nothing with it.", refs=[f"{_VERL}.calculate_log_probs"])
    layered_summon: bool = param(False, doc="verl gathers a sharded LoRA actor layer by layer for the weight sync, to bound its peak memory; posttrain's weight sync always gathers one tensor at a time (never the whole model), so true changes nothing: accepted, no effect.", refs=[f"{_VERL}.layered_summon"])
    val_kwargs: ValKwargsConfig = param(factory=ValKwargsConfig, doc="Sampling parameters used for validation.")
    external: ExternalModelConfig = param(factory=ExternalModelConfig, doc="The endpoint rollout.name=external samples from.")

    # ---- old log-probs (recomputed by the actor after generation) -----------------------------
    log_prob_micro_batch_size_per_gpu: int | None = param(None, doc="Responses per forward pass when recomputing old log-probs on one device; null uses actor.ppo_micro_batch_size_per_gpu.", ge=1, refs=[f"{_VERL}.log_prob_micro_batch_size_per_gpu", "roll:actor_train.infer_batch_size"])
    log_prob_use_dynamic_bsz: bool | None = param(None, doc="Pack old-log-prob micro-batches by tokens; null follows actor.use_dynamic_bsz.", refs=[f"{_VERL}.log_prob_use_dynamic_bsz", "roll:actor_train.use_dynamic_batching_in_infer"])
    log_prob_max_token_len_per_gpu: int | None = param(None, doc="Token budget of one old-log-prob micro-batch on one device; null uses actor.ppo_max_token_len_per_gpu.", ge=1, refs=[f"{_VERL}.log_prob_max_token_len_per_gpu", "roll:actor_train.max_tokens_per_microbatch_in_infer"])

    # ---- placement and parallelism ------------------------------------------------------------
    hybrid_engine: bool = param(True, doc="true: the rollout engine lives in the training process(es) (verl's hybrid engine, colocated). false: split placement, the engine in an explorer process of its own and training in a trainer process, synchronised every step (on-policy; the decoupled layout of docs/async.md with sync_interval 1, sync_offset 0).", refs=["verl:actor_rollout_ref.hybrid_engine"])
    tensor_model_parallel_size: int = param(1, doc=f"Devices one engine replica is split over (tensor parallelism; vLLM tensor_parallel_size, SGLang tp_size). {_GPU_ENGINES}", ge=1, refs=[f"{_VERL}.tensor_model_parallel_size", f"{_TRINITY}.tensor_parallel_size", "roll:actor_infer.num_gpus_per_worker"])

    # ---- engine memory and performance (vLLM/SGLang) -----------------------------------------
    dtype: str = param("auto", doc="Engine weight dtype: auto (the actor's compute dtype: actor.fsdp_config.mixed_precision.param_dtype, else model.dtype), fp32, bf16 or fp16. Another dtype than the actor's parameters gives the engine its own copy of the weights in that dtype, refreshed after every optimizer step.", choices=["auto", "fp32", "bf16", "fp16"], refs=[f"{_VERL}.dtype", f"{_TRINITY}.dtype", "roll:actor_infer.model_args.dtype"])
    gpu_memory_utilization: float = param(0.5, doc=f"Fraction of device memory the engine may take for weights and KV cache (SGLang: mem_fraction_static). {_GPU_ENGINES}", gt=0, le=1, refs=[f"{_VERL}.gpu_memory_utilization", f"{_TRINITY}.gpu_memory_utilization", f"{_ROLL_STRAT}.gpu_memory_utilization", f"{_ROLL_STRAT}.mem_fraction_static"])
    free_cache_engine: bool = param(True, doc="Put the engine to sleep after each generation and wake it before the next, so training has the memory: vLLM sleep(level=1) / SGLang release_memory_occupation (KV cache dropped, weights to host memory); the hf engine keeps no KV cache between calls and moves only a weight copy it owns on a GPU.", refs=[f"{_VERL}.free_cache_engine"])
    enforce_eager: bool = param(True, doc=f"Run the engine eagerly, without CUDA graphs (SGLang: disable_cuda_graph). {_GPU_ENGINES}", refs=[f"{_VERL}.enforce_eager", f"{_TRINITY}.enforce_eager"])
    load_format: str = param("dummy_dtensor", doc=f"How the engine gets its first weights: dummy* = random, then the policy's weights are sent in before the first rollout (nothing read from disk twice); anything else (auto, safetensors, ...) is passed to the engine, which reads model.path itself. {_GPU_ENGINES}", refs=[f"{_VERL}.load_format", f"{_ROLL_STRAT}.load_format"])
    max_model_len: int | None = param(None, doc=f"Longest prompt + response the engine holds in tokens (SGLang: context_length); null: data.max_prompt_length + the response length. {_GPU_ENGINES}", ge=1, refs=[f"{_VERL}.max_model_len", f"{_ROLL_STRAT}.max_model_len"])
    max_num_batched_tokens: int = param(8192, doc=f"Most tokens the engine processes in one scheduler step (SGLang: chunked_prefill_size). {_GPU_ENGINES}", ge=1, refs=[f"{_VERL}.max_num_batched_tokens"])
    max_num_seqs: int = param(1024, doc="Most sequences the engine generates at once (SGLang: max_running_requests; hf: rows decoded together, the rest in later chunks).", ge=1, refs=[f"{_VERL}.max_num_seqs", "roll:actor_infer.infer_batch_size"])
    enable_chunked_prefill: bool = param(True, doc=f"Split long prompt prefills into chunks to cap peak memory (SGLang: false sets chunked_prefill_size -1). {_GPU_ENGINES}", refs=[f"{_VERL}.enable_chunked_prefill", f"{_TRINITY}.enable_chunked_prefill"])
    enable_prefix_caching: bool = param(False, doc="Reuse the KV cache of shared prompt prefixes across requests (hf engine: each distinct prompt is prefilled once for its n responses; SGLang: false sets disable_radix_cache).", refs=[f"{_VERL}.enable_prefix_caching", f"{_TRINITY}.enable_prefix_caching"])
    disable_log_stats: bool = param(True, doc=f"Silence the engine's periodic statistics log. {_VLLM_ONLY}", refs=[f"{_VERL}.disable_log_stats"])
    update_weights_bucket_megabytes: int = param(512, doc=f"The weight sync sends the actor's tensors to the engine in buckets of about this many MiB, one call each (a tensor larger than a bucket goes alone), so no second whole copy of the model is held. {_GPU_ENGINES}", ge=1, refs=[f"{_VERL}.checkpoint_engine.update_weights_bucket_megabytes", "roll:model_update_buffer_size_mb"])
    engine_kwargs: EngineKwargsConfig = param(factory=EngineKwargsConfig, doc="Engine-specific options (hf, vllm, sglang).")

    # ---- agentic ------------------------------------------------------------------------------
    multi_turn: MultiTurnConfig = param(factory=MultiTurnConfig, doc="Multi-turn rollouts with tool calls.")
    agent: AgentFnConfig = param(factory=AgentFnConfig, doc="A user's agent function over an OpenAI-compatible endpoint.")
    trace: TraceConfig = param(factory=TraceConfig, doc="Rollout traces to MLflow.")


_ASYNC_SERVER = ("verl's replacement for its vLLM/SGLang HTTP server class; posttrain has no rollout server between trainer "
                 "and engine: engines run in the worker and implement posttrain.rollout.base.RolloutEngine, registered "
                 "by name with posttrain.rollout.registry.register_engine and chosen with rollout.name")
# Reference keys with no field in `rollout`, and why (read by the mapping generator and dialect loaders).
_REPLICAS = ("data- or expert-parallel ranks inside one vLLM/SGLang engine (for MoE models): posttrain's engine on each worker "
             "splits a model only by tensor parallelism (rollout.tensor_model_parallel_size); 1 is accepted")
UNSUPPORTED: dict[str, str] = {
    f"{_VERL}.multi_turn.num_repeat_rollouts": "declared in verl's config but read by none of its rollouts; rollout.n sets the responses per prompt",
    f"{_ROLL_VAL_GEN}.stop_strings": "validation stops at rollout.stop_strings like training (ROLL: actor_infer.generating_args.stop_strings)",
    f"{_ROLL_VAL_GEN}.include_stop_str_in_output": "validation follows rollout.include_stop_str_in_output like training (ROLL: actor_infer.generating_args.include_stop_str_in_output)",
    f"{_ROLL_VAL_GEN}.num_beams": "beam search is not offered; validation samples or decodes greedily (rollout.val_kwargs.do_sample)",
    # Keys met in the published examples (tests/config/corpus, benchmarks/foreign_corpus.py).
    f"{_VERL}.agent.custom_async_server.path": _ASYNC_SERVER,
    f"{_VERL}.agent.custom_async_server.name": _ASYNC_SERVER,
    f"{_VERL}.multi_turn.completion_callback": ("a function verl's chat scheduler ran after each completion to decide the next request; "
                                               "posttrain's multi-turn loop decides the next turn from the model's tool calls: add behaviour "
                                               "as a tool (rollout.multi_turn.tool_config_path), an interaction "
                                               "(rollout.multi_turn.interaction_config_path) or an environment (docs/agentic.md)"),
    "roll:actor_infer.model_args.attn_implementation": "every role runs the policy's attention kernel (model.attn_implementation, ROLL: actor_train.model_args.attn_implementation)",
    "verl:actor_rollout_ref.rollout.enable_rollout_routing_replay": ("recording the engine's MoE routing for the training forward to replay (R3): "
                                                                     "posttrain's training forward routes every token with the model's own router; false is accepted"),
    "verl:actor_rollout_ref.rollout.data_parallel_size": _REPLICAS,
    "verl:actor_rollout_ref.rollout.pipeline_model_parallel_size": ("pipeline-parallel ranks inside one vLLM/SGLang engine: posttrain's engine splits a "
                                                                    "model only by tensor parallelism (rollout.tensor_model_parallel_size); 1 is accepted"),
    f"{_VERL}.quantization": "a quantized rollout (fp8 weights in the engine): the engine would sample from other numbers than the actor's; posttrain's engine holds the actor's weights in rollout.dtype",
    f"{_VERL}.quantization_config_file": "the settings of a quantized rollout (rollout.quantization), which posttrain does not provide",
    f"{_VERL}.logprobs_mode": "which log-probs vLLM returns; posttrain's vLLM adapter returns processed_logprobs (verl's default), the distribution it sampled from",
    f"{_VERL}.full_determinism": "batch-invariant, deterministic kernels in the engine; posttrain's engines run their default kernels",
    f"{_VERL}.multi_turn.function_tool_path": ("a Python file whose functions verl turns into tools; posttrain's tools are classes named in "
                                               "rollout.multi_turn.tool_config_path (docs/agentic.md)"),
    f"{_VERL}.agent.agent_loop_config_path": ("a YAML file of verl agent-loop classes; posttrain's rollouts are single-turn, tool-calling "
                                              "(rollout.multi_turn) or an agent function over an endpoint (rollout.agent)"),
    f"{_VERL}.agent.default_agent_loop": ("the agent-loop class each row runs unless it names one; posttrain picks its rollout from "
                                          "rollout.multi_turn and rollout.agent: single_turn_agent (verl's default) is accepted"),
    f"{_VERL}.disaggregation.enabled": ("prefill-decode disaggregation (SGLang prefilling and decoding on separate replicas, the KV cache "
                                        "moved between them); posttrain's engine prefills and decodes in place"),
    f"{_VERL}.qat": "the rollout's copy of the actor's quantization-aware training settings, which posttrain does not provide; null is accepted",
    **{f"{_VERL}.qat.{k}": ("the rollout's copy of the actor's quantization-aware training settings, which posttrain does not provide; "
                            "the defaults (enable: false) are accepted")
       for k in ("enable", "mode", "group_size", "ignore_patterns", "activation_observer", "quantization_config_path")},
    f"{_VERL}.skip_rollout": "verl 0.8's rollout cache (generate once, dump, reload); posttrain samples every step",
    f"{_VERL}.skip_dump_dir": "the folder of verl 0.8's rollout cache (skip_rollout), which posttrain does not provide",
    "verl:actor_rollout_ref.rollout.expert_parallel_size": _REPLICAS,
    "verl:actor_rollout_ref.rollout.moe_tensor_parallel_size": ("tensor parallelism of the MoE layers inside a TensorRT-LLM engine (verl "
                                                                 "reads it only with rollout.name trtllm): the TensorRT-LLM engine is not "
                                                                 "provided; 1 is accepted"),
    **{f"verl:actor_rollout_ref.rollout.prometheus.{k}": ("Prometheus metrics of verl's rollout servers: posttrain's engines run inside the "
                                                          "workers with no server, and its generation metrics go to trainer.logger; the defaults "
                                                          "(enable: false) are accepted") for k in ("enable", "port", "file", "served_model_name")},
    "verl:actor_rollout_ref.rollout.mtp": "the rollout's copy of actor_rollout_ref.model.mtp (multi-token prediction), which posttrain does not provide",
    "verl:actor_rollout_ref.rollout.engine_kwargs.trtllm": "the TensorRT-LLM engine is not provided (engines: hf; vLLM/SGLang: issue 19)",
    "verl:actor_rollout_ref.rollout.checkpoint_engine": "verl's weight-transfer engine to its vLLM/SGLang servers; posttrain's weight sync (posttrain/cluster/weight_sync.py) hands the actor's tensors to the engine in the same process, in buckets of rollout.update_weights_bucket_megabytes",
    "trinity:explorer.rollout_model": "options of Trinity-RFT's vLLM rollout model that posttrain has no counterpart for: posttrain calls its engine in-process (its OpenAI server and tool-call and reasoning parsers are the agent function's endpoint, rollout.agent; the multi-turn tool loop reads rollout.multi_turn.format)",
    "trinity:model.top_k": ("the explorer engine's default top_k, which Trinity-RFT's task workflows override with every request: "
                            "they pass the taskset's rollout_args.top_k (-1 unless set; model.top_k does not fill it, as it does "
                            "temperature and top_p); set buffer.explorer_input.taskset.rollout_args.top_k instead"),
    "trinity:model.logprobs": "log-probs of the top alternatives of each sampled token (vLLM's logprobs > 0): posttrain keeps the sampled token's only",
}

_SCHEDULING = "request scheduling inside ROLL's generation workers: it changes when requests run, not what is sampled"
# Reference keys any value of which changes nothing in posttrain (the loaders drop them with the reason).
NO_EFFECT: dict[str, str] = {
    f"{_VERL}.cudagraph_capture_sizes": "the batch sizes vLLM captures CUDA graphs for: how fast, not what is sampled",
    f"{_VERL}.scheduling_policy": "the order vLLM schedules requests in (fcfs or priority): when each runs, not what is sampled",
    f"{_VERL}.skip_tokenizer_init": "whether the engine loads its own tokenizer; posttrain hands it token ids either way",
    f"{_VERL}.moe_load_balance_metrics_interval": "how often verl logs its engine's MoE load metrics",
    f"{_VERL}.agent.num_workers": "how many agent-loop workers verl runs requests on: concurrency, not what is sampled",
    **{f"{_VERL}.disaggregation.{k}": "a setting of prefill-decode disaggregation, read only with disaggregation.enabled (refused)"
       for k in ("prefill_replicas", "decode_replicas", "decode_tensor_model_parallel_size", "transfer_backend", "bootstrap_port", "ib_device")},
    f"{_VERL}.trace.project_name": "the trace's project, verl's trainer.project_name by default; posttrain tags traces with trainer.project_name",
    f"{_VERL}.trace.experiment_name": "the trace's experiment, verl's trainer.experiment_name by default; posttrain tags traces with trainer.experiment_name",
    "roll:actor_infer.offload_nccl": NCCL_OFFLOAD,
    "roll:actor_infer.data_args.template": TEMPLATE_UNREAD,
    "roll:actor_infer.model_args.disable_gradient_checkpointing": "the rollout engine runs no backward pass, so gradient checkpointing has no meaning there",
    "roll:actor_infer.world_size": "derived from device_mapping in ROLL too (posttrain: from the cluster section)",
    "roll:generate_opt_level": _SCHEDULING,
    "roll:max_running_requests": _SCHEDULING,
    "roll:is_num_return_sequences_expand": "posttrain always samples rollout.n independent responses per prompt, the result either value gives",
    f"{_VERL}.mode": ("verl's async mode serves generation from inference servers that an agent loop sends requests to, and its "
                      "sync mode (removed in current verl) called the engine for a whole batch; both return the same responses, "
                      "log-probs and masks. posttrain's engines run inside the worker and generate each batch directly, "
                      "the same records whichever was named"),
    f"{_VERL}.multi_stage_wake_up": ("posttrain's vllm and sglang engines always wake in stages, what true asks: a weight sync "
                                     "while the engine sleeps (rollout.free_cache_engine) wakes the weights alone, and the KV "
                                     "cache comes back only when the next generation starts. verl 0.8 declares the key and "
                                     "does the same whatever its value"),
    f"{_VERL}.over_sample_rate": ("verl 0.8 declares it and reads it nowhere: the SGLang batch rollout that stopped once "
                                  "(1 - rate) of a batch's requests had finished, and put masked padding rows in place of the "
                                  "rest, is gone, and its agent loop waits for every request. posttrain too trains on every "
                                  "response of the batch"),
    # an older verl's SGLang rollout: in the worker (engine) or behind an HTTP server (server); verl 0.8 has neither key
    f"{_VERL}.sglang_rollout_mode": ("where an older verl ran SGLang: in the worker (engine) or as an HTTP server the worker "
                                     "sends requests to (server); either samples the same responses. posttrain's sglang "
                                     "engine runs in the worker"),
    f"{_VERL}.server": ("the HTTP client settings of an older verl's SGLang server mode (timeout, max_attempts, retry_delay, "
                        "max_connections, max_start_wait_time): posttrain calls its engine in the worker, with no HTTP "
                        "request to time out, retry or pool"),
}


def check_external(cfg: Any) -> list[str]:
    """rollout.name=external: a bench of the endpoint only (its weights cannot be synced), with a
    model id and the chat messages of each row (posttrain.rollout.external_engine)."""
    rollout = getattr(cfg, "rollout", None)
    if getattr(rollout, "name", "hf") != "external":
        return []
    problems = []
    mode = cfg.trainer.mode
    if mode != "bench":
        problems.append(f"rollout.name=external with trainer.mode={mode}: an external endpoint's weights cannot be synced from the "
                        "actor, so it can only be evaluated: use trainer.mode bench")
    if not rollout.external.model_name:
        problems.append("rollout.external.model_name: the model id the endpoint serves is required")
    if not cfg.data.return_raw_chat:
        problems.append("rollout.name=external sends each row's chat messages: set data.return_raw_chat: true")
    # what a chat-completions request cannot ask for (request_body sends n, temperature, top_p, max_tokens, stop, seed)
    unsent = {"rollout.val_kwargs.top_k": rollout.val_kwargs.top_k not in (-1, 0),
              "rollout.repetition_penalty": rollout.repetition_penalty != 1.0,
              "rollout.min_response_length": rollout.min_response_length != 0,
              "rollout.ignore_eos": rollout.ignore_eos,
              "rollout.include_stop_str_in_output": not rollout.include_stop_str_in_output}
    problems += [f"{key}: an OpenAI chat-completions request has no such field, so the external endpoint cannot honour it; leave it at its default"
                 for key, changed in unsent.items() if changed]
    return problems


def check_num_beams(cfg: Any) -> list[str]:
    """Beam search cannot give RL its samples (rollout.num_beams doc)."""
    beams = getattr(getattr(cfg, "rollout", None), "num_beams", 1)
    if beams != 1:
        return [f"rollout.num_beams={beams}: beam search returns the most likely sequences, not independent samples of the "
                "policy, so their log-probs and advantages would not estimate the policy gradient; use 1 (sampling) with rollout.n responses"]
    return []


def check_min_response_length(cfg: Any) -> list[str]:
    """A minimum beyond the response budget would forbid every end-of-sequence token."""
    rollout, data = getattr(cfg, "rollout", None), getattr(cfg, "data", None)
    least = getattr(rollout, "min_response_length", 0)
    most = getattr(rollout, "response_length", None) or getattr(data, "max_response_length", None)
    if least and most is not None and least > most:
        return [f"rollout.min_response_length ({least}) exceeds the response length ({most}): no response could end before its budget; lower it or raise rollout.response_length / data.max_response_length"]
    val = getattr(getattr(rollout, "val_kwargs", None), "response_length", None)
    if least and val is not None and least > val:
        return [f"rollout.min_response_length ({least}) exceeds the validation response length (rollout.val_kwargs.response_length {val}): no validation response could end before its budget; lower one or raise the other"]
    return []


def check_prompt_length(cfg: Any) -> list[str]:
    """rollout.prompt_length is verl's copy of data.max_prompt_length (its default interpolates it):
    posttrain's prompts are bounded by data.max_prompt_length alone, so another value is refused."""
    rollout, data = getattr(cfg, "rollout", None), getattr(cfg, "data", None)
    limit = getattr(rollout, "prompt_length", None)
    if limit is not None and data is not None and limit != data.max_prompt_length:
        return [f"rollout.prompt_length ({limit}) differs from data.max_prompt_length ({data.max_prompt_length}): posttrain bounds every prompt by data.max_prompt_length; set that, and leave prompt_length out or equal to it"]
    return []


def check_trace(cfg: Any) -> list[str]:
    """rollout.trace.backend: MLflow is the tracer posttrain writes traces to."""
    backend = getattr(getattr(getattr(cfg, "rollout", None), "trace", None), "backend", None)
    if backend == "weave":
        return ["rollout.trace.backend=weave: posttrain writes rollout traces to MLflow, through the tracing API of the "
                "mlflow tracker it has; W&B Weave is not one of its tracers. Use rollout.trace.backend: mlflow (trainer.logger "
                "may still name wandb for the metrics)"]
    if backend not in (None, "mlflow"):
        return [f"rollout.trace.backend={backend}: not a tracer; use mlflow, or null for no traces"]
    return []


def check_agent_kwargs(cfg: Any) -> list[str]:
    """rollout.agent.kwargs / val_kwargs are the function's arguments: without a function they reach nothing."""
    agent = getattr(getattr(cfg, "rollout", None), "agent", None)
    if agent is None or agent.function is not None:
        return []
    return [f"rollout.agent.{k}: set, but rollout.agent.function is null, so no agent takes them; name the function or remove them"
            for k in ("kwargs", "val_kwargs") if getattr(agent, k)]
