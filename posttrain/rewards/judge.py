"""An LLM judge reward worker: a generative model reads each response and writes its verdict.

The judge is a reward manager of its own (`LLMJudge`): a batch's samples become judge prompts, one
``generate`` call answers them all, and a score is read from each answer:

1. **Prompt.** ``judge_prompt`` is a template with ``{question}``, ``{response}`` and
   ``{reference}`` (the sample's prompt, its response without thinking and end-of-turn markers, and
   its ground truth), or the name of a built-in template (`TEMPLATES`; ROLL's
   ``Qwen2.5-7B-Instruct-RLVR-prompt`` names ``reference_match``). The filled text is the user turn
   of a conversation in the judge tokenizer's chat template (the plain text when it has none), or,
   with ``chat_template_name``, in that named template (posttrain.data.templates: ROLL's names, as
   ROLL's judge renders its prompt with its ``data_args.template``), exactly as a policy prompt of
   one user message is rendered with ``data.chat_template_name`` set to it.
2. **Generation.** The engine ``engine.name`` names (hf on CPU, vllm or sglang; built through the
   rollout engine registry: `posttrain.rewards.judge_engine`) samples
   ``generating_args.max_new_tokens`` tokens, greedily unless ``generating_args.do_sample`` is true
   (the hf engine ``infer_batch_size`` prompts per pass).
3. **Score.** ``parse`` (a worker reward_kwargs key) reads the answer: ``yes_no`` gives 1.0 for a
   first word-level "yes", 0.0 for a first "no" (ROLL's judge parses this way); ``score_0_10``
   takes the number after "Score:" (else the last number) and divides it by 10 (ROLL's other parser).
   The default is the named template's parser, ``yes_no`` for a template of your own.

An answer with nothing to parse (no yes/no, no number, a number outside 0-10) is a reward failure of
kind ``unparsable``: ``reward.on_error`` raises or scores it ``reward.failure_reward``, and it is
counted in ``reward/<worker>/failures``; it is never scored 0 silently (ROLL scores it 0 or 0.5).
The share of answers with a score is logged as ``reward/judge_parsed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from posttrain.config.sections.reward import JudgeEngineConfig
from posttrain.errors import ConfigError
from posttrain.rewards.evaluate import Failure, FailurePolicy, SampleResult
from posttrain.rewards.types import RewardInput, RewardOutput
from posttrain.tasks.answers import END_MARKERS

# A judge's text generator: prompts (already in the judge's chat template) -> answers.
Generate = Callable[[list[str]], list[str]]

TEMPLATES: dict[str, tuple[str, str]] = {  # name -> (template, its parser)
    "reference_match": (
        "Decide whether the final answer of a solution agrees with the reference answer (an option letter, "
        "a number, an expression or a list). Judge meaning, not wording or language; an unclear or unfinished "
        "solution does not agree.\n\nQuestion:\n{question}\n\nSolution:\n{response}\n\nReference answer:\n"
        "{reference}\n\nAnswer with one word, YES or NO.",
        "yes_no",
    ),
    "score_0_10": (
        "Rate the response to the question from 0 (useless or wrong) to 10 (correct, complete and clear); "
        "the reference answer, when there is one, is correct.\n\nQuestion:\n{question}\n\nResponse:\n{response}"
        "\n\nReference answer:\n{reference}\n\nEnd with your rating as: Score: <number>",
        "score_0_10",
    ),
}
ROLL_TEMPLATE_NAMES = {"Qwen2.5-7B-Instruct-RLVR-prompt": "reference_match"}
PARSERS = ("yes_no", "score_0_10")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_verdict(answer: str, parser: str) -> float | None:
    """The score a judge's answer gives, or None when it gives none.

    >>> [parse_verdict(a, "yes_no") for a in ("YES", "No, the sum is 7.", "Yes.", "maybe")]
    [1.0, 0.0, 1.0, None]
    >>> [parse_verdict(a, "score_0_10") for a in ("Score: 7", "I give it 8/10... Score: 6.5", "about 4", "Score: 12", "none")]
    [0.7, 0.65, 0.4, None, None]
    """
    if parser == "yes_no":
        match = _YES_NO.search(answer)
        return None if match is None else float(match.group(1).lower() == "yes")
    found = _SCORE.findall(answer) or _NUMBER.findall(answer)
    if not found:
        return None
    value = float(found[-1])
    return value / 10.0 if 0.0 <= value <= 10.0 else None  # outside the scale: the judge misread the task


def template_of(judge_prompt: str | None, parse: str | None, where: str = "reward.workers.<name>") -> tuple[str, str]:
    """(template, parser) of a worker: a built-in by name (ROLL's names too) or a template of one's own."""
    name = ROLL_TEMPLATE_NAMES.get(judge_prompt or "", judge_prompt or "reference_match")
    template, parser = TEMPLATES.get(name, (name, "yes_no"))
    if name not in TEMPLATES and "{response}" not in template:
        raise ConfigError(
            f"{where}.judge_prompt: {judge_prompt!r} is neither a built-in template ({', '.join(TEMPLATES)}) nor a template "
            "with a {response} field (it may also use {question} and {reference})"
        )
    try:
        template.format(question="", response="", reference="")
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"{where}.judge_prompt: the template cannot be filled ({err!r}); it may use {{question}}, "
                          "{response} and {reference}, and must double other braces ({{ }})") from None
    if parse is not None and parse not in PARSERS:
        raise ConfigError(f"{where}.reward_kwargs.parse: {parse!r} is no judge parser; choose one of: {', '.join(PARSERS)}")
    return template, parse or parser


def judge_text(template: str, sample: RewardInput) -> str:
    """The judge's user turn for one sample (the response without thinking or end-of-turn markers)."""
    response = sample.solution_str.rpartition("</think>")[2]
    for marker in END_MARKERS:
        response = response.replace(marker, "")
    fields = {"question": sample.prompt.strip(), "response": response.strip(), "reference": "" if sample.ground_truth is None else str(sample.ground_truth)}
    return template.format(**fields)  # template_of checked that it fills


class LLMJudge:
    """A reward manager that scores a batch with a generative judge (module docstring)."""

    def __init__(self, generate: Generate, *, template: str, parser: str, label: str = "llm_judge",
                 on_error: str = "raise", failure_reward: float = 0.0):
        self.generate = generate
        self.template, self.parser = template, parser
        self.policy = FailurePolicy(label, on_error, failure_reward)

    def score(self, samples: list[RewardInput]) -> RewardOutput:
        answers = self.generate([judge_text(self.template, s) for s in samples]) if samples else []
        results = []
        for answer in answers:
            value = parse_verdict(answer, self.parser)
            if value is None:
                shown = answer if len(answer) <= 120 else answer[:120] + "..."
                results.append(SampleResult(failure=Failure("unparsable", f"(an LLM judge, parser {self.parser}) wrote no score in {shown!r}")))
            else:
                results.append(SampleResult(value))
        out = self.policy.finish(samples, results)
        out.extra["judge_parsed"] = [0.0 if r.failure else 1.0 for r in results]
        return out

    def close(self) -> None:
        pass


def check_model_args(model_args: dict[str, Any], where: str) -> tuple[str, str]:
    """(model directory or hub name, dtype) of a judge's model_args; other keys are refused, except
    the ones that cannot change a CPU judge's answers (listed in `_INERT_MODEL_ARGS`)."""
    path = model_args.get("model_name_or_path")
    if not path:
        raise ConfigError(f"{where}.model_args.model_name_or_path: name the judge model (a local directory or a cached hub name)")
    unknown = sorted(set(model_args) - {"model_name_or_path", "dtype", *_INERT_MODEL_ARGS})
    if unknown:
        raise ConfigError(f"{where}.model_args: the judge does not use {', '.join(unknown)}; it takes model_name_or_path and dtype")
    return str(path), str(model_args.get("dtype", "fp32"))


# ROLL model_args that select a kernel or a training feature: the judge only generates, with the
# attention kernel the engine picks.
_INERT_MODEL_ARGS = ("attn_implementation", "disable_gradient_checkpointing", "model_type")


@dataclass(frozen=True)
class JudgeSpec:
    """A checked LLM judge worker, as plain data: what `build` needs to load and run it."""

    label: str
    model_dir: str
    dtype: str
    template: str
    parser: str
    generating_args: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    chat_template_name: str | None = None
    where: str = "reward.workers.<name>"
    engine: JudgeEngineConfig = field(default_factory=JudgeEngineConfig)
    cluster: Any = None  # the stage's ClusterConfig (posttrain.rewards.judge_engine.judge_config)

    def build(self, *, on_error: str, failure_reward: float, seed: int = 0, generate: Generate | None = None) -> LLMJudge:
        """The judge; ``generate`` replaces the model (a fake engine in tests), else it is loaded here."""
        if generate is None:
            from posttrain.rewards.judge_engine import EngineJudge, judge_config

            cfg = judge_config(self.model_dir, self.engine, batch_size=self.batch_size, cluster=self.cluster)
            generate = EngineJudge(cfg, dtype=self.dtype, generating_args=self.generating_args, seed=seed,
                                   chat_template_name=self.chat_template_name, where=self.where)
        return LLMJudge(generate, template=self.template, parser=self.parser, label=self.label,
                        on_error=on_error, failure_reward=failure_reward)


def judge_spec(where: str, *, judge_prompt: str | None, model_args: dict[str, Any], generating_args: dict[str, Any],
               infer_batch_size: int | None, reward_kwargs: dict[str, Any], chat_template_name: str | None = None,
               engine: JudgeEngineConfig | None = None, cluster: Any = None) -> JudgeSpec:
    """Check an LLM judge worker's keys (``where``: reward.workers.<name>) without loading its model:
    template, parser, sampling arguments, that the model directory is there and that this machine
    can run its engine."""
    from posttrain.models.loading import resolve_model_dir
    from posttrain.rewards.judge_engine import check_judge_machine, sampling_kwargs

    engine = engine or JudgeEngineConfig()

    unknown = sorted(set(reward_kwargs) - {"parse"})
    if unknown:
        raise ConfigError(f"{where}.reward_kwargs: an LLM judge takes only parse ({', '.join(PARSERS)}), not {', '.join(unknown)}")
    template, parser = template_of(judge_prompt, reward_kwargs.get("parse"), where)
    sampling_kwargs(generating_args, where)
    path, dtype = check_model_args(model_args, where)
    resolve_model_dir(path, what="judge model")  # a ModelError now, not after the first rollout
    check_judge_machine(engine, cluster, where)
    return JudgeSpec(f"{where} (LLM judge {path})", path, dtype, template, parser, dict(generating_args), infer_batch_size,
                     chat_template_name, where, engine, cluster)
