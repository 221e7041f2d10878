"""verl's reward model on either of its two paths, and its rule that the model's score is the reward.

verl scores a reward model on one of two paths, chosen by ``reward_model.use_reward_loop`` (true by
default). Both compute the number posttrain's reward model computes (posttrain.rewards.reward_model):
a sequence classifier's logit at the last token of the conversation. They differ in the keys that
say how, and the engine that runs the forward pass is a speed and memory choice:

- The legacy worker (``use_reward_loop: false``) reads ``reward_model.model.input_tokenizer``,
  ``max_length``, the micro-batch keys and ``model.fsdp_config.param_offload``; the key-by-key
  translation maps most of them (their fields' refs). Its cut differs from posttrain's default: with
  an input tokenizer (the template switch) it cuts the re-rendered conversation to ``max_length``,
  or when that is null to the policy's sequence width (prompt_length + response_length), keeping
  the *beginning* (``reward_model.truncation``, added with ``+``, default right), so
  ``reward.reward_model.truncation`` and ``max_length`` are set to match; without one the reward
  model reads the policy's own tokens and ``max_length`` is not read.
- The reward loop (verl's ``experimental/reward_loop``) serves the reward model with a vLLM/SGLang
  engine (``reward_model.rollout``) that reward-loop workers (``num_workers``) post each conversation
  to. The conversation is the prompt's chat messages (verl's dataset always keeps them) plus the
  response decoded with the *policy's* tokenizer (``actor_rollout_ref.model.path``; the loop does not
  read ``model.input_tokenizer``) with its eos text removed, rendered in the reward model's chat
  template (the loop cuts the leading bos text, which the engine's tokenizer puts back: one bos, as in
  posttrain's rendering). It is never truncated (``max_length`` is not read; the engine rejects a
  conversation longer than its ``max_model_len`` and the run stops), and the score is the engine's raw
  logit (no activation) of the last label. posttrain's ``reward.reward_model`` with ``input_tokenizer``
  the policy's path, ``data.return_raw_chat`` and no ``max_length`` reads the same text and computes
  the same logit with its Hugging Face model on each worker. Of the engine's settings only
  ``free_cache_engine`` has a counterpart: a colocated engine sleeps between passes with its weights
  in host memory, which is ``reward.reward_model.param_offload``.

On both paths the reward model's score is the whole reward: verl's trainer takes ``rm_scores`` as the
reward when they are there and does not call the reward function (``reward.function_weight: 0``). The
loop alone makes one exception: with a ``custom_reward_function.path`` it scores with that function
instead, handing it the served model's HTTP address; posttrain serves no reward model over HTTP.
"""

from __future__ import annotations

from typing import Any

from posttrain.config.tables import Rule

REWARD_LOOP = "reward_model.use_reward_loop"
_ENABLE = "reward_model.enable"
_ROLLOUT = "reward_model.rollout"
_NUM_WORKERS = "reward_model.num_workers"
_FREE_CACHE = f"{_ROLLOUT}.free_cache_engine"
_CUSTOM = "custom_reward_function.path"
# Keys only verl's legacy worker reads: with the reward loop they change nothing there.
_LEGACY_ONLY = ("reward_model.model.input_tokenizer", "reward_model.max_length", "reward_model.model.fsdp_config.param_offload")

_LOOP = ("true: verl's reward loop scores each response (with the reward function, or the reward model it serves) "
         "in reward-loop workers; posttrain computes the same scores in its trainer after generation")
_WORKERS = ("how many reward-loop workers share verl's scoring requests (a speed choice: each scores its share the same "
            "way); posttrain scores in the trainer's worker processes (reward.reward_manager: parallel with "
            "reward.num_workers for a process pool of the reward function)")
_ENGINE = ("a setting of the vLLM/SGLang engine that serves verl's reward model in its reward loop (memory, parallelism, "
           "batching, compilation): posttrain computes the reward model's forward pass with its Hugging Face model on "
           "each worker, so there is nothing to set; the scores are the same")
_NOT_STARTED = "the reward loop's engine for the reward model, which verl starts only with reward_model.enable and use_reward_loop both true: not used"
_WHY = {
    "dtype": "the reward-model engine's precision (verl: bfloat16): posttrain computes the reward model in float32, "
             "the same logit rounded less",
    "max_model_len": "the longest conversation verl's reward-model engine accepts (null: the model's "
                     "max_position_embeddings); verl stops the run on a longer one, posttrain scores it whole "
                     "(reward.reward_model.max_length would cut it from the left instead)",
    "prompt_length": "bounds what the engine generates; the reward-model engine only scores",
    "response_length": "bounds what the engine generates; the reward-model engine only scores",
}
_CUSTOM_WHY = ("with a reward model and custom_reward_function.path, verl's reward loop scores with the custom function "
               "alone and hands it the served reward model's HTTP address (reward_router_address) to call; posttrain "
               "serves no reward model over HTTP: set reward_model.use_reward_loop: false (the reward model's score "
               "is the reward, as verl's legacy worker gives it) or reward_model.enable: false (the function's score)")


def reward_model(ctx: Any) -> None:
    """use_reward_loop picks where verl computes the scores, not what they are: either value is
    dropped, and the loop's own keys translate onto posttrain's reward model (module docstring)."""
    loop = ctx.get(REWARD_LOOP, True) is not False
    enabled = ctx.get(_ENABLE, False) is True
    custom = ctx.get(_CUSTOM) is not None
    if ctx.has(REWARD_LOOP):
        ctx.consume(REWARD_LOOP)
        if loop and enabled and custom:
            ctx.refuse(REWARD_LOOP, _CUSTOM_WHY, None, True)
        else:
            ctx.drop(REWARD_LOOP, _LOOP if loop else "false: the reward function or the reward model scores after generation, as in posttrain")
    if ctx.has(_NUM_WORKERS):
        ctx.consume(_NUM_WORKERS)
        ctx.drop(_NUM_WORKERS, _WORKERS if loop else "read only by verl's reward loop, and use_reward_loop is false")
    _engine_settings(ctx, served=loop and enabled)
    if not enabled:
        return
    ctx.consume(_ENABLE)
    ctx.set("reward.reward_model.enable", True, _ENABLE)
    ctx.set("reward.function_weight", 0.0, _ENABLE, "verl takes the reward model's score as the reward and does not call the reward function")
    if loop and not custom:
        _loop_inputs(ctx)
    elif not loop:
        _legacy_cut(ctx)
    if ctx.has(_TRUNCATION) and _TRUNCATION not in ctx.handled:  # verl's get() with a default: a key added with +
        ctx.consume(_TRUNCATION)
        ctx.drop(_TRUNCATION, "read only by verl's legacy reward-model worker when it re-renders the conversation (model.input_tokenizer): not used here")


_MAX_LENGTH, _TRUNCATION, _INPUT_TOKENIZER = "reward_model.max_length", "reward_model.truncation", "reward_model.model.input_tokenizer"


def _legacy_cut(ctx: Any) -> None:
    """How verl's legacy worker cuts a long reward-model input (module docstring)."""
    if ctx.get(_INPUT_TOKENIZER, "the policy's path (verl's default)") is None:
        if ctx.has(_MAX_LENGTH):
            ctx.consume(_MAX_LENGTH)
            ctx.drop(_MAX_LENGTH, "read only by verl's template switch (model.input_tokenizer), which is off: the reward model reads the policy's own tokens, never cut")
        return
    side = ctx.get(_TRUNCATION, "right")
    if ctx.has(_TRUNCATION):
        ctx.consume(_TRUNCATION)
    if side not in ("left", "right", "error"):
        ctx.refuse(_TRUNCATION, f"{side!r}: posttrain cuts a reward-model input on the left or the right (or stops: error), not the middle", "reward.reward_model.truncation", side)
        return
    ctx.set("reward.reward_model.truncation", side, _TRUNCATION if ctx.has(_TRUNCATION) else _ENABLE,
            "verl's legacy worker cuts the re-rendered conversation with this side (its default: right, keeping the beginning)")
    if ctx.get(_MAX_LENGTH) is None:
        ctx.consume(_MAX_LENGTH)
        prompt = ctx.get("actor_rollout_ref.rollout.prompt_length") or ctx.get("data.max_prompt_length", 512)
        response = ctx.get("actor_rollout_ref.rollout.response_length") or ctx.get("data.max_response_length", 512)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (prompt, response)):
            return  # the length keys' own translation reports a value that is not a number
        ctx.set("reward.reward_model.max_length", prompt + response, _MAX_LENGTH if ctx.has(_MAX_LENGTH) else _ENABLE,
                f"null: verl's legacy worker cuts to the policy's sequence width, prompt_length ({prompt}) + response_length ({response})")


def _loop_inputs(ctx: Any) -> None:
    """What the reward loop feeds its reward model, as posttrain's reward-model settings."""
    for key in _LEGACY_ONLY:
        if ctx.has(key):
            ctx.consume(key)
            ctx.drop(key, "read only by verl's legacy reward-model worker (use_reward_loop: false), not by its reward loop")
    policy = ctx.get("actor_rollout_ref.model.path")
    if policy is not None:
        ctx.set("reward.reward_model.input_tokenizer", policy, _ENABLE,
                "verl's reward loop decodes each response with the policy's tokenizer and renders the conversation in the reward model's chat template")
    if ctx.has("data.return_raw_chat"):
        ctx.consume("data.return_raw_chat")
    ctx.set("data.return_raw_chat", True, _ENABLE, "the reward loop renders the prompt's chat messages, which verl's dataset always keeps")
    offload = ctx.get(_FREE_CACHE, True)
    if isinstance(offload, bool):
        ctx.set("reward.reward_model.param_offload", offload, _FREE_CACHE,
                "the colocated engine sleeps between scoring passes, its weights in host memory" if offload else "the engine keeps its weights on the device")
    else:
        ctx.refuse(_FREE_CACHE, f"expected true or false, got {offload!r}", "reward.reward_model.param_offload", offload)


def _engine_settings(ctx: Any, served: bool) -> None:
    """Each leaf of reward_model.rollout: dropped with its reason, free_cache_engine left to `_loop_inputs`."""
    settings = ctx.get(_ROLLOUT)
    if not isinstance(settings, dict):
        return
    ctx.consume(_ROLLOUT)
    for name, value in settings.items():
        key = f"{_ROLLOUT}.{name}"
        if not served:
            ctx.drop(key, _NOT_STARTED)
        elif name == "free_cache_engine":
            continue
        elif name == "name" and value not in (None, "vllm", "sglang"):
            ctx.refuse(key, f"verl's reward loop serves a reward model with vllm or sglang, not {value!r}", None, value)
        elif name == "engine_kwargs" and any(v not in (None, {}) for v in (value or {}).values()):
            ctx.refuse(key, "options of the vLLM/SGLang server of verl's reward model (they may change how it pools or scores): "
                            "posttrain computes the reward model with its Hugging Face model; remove them", None, value)
        else:
            ctx.drop(key, _WHY.get(name, _ENGINE))


# Keys the handler translates (docs/config-mapping.md reads this table: posttrain.config.tables).
RULES: dict[str, Rule] = {
    REWARD_LOOP: Rule(None, f"false: the reward function or the reward model scores after generation, as in posttrain; {_LOOP}. "
                            f"With a reward model and custom_reward_function.path, true is refused: {_CUSTOM_WHY}", True),
    _NUM_WORKERS: Rule(None, _WORKERS, 8),
    _ROLLOUT: Rule(None, f"with reward_model.enable and use_reward_loop: {_ENGINE}; dtype, max_model_len, prompt_length and "
                         "response_length likewise (posttrain computes in float32 and scores a conversation of any length); "
                         "name must be vllm or sglang, engine_kwargs empty; otherwise the engine is not started", {"name": "vllm", "gpu_memory_utilization": 0.8}),
    _FREE_CACHE: Rule("reward.reward_model.param_offload", "with reward_model.enable and use_reward_loop: true (verl's default) "
                                                          "keeps the reward model's weights in host memory between scoring passes", True, ((_ENABLE, True),)),
    _ENABLE: Rule("reward.reward_model.enable, reward.function_weight", "true: the reward model's score is the reward (function_weight 0, "
                                                                       "as verl does not call the reward function); with use_reward_loop (verl's "
                                                                       "default) also input_tokenizer = actor_rollout_ref.model.path, "
                                                                       "data.return_raw_chat true and param_offload = rollout.free_cache_engine", True),
}

HANDLERS = [reward_model]
