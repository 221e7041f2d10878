"""Trinity-RFT's task selector (``buffer.explorer_input.taskset.data_selector``) onto ``data.selector``.

Trinity-RFT reads a taskset through a selector (trinity/buffer/selector/selector.py): its type, seed,
feature_keys and kwargs are posttrain's ``data.selector`` fields and ``data.seed`` (the schema's
refs move them key by key). What this handler adds:

- the seed: Trinity-RFT's DataSelectorConfig seeds with 42 when the file gives none, posttrain's
  data.seed defaults to 1, so 42 is written for the selectors that draw (shuffle, random,
  difficulty_based);
- kwargs that the type does not read: Trinity-RFT ignores them (only difficulty_based reads kwargs,
  and only m, lamb, rho, adaptive_rho, target_reward, tau, do_sample), so they are dropped;
- difficulty_based learns only from the pass rates that the ``pass_rate_calculator`` experience
  operator reports (trinity/buffer/task_scheduler.py, feedback): without it in
  data_processor.experience_pipeline the estimate never moves from its prior, which posttrain's
  selector (fed every step's scores) cannot reproduce, so that file is refused naming the fix.
- an RL taskset without data_selector is read in file order (Trinity-RFT's default selector_type
  sequential; its reader walks the rows from the start and wraps): data.selector.type sequential.
  A file with stages keeps posttrain's shuffled order: the selector would be inherited by its SFT/DPO
  stages, which draw rows uniformly.
"""

from __future__ import annotations

from posttrain.config.dialects.translate import Context

_TS = "buffer.explorer_input.taskset"
_SEL = f"{_TS}.data_selector"
KWARGS = ("m", "lamb", "rho", "adaptive_rho", "target_reward", "tau", "do_sample")
DRAWS = ("shuffle", "random", "difficulty_based")
TRINITY_SEED = 42  # trinity/common/config.py, DataSelectorConfig.seed


def _feeds_back(ctx: Context) -> bool:
    operators = ctx.get("data_processor.experience_pipeline.operators") or []
    return any(isinstance(op, dict) and op.get("name") == "pass_rate_calculator" for op in operators)


def data_selector(ctx: Context) -> None:
    taskset = ctx.get(_TS)
    if not isinstance(taskset, dict) or "path" not in taskset:
        return
    selector = taskset.get("data_selector")
    if selector is None:
        # SFT/DPO rows are drawn uniformly; in a file of stages the SFT/DPO ones would inherit the order
        rl = ctx.native_get("algorithm.kind", "rl") == "rl" and not ctx.has("stages")
        if "data_selector" not in taskset and rl:
            ctx.set("data.selector.type", "sequential", _TS, "no data_selector: Trinity-RFT reads the taskset in file order "
                    "(its default selector_type sequential), wrapping around")
        return
    if not isinstance(selector, dict):
        return  # the walker refuses a non-mapping by its type
    kind = selector.get("selector_type", "sequential")
    if "selector_type" not in selector:
        ctx.set("data.selector.type", kind, _SEL, "no selector_type: Trinity-RFT's default, sequential")
    if kind in DRAWS and "seed" not in selector:
        ctx.set("data.seed", TRINITY_SEED, _SEL, f"no seed: Trinity-RFT's selectors draw with seed {TRINITY_SEED}")
    kwargs = selector.get("kwargs")
    if isinstance(kwargs, dict):
        for name, value in kwargs.items():
            if kind != "difficulty_based" or name not in KWARGS:
                ctx.consume(f"{_SEL}.kwargs.{name}")
                reads = f"reads only {', '.join(KWARGS)}" if kind == "difficulty_based" else "reads no kwargs"
                ctx.drop(f"{_SEL}.kwargs.{name}", f"Trinity-RFT's {kind} selector {reads}, so it changes nothing there")
    if kind == "difficulty_based" and not _feeds_back(ctx):
        ctx.consume(f"{_SEL}.selector_type")
        ctx.refuse(f"{_SEL}.selector_type", "difficulty_based learns from the pass rates the pass_rate_calculator experience operator "
                   "reports; without it in data_processor.experience_pipeline.operators Trinity-RFT's estimate never leaves its prior, "
                   "while posttrain's selector learns from every step's scores: add {name: pass_rate_calculator} to the operators",
                   "data.selector.type", kind)
