"""Errors caused by the user's input, as opposed to bugs in posttrain.

The CLI prints a `UserError` as one clear message and exits with status 2; any other exception is a
bug and keeps its traceback. Every message names the file, key or row at fault and what would fix it.
"""


class UserError(Exception):
    """Bad input from the user: config, data, model directory or user code."""


class ConfigError(UserError):
    """The configuration is invalid. Holds every problem found, one per line."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        head = "invalid configuration" if len(self.problems) > 1 else "invalid configuration:"
        if len(self.problems) == 1:
            super().__init__(f"{head} {self.problems[0]}")
        else:
            super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class DataError(UserError):
    """A data file is missing, unreadable or has a bad row/column."""


class ModelError(UserError):
    """A model or tokenizer directory is missing or unusable."""


class RewardFunctionError(UserError):
    """A user reward function raised, hung or returned a non-finite value."""
