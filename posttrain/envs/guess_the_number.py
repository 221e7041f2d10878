"""`game:GuessTheNumber-v0`: GEM's Guess The Number game (gem-llm 0.0.4, the version ROLL pins).

The seed draws a secret whole number between ``min_number`` and ``max_number`` (both included); the
player has ``max_turns`` guesses. A guess is the number in the reply's last ``\\boxed{N}`` (digits
only), and each one is answered with a hint. Rewards and termination are GEM's, step by step:

- no ``\\boxed{N}`` in the reply (or ``\\boxed{0}``: GEM tests the parsed number for truth):
  reward -0.1, the episode ends at once; ``action_is_valid`` False (so the entry's format_penalty
  is added on top, 0 unless set);
- the secret number: reward 1.0, the episode ends, ``success`` True;
- any other guess: reward 0.0, a hint (higher / lower), or a notice for a number outside the range
  or one guessed before (still reward 0.0, still a valid action);
- a guess that uses the last turn without winning ends the episode with reward
  ``1 - |guess - secret| / (max_number - min_number)``, or 0.0 when the guess is outside the range.

The constructor's defaults are GEM's registration of ``game:GuessTheNumber-v0`` (1, 20, 10 turns);
the ``-easy``, ``-hard``, ``-hard-no-max-turn`` and ``-random`` names carry GEM's other defaults. With
``min_number`` or ``max_number`` None (``-random``) each reset draws the range 1..M, M in 2..100,
and ``max_turns`` ceil(sqrt(M - 1)) + 1, as GEM does. The draws are GEM's: Python's generator seeded
with the reset seed gives M (random variant) and then the secret, so a seed gives GEM's game.

The first observation explains the game; the others are the hint of the last guess. GEM also hands
ROLL a suffix asking for the next guess with every observation, which ROLL's StepConcatEnvManager
writes after it: `suffix()` gives it (the agent loop writes it where ROLL does).

>>> game = GuessTheNumber()
>>> game.reset(seed=1).splitlines()[0]
'Guess the secret whole number between 1 and 20 (both included) in at most 10 guesses.'
>>> game.step("I start in the middle: \\\\boxed{10}")
('Guess 1: 10 is too high; the secret number is lower than 10.', 0.0, False, {'action_is_valid': True, 'success': False})
>>> game.step("\\\\boxed{5}")[1:]
(1.0, True, {'action_is_valid': True, 'success': True})
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from posttrain.envs.registry import register_env

# GEM's reward constants (gem.utils.constants.LanguageGameReward in 0.0.4)
SUCCESS_REWARD = 1.0
STEP_REWARD = 0.0  # a hint, and also a guess outside the range or a repeated one (GEM's invalid_action_reward)
FORMAT_ERROR_REWARD = -0.1  # no guess could be read
SUFFIX = "Give your next guess."  # GEM hands ROLL its task suffix with every observation
_GUESS = re.compile(r"\\boxed\{(\d+)\}")  # GEM reads digits only: a sign or a decimal point is no guess


def parse_guess(text: str) -> int | None:
    """The number in the last ``\\boxed{N}`` of `text`, or None (no such box, or 0 as GEM reads it).

    >>> parse_guess("\\\\boxed{3} no, \\\\boxed{07}"), parse_guess("\\\\boxed{-3}"), parse_guess("\\\\boxed{0}")
    (7, None, None)
    """
    found = _GUESS.findall(text)
    return int(found[-1]) or None if found else None


@register_env("game:GuessTheNumber-v0")
class GuessTheNumber:
    """One secret number per seed, guessed with hints (see the module docstring)."""

    instruction = ""  # the rules are the first observation, as in GEM

    def __init__(self, min_number: int | None = 1, max_number: int | None = 20, max_turns: int | None = 10):
        self.random_range = min_number is None or max_number is None
        if not self.random_range:
            for name, value in (("min_number", min_number), ("max_number", max_number)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{name} must be an integer >= 0 (or None for a range drawn each episode), got {value!r}")
            if max_number <= min_number:
                raise ValueError(f"max_number ({max_number}) must be above min_number ({min_number})")
            if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
                raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        self.min_number, self.max_number, self.max_turns = min_number, max_number, max_turns
        self.secret = 0
        self.turns = 0
        self.guessed: set[int] = set()

    def suffix(self) -> str:
        """GEM's task suffix, which ROLL's step managers write after each observation (in posttrain's words)."""
        return SUFFIX

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)  # the draws of GEM's seeded global generator, in its order
        if self.random_range:
            self.min_number, self.max_number = 1, rng.randint(2, 100)
            self.max_turns = math.ceil(math.sqrt(self.max_number - self.min_number)) + 1
        self.secret = rng.randint(self.min_number, self.max_number)
        self.turns = 0
        self.guessed = set()
        return (f"Guess the secret whole number between {self.min_number} and {self.max_number} (both included) "
                f"in at most {self.max_turns} guesses.\n"
                "After each guess you learn whether the secret number is higher or lower than your guess.\n"
                "Write whatever you like, but your guess is the number inside the last \\boxed{} of your reply, "
                f"for example \\boxed{{{(self.min_number + self.max_number) // 2}}}.\n"
                "Make your first guess.")

    def step(self, action_text: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.turns += 1
        guess = parse_guess(action_text)
        if guess is None:  # GEM ends the game on a reply it cannot read, whatever turn it is
            return (f"Guess {self.turns}: no number in \\boxed{{}} was found, so the game is over.",
                    FORMAT_ERROR_REWARD, True, {"action_is_valid": False, "success": False})
        if guess == self.secret:
            return (f"Guess {self.turns}: {guess} is the secret number. You won in {self.turns} guesses.",
                    SUCCESS_REWARD, True, {"action_is_valid": True, "success": True})
        outside = not self.min_number <= guess <= self.max_number
        if outside:
            text = f"Guess {self.turns}: {guess} is outside the range {self.min_number} to {self.max_number}."
        elif guess in self.guessed:
            text = f"Guess {self.turns}: {guess} was guessed before."
        else:
            self.guessed.add(guess)
            high = guess > self.secret
            text = (f"Guess {self.turns}: {guess} is too {'high' if high else 'low'}; "
                    f"the secret number is {'lower' if high else 'higher'} than {guess}.")
        if self.turns >= self.max_turns:  # GEM scores the last guess by its distance from the secret
            reward = 0.0 if outside else 1.0 - abs(guess - self.secret) / (self.max_number - self.min_number)
            return f"{text} That was the last guess: the secret number was {self.secret}.", reward, True, {
                "action_is_valid": True, "success": False}
        return text, STEP_REWARD, False, {"action_is_valid": True, "success": False}


# GEM 0.0.4's other registrations of the same game: only the defaults differ.
@register_env("game:GuessTheNumber-v0-easy")
class GuessTheNumberEasy(GuessTheNumber):
    def __init__(self, min_number: int | None = 1, max_number: int | None = 10, max_turns: int | None = 4):
        super().__init__(min_number, max_number, max_turns)


@register_env("game:GuessTheNumber-v0-hard")
class GuessTheNumberHard(GuessTheNumber):
    def __init__(self, min_number: int | None = 1, max_number: int | None = 50, max_turns: int | None = 7):
        super().__init__(min_number, max_number, max_turns)


@register_env("game:GuessTheNumber-v0-hard-no-max-turn")
class GuessTheNumberHardManyTurns(GuessTheNumber):
    def __init__(self, min_number: int | None = 1, max_number: int | None = 50, max_turns: int | None = 50):
        super().__init__(min_number, max_number, max_turns)


@register_env("game:GuessTheNumber-v0-random")
class GuessTheNumberRandom(GuessTheNumber):
    def __init__(self, min_number: int | None = None, max_number: int | None = None, max_turns: int | None = None):
        super().__init__(min_number, max_number, max_turns)
