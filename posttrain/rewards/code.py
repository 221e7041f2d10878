"""The ``code`` scorer: run the response's Python against the row's tests in the local sandbox.

The program is the last fenced code block of the response (```` ```python ... ``` ```` or a bare
fence), else the whole response, read after the last ``</think>`` with end-of-turn markers removed.
The ground truth holds the tests, as a mapping or its JSON text, in ROLL's layout:

- ``{"case_type": "input", "test_cases": [{"stdin": "...", "expected_stdout": "..."}, ...]}``: the
  program reads stdin; its stdout must equal the expected one (trailing spaces on each line and
  trailing blank lines ignored);
- ``{"case_type": "assert", "test_cases": [{"assert_code": "assert f(2) == 4"}, ...]}``: each case
  runs after the program, which passes when it exits with status 0.

verl's layout, ``{"inputs": [...], "outputs": [...]}`` (stdin cases) or ``{"assert_case": [...]}``, is
read too (its call-based ``fn_name`` cases are not).

The score is 1.0 when every case passes, else 0.0 (with ``continuous``: the share of the first 10
cases passed, verl's sandbox score); ``pass_rate`` is the fraction passed and
``timeouts`` whether a case hit a time limit. A program that hangs, floods its output or forks
without end only fails its case (it is the response's fault); a ground truth in another layout is a
reward failure (``reward.on_error``). Sandbox limits come from the worker's reward_kwargs:
``cpu_s``, ``wall_s``, ``memory_mb``, ``output_bytes``, ``processes`` (`posttrain.sandbox`).
With ``reward.sandbox_fusion.url`` set the cases run on that remote sandbox instead
(`posttrain.rewards.sandbox_remote`), ``wall_s`` as its time limit and the section's
``memory_limit_mb`` as its memory limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

from posttrain.sandbox import Limits, run_python
from posttrain.rewards.sandbox_remote import RemoteSandbox
from posttrain.tasks.answers import END_MARKERS

CONTINUOUS_CASES = 10  # verl's continuous code score counts the first 10 test cases
_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(response: str) -> str:
    """The program of a response: its last fenced block, else all of it.

    >>> extract_code("Here:\\n```python\\nprint(1)\\n```\\nand\\n```\\nprint(2)\\n```<|im_end|>")
    'print(2)\\n'
    >>> extract_code("print(3)<|im_end|>")
    'print(3)'
    """
    text = response.rpartition("</think>")[2] if "</think>" in response else response
    for marker in END_MARKERS:
        text = text.replace(marker, "")
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text.strip()


def read_tests(ground_truth: Any) -> tuple[str, list[dict[str, str]]]:
    """(case_type, cases) of a ground truth; a ValueError names what is wrong with it.

    >>> read_tests({"inputs": ["1 2"], "outputs": ["3"]})  # verl's layout
    ('input', [{'stdin': '1 2', 'expected_stdout': '3'}])
    """
    tests = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if isinstance(tests, dict) and "case_type" not in tests and ("inputs" in tests or "assert_case" in tests):
        return _verl_tests(tests)
    if not isinstance(tests, dict) or tests.get("case_type") not in ("input", "assert") or not isinstance(tests.get("test_cases"), list):
        raise ValueError(
            "a code row's ground truth must be {case_type: input | assert, test_cases: [...]} "
            f"(or its JSON text), got {str(ground_truth)[:120]!r}"
        )
    key = "stdin" if tests["case_type"] == "input" else "assert_code"
    for case in tests["test_cases"]:
        if not isinstance(case, dict) or key not in case or (key == "stdin" and "expected_stdout" not in case):
            raise ValueError(f"a {tests['case_type']} test case needs {key!r}{' and expected_stdout' if key == 'stdin' else ''}, got {case!r}")
    return tests["case_type"], tests["test_cases"]


def _verl_tests(tests: dict[str, Any]) -> tuple[str, list[dict[str, str]]]:
    """verl's layout (its sandbox_fusion and prime_code scorers): ``{inputs: [...], outputs: [...]}``
    stdin cases, or ``assert_case: [...]`` code run after the program."""
    if isinstance(tests.get("assert_case"), list):
        return "assert", [{"assert_code": str(code)} for code in tests["assert_case"]]
    if tests.get("fn_name"):
        raise ValueError(f"call-based test cases (fn_name {tests['fn_name']!r}): posttrain's code scorer runs stdin/stdout and assert cases")
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError(f"verl's code test cases need lists inputs and outputs of one length, got {str(tests)[:120]!r}")
    return "input", [{"stdin": str(i), "expected_stdout": str(o)} for i, o in zip(inputs, outputs)]


def _same_output(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.rstrip().splitlines()]

    return lines(actual) == lines(expected)


def code_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, *,
    cpu_s: float = 5.0, wall_s: float = 10.0, memory_mb: int = 512, output_bytes: int = 65_536, processes: int = 32,
    sandbox_fusion: dict[str, Any] | None = None, continuous: bool = False,
) -> dict[str, float]:
    """1.0 when the response's program passes every test case (module docstring), else 0.0.
    ``sandbox_fusion`` ({url, max_concurrent, memory_limit_mb}, from reward.sandbox_fusion) runs the
    cases on that remote sandbox instead of the local one. ``continuous`` scores the share passed of
    the first 10 cases instead (verl's sandbox-fusion score for code data sources)."""
    case_type, cases = read_tests(ground_truth)
    box = Limits(cpu_s=cpu_s, wall_s=wall_s, memory_mb=memory_mb, output_bytes=output_bytes, processes=processes)
    program = extract_code(solution_str)
    if case_type == "input":
        jobs = [(program, str(case["stdin"])) for case in cases]
    else:
        jobs = [(f"{program}\n\n{case['assert_code']}\n", "") for case in cases]
    if sandbox_fusion is not None:
        results = RemoteSandbox(**sandbox_fusion).run_all(jobs, box)  # SandboxUnavailable: a reward failure
    else:
        results = [run_python(code, stdin, box) for code, stdin in jobs]
    oks, timeouts = [], 0
    for case, result in zip(cases, results):
        oks.append(result.ok and (case_type != "input" or _same_output(result.stdout, str(case["expected_stdout"]))))
        timeouts += result.limit == "wall" or result.returncode in (152, -24)  # wall clock or SIGXCPU
    rate = sum(oks) / len(cases) if cases else 0.0
    score = float(bool(cases) and all(oks))
    if continuous:  # verl: the pass rate of the first min(10, n) cases (all of them still run)
        first = oks[:CONTINUOUS_CASES]
        score = sum(first) / len(first) if first else 0.0
    return {"score": score, "pass_rate": rate, "timeouts": float(timeouts > 0)}
