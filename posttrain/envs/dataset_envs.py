"""`roll_math` and `roll_qa`: one question of a dataset per episode, answered in one action.

ROLL's agentic examples train on math and question-answering datasets through these two
environment types (GEM's single-turn environments as ROLL registers them). An episode shows one
row's question; the model's one action is graded and the episode ends. With a `tool_wrapper`
(posttrain.envs.text_tools) the model may first call a tool a few times.

    custom_envs:
      dapo:
        env_type: roll_math
        env_config: {dataset_name: DAPO-Math-17k, question_key: prompt, answer_key: solution}

``dataset_name`` is anything `data.train_files` takes (a data file, a dataset folder, a hub
dataset name read from the local cache: posttrain.data.sources; posttrain never downloads), with
``split`` (default ``train``; ROLL's loader fails without one on a hub dataset or a data file).

- **Which row**: the reset seed picks row ``random.Random(seed).randint(0, n - 1)``, the row ROLL's
  dataset actor hands out for that seed (it seeds Python's generator with the episode's seed and
  draws an index). ``roll_qa`` first shuffles the rows with the env's ``seed`` (``env_config.seed``,
  default 0) as ``datasets.Dataset.shuffle`` does, then draws the same way.
- **roll_math** grades the content of the response's last ``\\boxed{...}`` against the answer column
  (a list: any of them) with math-verify: both sides through its default parse, then its verify.
  Reward 1.0 when equal, else 0.0; no ``\\boxed{...}`` is reward 0.0 and an invalid action.
- **roll_qa** shows the question inside a think-then-answer instruction, takes the last
  ``<answer>...</answer>`` (or, with ``extract_boxed: true``, the last ``\\boxed{...}``) and scores an
  exact match after the usual QA normalisation (lower case, no punctuation, no articles, single
  spaces) against the answer or any of a list. No answer is 0.0 and an invalid action.

`check_data` reads the dataset when the plan is made, so a dataset missing from this machine is
reported before any model is loaded.
"""

from __future__ import annotations

import functools
import random
import re
import string
from typing import Any

import numpy as np

from posttrain.envs.registry import register_env
from posttrain.errors import DataError
from posttrain.tasks.answers import last_boxed

QA_INSTRUCTION = (
    "Think the question through first, writing your reasoning as <think> ... </think>; then give the "
    "final answer as <answer> ... </answer>.\n\nQuestion: {question}\n"
)


@functools.lru_cache(maxsize=8)
def dataset_rows(dataset_name: str, split: str) -> tuple[dict[str, Any], ...]:
    """Every row of the dataset's split, read once per process (an env is built for every group of every step)."""
    from posttrain.data.sources import read_entry

    setting = "dataset_name"
    # a folder or hub name reads `split` unless it names its own; a data file is its own split
    rows = [row for _, part in read_entry(dataset_name, setting=setting, default_split=split) for row in part]
    if not rows:
        raise DataError(f"{setting}: {dataset_name} ({split}) has no rows")
    return tuple(rows)


class _DatasetEnv:
    """One row per episode; subclasses grade the action."""

    instruction = ""

    def __init__(self, dataset_name: str = "", split: str | None = None, question_key: str = "problem",
                 answer_key: str = "answer", seed: int = 0, mode: str = "train"):
        if not dataset_name:
            raise ValueError("dataset_name: required (a data file, a dataset folder or a cached hub dataset name)")
        if mode != "train":
            raise ValueError(f"mode {mode!r}: posttrain draws each episode's row from its seed (ROLL's train mode, which its "
                             "validation uses too); remove mode")
        self.dataset_name, self.split = str(dataset_name), split or "train"
        self.question_key, self.answer_key, self.seed = question_key, answer_key, int(seed)
        self.answer: Any = None

    @classmethod
    def check_data(cls, env_config: dict[str, Any]) -> None:
        """Read the dataset now (DataError when this machine lacks it) and check the two columns exist."""
        env = cls(**env_config)
        rows = env._rows()
        for key in (env.question_key, env.answer_key):
            if key not in rows[0]:
                raise DataError(f"{env.dataset_name} has no column {key!r} (its columns: {sorted(rows[0])}); "
                                "set question_key / answer_key")

    def _rows(self) -> tuple[dict[str, Any], ...]:
        return dataset_rows(self.dataset_name, self.split)

    def reset(self, seed: int) -> str:
        rows = self._rows()
        row = rows[random.Random(seed).randint(0, len(rows) - 1)]
        self.answer = row[self.answer_key]
        return self.render(str(row[self.question_key]))

    def render(self, question: str) -> str:
        return question

    def state(self) -> str:
        return repr(self.answer)

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        answer = self.extract(action_text)
        right = answer is not None and self.correct(answer, self.answer)
        return "", 1.0 if right else 0.0, True, {"action_is_valid": answer is not None, "success": right}

    def extract(self, text: str) -> str | None:
        raise NotImplementedError

    def correct(self, answer: str, truth: Any) -> bool:
        raise NotImplementedError


def boxed_content(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces matched), or None: also for an ``\\fbox{...}``
    that comes last, or an unclosed brace (GEM's reading, without the ``\\boxed x`` form)."""
    found = last_boxed(text, spaced=False)
    if found is None or not found.startswith("\\boxed{"):
        return None
    return found[len("\\boxed{"):-1]


@register_env("roll_math")
class MathDatasetEnv(_DatasetEnv):
    """A math question per episode, graded by math-verify on the last boxed answer."""

    def extract(self, text: str) -> str | None:
        return boxed_content(text)

    def correct(self, answer: str, truth: Any) -> bool:
        try:
            from math_verify import parse, verify
        except ImportError as exc:
            raise DataError(f"roll_math grades with the math-verify package ({exc}): pip install 'posttrain[math]'") from exc
        truths = truth if isinstance(truth, (list, tuple)) else [truth]
        try:
            # math-verify's own time limits use SIGALRM; the loop's env.step_timeout bounds the call instead
            mine = parse(answer, parsing_timeout=None)
            return any(verify(parse(str(t), parsing_timeout=None), mine, timeout_seconds=None) for t in truths)
        except Exception:  # an expression math-verify cannot read or compare: not equal, as GEM counts it
            return False


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, articles removed, whitespace collapsed (SQuAD's normalisation).

    >>> normalize_answer("  The  Eiffel-Tower! ")
    'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(answer: str, truth: Any) -> bool:
    """True when the normalised answer equals the normalised truth, or one of a list of truths."""
    truths = truth if isinstance(truth, (list, tuple)) else [truth]
    return any(normalize_answer(answer) == normalize_answer(str(t)) for t in truths)


@register_env("roll_qa")
class QaDatasetEnv(_DatasetEnv):
    """A question per episode inside a think-then-answer instruction, scored by exact match."""

    def __init__(self, dataset_name: str = "", split: str | None = None, question_key: str = "question",
                 answer_key: str = "answer", seed: int = 0, extract_boxed: bool = False, load_from_cache_file: bool = True,
                 mode: str = "train"):
        # load_from_cache_file only steers the datasets library's cache of the prompt mapping: nothing to cache here
        super().__init__(dataset_name, split, question_key, answer_key, seed, mode)
        self.extract_boxed = bool(extract_boxed)

    def _rows(self) -> tuple[dict[str, Any], ...]:
        return _shuffled(self.dataset_name, self.split, self.seed)

    def render(self, question: str) -> str:
        return QA_INSTRUCTION.format(question=question)

    def extract(self, text: str) -> str | None:
        if self.extract_boxed:
            return boxed_content(text)
        found = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        return found[-1].strip() if found else None

    def correct(self, answer: str, truth: Any) -> bool:
        return exact_match(answer, truth)


@functools.lru_cache(maxsize=8)
def _shuffled(dataset_name: str, split: str, seed: int) -> tuple[dict[str, Any], ...]:
    """The rows in the order `datasets.Dataset.shuffle(seed=seed)` gives them (a permutation drawn by
    numpy's default generator seeded with `seed`)."""
    rows = dataset_rows(dataset_name, split)
    return tuple(rows[i] for i in np.random.default_rng(seed).permutation(len(rows)))
