"""An agent function trained with GRPO raises the reward of the task the single-turn path learns in
tests/e2e/test_grpo_learns.py: the sort task, the same SFT warm-up, data, model and GRPO settings;
only the rollout differs. The agent makes one call per episode with the row's prompt over the
loopback endpoint (its calls batched, posttrain.rollout.agent_endpoint) and returns the task's own
partial-credit score, so its rewards and the single-turn run's are the same numbers of the same kind
of sample, and the two tests can be compared.

Measured (mean training reward, first 10 -> last 10 of 40 GRPO steps, trainer.seed 1, 2, 3):
0.150 -> 0.229 (+0.079), 0.117 -> 0.241 (+0.124), 0.134 -> 0.257 (+0.123); the single-turn test's
measured rises are 0.08-0.11, and this test asks the same +0.05. Budget: 105 s under pytest (2 minutes
of CPU: 1m52s user + 17 s system) on the shared 2-core development machine,
SFT warm-up included: the 128 episodes of a step go through HTTP and threads, more than the
single-turn test's minute, so it is marked `long` (left out of CI; `python -m pytest -m long`).
Measure again with ``PYTHONPATH=.:tests python tests/e2e/test_agent_fn_learns.py 1 2 3``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_run_helpers import posttrain
from test_grpo_learns import CONFIG as SINGLE_TURN

AGENT = '''
import json, urllib.request
from posttrain.tasks.sort import score

def run(base_url, row):
    body = json.dumps({"model": "policy", "messages": list(row["prompt"]), "max_tokens": 8}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())["choices"][0]["message"]["content"] or ""
    return score(answer, row["reward_model"]["ground_truth"])["score"]
'''

def config(data: Path, model: Path, agent: Path, run: str, steps: int, seed: int) -> str:
    """tests/e2e/test_grpo_learns.py's run with GRPO's rollout through the agent function (the SFT
    warm-up samples nothing, so it runs without it)."""
    cfg = yaml.safe_load(SINGLE_TURN.format(d=data, m=model, r=run))
    cfg["rollout"]["agent"] = {"function": f"{agent}:run", "max_concurrency": 128, "timeout": 120}
    cfg["trainer"].update(total_training_steps=steps, seed=seed, logger=["console", "jsonl"])
    cfg["stages"][0]["rollout"] = {"agent": {"function": None}}
    return yaml.safe_dump(cfg, sort_keys=False)


def run_once(root: Path, steps: int = 40, seed: int = 1) -> list[float]:
    """SFT warm-up then GRPO through the agent function; the per-step mean training reward."""
    for args in (("make-model", "tiny", "model"), ("make-data", "sort", "data", "--train", "2000", "--test", "50", "--seed", "1")):
        out = posttrain(*args, cwd=root)
        assert out.returncode == 0, out.stderr[-3000:]
    (root / "agent.py").write_text(AGENT)
    (root / "run.yaml").write_text(config(root / "data", root / "model", root / "agent.py", "run", steps, seed))
    out = subprocess.run([sys.executable, "-m", "posttrain", "train", "run.yaml"], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (root / "run" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    failed = [r["agent/failed"] for r in rows if r.get("agent/failed")]
    assert not failed, f"{len(failed)} steps had failed episodes: {(out.stdout + out.stderr)[-2000:]}"
    return [r["agent/reward"] for r in rows if "agent/reward" in r]


@pytest.mark.long  # 105 s: past the 10-minute suite's budget; `python -m pytest -m long` runs it
def test_an_agent_function_with_grpo_raises_the_reward(tmp_path):
    scores = run_once(tmp_path)
    assert len(scores) == 40
    first, last = sum(scores[:10]) / 10, sum(scores[-10:]) / 10
    assert last > first + 0.05, f"agent reward did not rise: first 10 steps {first:.3f}, last 10 {last:.3f}"


if __name__ == "__main__":  # measuring: python tests/e2e/test_agent_fn_learns.py SEED...
    import tempfile
    for seed in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            s = run_once(Path(tmp), seed=int(seed))
            print(f"seed {seed}: first 10 {sum(s[:10]) / 10:.3f} last 10 {sum(s[-10:]) / 10:.3f}", flush=True)
