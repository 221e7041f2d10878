"""The run report: one self-contained HTML page (inline SVG, no scripts, no network).

Sections: the summary lines (posttrain.report.summary), one chart per metric that any stage logged
(reward, validation accuracy, KL, entropy, response length, grad norm, tokens/s, MFU, peak memory,
SFT/DPO losses, in that order), per RL stage the time of each step split by phase (stacked bars of
`timing/<phase>_s`), and per stage a table of validation generations at its first and its last
validation (`trainer.log_val_generations` of them are kept in val_generations.jsonl).
"""

from __future__ import annotations

import fnmatch
from html import escape
from pathlib import Path

from posttrain.files import atomic_write_text
from posttrain.report.rundir import StageRun, load_run
from posttrain.report.summary import summary_lines
from posttrain.report.svg import Series, line_chart, stacked_bars

# (title, metric key or fnmatch pattern), in display order; a pattern gives one chart per key.
CURVES = (
    ("training reward (mean score)", "critic/score/mean"),
    ("validation accuracy", "val/*/acc/mean@*"),
    ("validation score", "val/score/mean"),
    ("validation score by data source", "val/*/score/mean@*"),
    ("KL, current vs rollout policy", "actor/ppo_kl"),
    ("KL loss to the reference", "actor/kl_loss"),
    ("KL, rollout vs reference", "actor/ref_kl"),
    ("entropy", "actor/entropy"),
    ("response length (mean tokens)", "response_length/mean"),
    ("grad norm", "actor/grad_norm"),
    ("tokens per second", "perf/tokens_per_s"),
    ("model FLOPs utilisation (MFU)", "perf/mfu"),
    ("peak memory of a worker process (GB)", "perf/peak_memory_gb"),
    ("critic value loss", "critic/vf_loss"),
    ("SFT loss", "sft/loss"),
    ("SFT validation loss", "val/sft/loss"),
    ("DPO preference accuracy", "dpo/accuracy"),
    ("DPO held-out preference accuracy", "val/dpo/accuracy"),
    ("DPO reward margin", "dpo/margin"),
    ("DPO held-out reward margin", "val/dpo/margin"),
    ("DPO loss", "dpo/loss"),
    ("DPO held-out loss", "val/dpo/loss"),
)

# The RL step's phases in the order they run (posttrain.trainer.rl), bottom of each stacked bar first.
PHASE_ORDER = tuple(f"timing/{p}_s" for p in ("gen", "gen_baseline", "reward", "old_log_prob", "ref", "values", "adv",
                                               "update_critic", "update_actor", "sync"))

STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1250px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}.charts{display:flex;flex-wrap:wrap;gap:8px}
.summary{font-family:monospace;background:#f6f6f6;padding:10px;white-space:pre}
table{border-collapse:collapse;font-family:monospace;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
.good{background:#e6f4e6}.bad{background:#fbeaea}"""


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of `run_dir` (default `<run_dir>/report.html`) atomically; return its path."""
    stages = load_run(run_dir)
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    text = render(Path(run_dir), stages)
    return atomic_write_text(target, text)


def render(run_dir: Path, stages: list[StageRun]) -> str:
    """The whole page as a string."""
    names = ", ".join(f"{s.name} ({s.kind}{', evaluation only' if s.evaluation_only else ''})" for s in stages)
    body = [f"<h1>posttrain run report</h1><p>run directory: <code>{escape(str(run_dir))}</code><br>stages: {escape(names)}</p>"]
    lines = summary_lines(stages)
    if lines:
        body.append(f'<div class="summary">{escape(chr(10).join(lines))}</div>')
    charts = [c for c in (line_chart(title, series) for title, series in curves(stages)) if c]
    body.append("<h2>Curves</h2>" + (f'<div class="charts">{"".join(charts)}</div>' if charts else "<p>no metrics logged yet</p>"))
    breakdowns = [c for c in (time_breakdown(stage) for stage in stages) if c]
    if breakdowns:
        body.append('<h2 id="time-breakdown">Time per step by phase</h2><div class="charts">' + "".join(breakdowns) + "</div>")
    for stage in stages:
        body.append(generations_table(stage))
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>posttrain report: {escape(run_dir.name)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def curves(stages: list[StageRun]) -> list[tuple[str, list[Series]]]:
    """(chart title, one series per stage) for every metric of CURVES that some stage logged."""
    keys = sorted({k for s in stages for row in s.metrics for k in row if k != "step"})
    out, seen = [], set()
    for title, pattern in CURVES:
        matched = [k for k in keys if fnmatch.fnmatchcase(k, pattern) and k not in seen]
        for key in matched:
            seen.add(key)
            series = [(s.name, [(float(r["step"]), float(r[key])) for r in s.metrics if _is_number(r.get(key))])
                      for s in stages]
            series = [(name, pts) for name, pts in series if pts]
            if series:
                out.append((title if "*" not in pattern else f"{title}: {key}", series))
    return out


def time_breakdown(stage: StageRun) -> str:
    """A stacked bar per logged step of the stage: the seconds of each phase (`timing/<phase>_s`)
    and `other` (the rest of `timing/step_s`: metrics, bookkeeping); empty for a stage without them."""
    rows = [r for r in stage.metrics if _is_number(r.get("timing/step_s"))]
    # idle times (a decoupled run's waits) overlap the other side's phases: not a slice of the step
    logged = {k for r in rows for k in r if k.startswith("timing/") and k.endswith("_s") and not k.startswith("timing/idle_")}
    logged -= {"timing/step_s", "timing/stage_s"}
    phases = sorted(logged, key=lambda k: (PHASE_ORDER.index(k) if k in PHASE_ORDER else len(PHASE_ORDER), k))
    if not rows or not phases:
        return ""
    layers = [(k[len("timing/"):-2], [float(r[k]) if _is_number(r.get(k)) else 0.0 for r in rows]) for k in phases]
    other = [max(float(r["timing/step_s"]) - sum(values[i] for _, values in layers), 0.0) for i, r in enumerate(rows)]
    return stacked_bars(f"time per step by phase: {stage.name}", [float(r["step"]) for r in rows], layers + [("other", other)])


def generations_table(stage: StageRun) -> str:
    """Validation samples at the stage's first and last validation, side by side by prompt."""
    if not stage.generations:
        return ""
    steps = sorted({int(g["step"]) for g in stage.generations})
    first = [g for g in stage.generations if int(g["step"]) == steps[0]]
    last = [g for g in stage.generations if int(g["step"]) == steps[-1]]
    at = f"step {steps[0]} and step {steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
    head = f"<h2>Validation samples of stage {escape(stage.name)} (its own step count): {at}</h2>"
    rows = ["<tr><th>prompt</th>" + f"<th>response at step {steps[0]}</th><th>score</th>"
            + (f"<th>response at step {steps[-1]}</th><th>score</th>" if len(steps) > 1 else "") + "</tr>"]
    for i, a in enumerate(first):
        b = last[i] if i < len(last) and len(steps) > 1 else None
        cells = [_prompt_text(str(a.get("prompt", ""))), *_response_cells(a)]
        if b is not None:
            cells += _response_cells(b)
        rows.append("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in cells) + "</tr>")
    return head + "<table>" + "".join(rows) + "</table>"


def _response_cells(g: dict) -> list[str]:
    score = g.get("score")
    cls = "good" if _is_number(score) and score >= 1.0 else "bad" if _is_number(score) and score <= 0 else ""
    shown = f"{score:.3g}" if _is_number(score) else "-"
    return [f"<td class=\"{cls}\">{escape(_strip_end(str(g.get('response', ''))))}</td>", f"<td class=\"{cls}\">{shown}</td>"]


def _prompt_text(prompt: str) -> str:
    """The last user turn of a ChatML prompt, else the prompt as logged (escaped).

    >>> _prompt_text("<|im_start|>user\\n12+7=<|im_end|>\\n<|im_start|>assistant\\n")
    '12+7='
    """
    marker = "<|im_start|>user\n"
    if marker in prompt:
        prompt = prompt.rsplit(marker, 1)[1].split("<|im_end|>", 1)[0]
    return escape(prompt)


def _strip_end(response: str) -> str:
    for end in ("<|im_end|>", "<|endoftext|>"):
        response = response.replace(end, "")
    return response.rstrip("\n") or "(empty)"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
