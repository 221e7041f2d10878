"""Charts as inline SVG: a self-contained report page needs no plotting library.

A line chart is one metric against the global step, one polyline per stage (stages follow each
other on the step axis); non-finite values break the line rather than bending the axis. A stacked
bar chart shows how each step's total splits into parts (the time of each phase of an RL step).
"""

from __future__ import annotations

import math
from html import escape

WIDTH, HEIGHT = 380, 210
LEFT, RIGHT, TOP, BOTTOM = 56, 10, 24, 30
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22",
           "#e377c2", "#aec7e8", "#ffbb78")

Series = tuple[str, list[tuple[float, float]]]  # (stage name, [(step, value), ...])


def nice_number(value: float) -> str:
    """Short axis label.

    >>> [nice_number(v) for v in (0.0, 0.12345, 12.5, 15234.0, 1e-5)]
    ['0', '0.123', '12.5', '1.52e+04', '1e-05']
    """
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.4g}"


def line_chart(title: str, series: list[Series]) -> str:
    """An SVG chart of `series`; an empty string when no series holds a finite point."""
    points = [(x, y) for _, pts in series for x, y in pts if math.isfinite(y)]
    if not points:
        return ""
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.1 or 1.0
        y0, y1 = y0 - pad, y1 + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y0) / (y1 - y0)) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{LEFT}" y="15" font-size="13" font-weight="bold">{escape(title)}</text>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>']
    for k in range(5):  # horizontal grid lines with their values
        y = y0 + (y1 - y0) * k / 4
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{sy(y) + 4:.1f}" font-size="10" text-anchor="end">{nice_number(y)}</text>')
    for x in (x0, (x0 + x1) / 2, x1):
        parts.append(f'<text x="{sx(x):.1f}" y="{HEIGHT - 14}" font-size="10" text-anchor="middle">{round(x)}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 2}" font-size="10" text-anchor="middle">step</text>')
    for i, (name, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        for run in _finite_runs(pts):
            if len(run) == 1:
                x, y = run[0]
                parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>')
            else:
                coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in run)
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        if len(series) > 1 or name != "main":
            parts.append(f'<text x="{LEFT + plot_w - 4}" y="{TOP + 12 + 12 * i}" font-size="10" '
                         f'text-anchor="end" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _finite_runs(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Consecutive stretches of finite points (a NaN ends a stretch).

    >>> _finite_runs([(1, 1.0), (2, float("nan")), (3, 2.0), (4, 3.0)])
    [[(1, 1.0)], [(3, 2.0), (4, 3.0)]]
    """
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if math.isfinite(y):
            runs[-1].append((x, y))
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def stacked_bars(title: str, steps: list[float], layers: list[tuple[str, list[float]]], unit: str = "s") -> str:
    """An SVG chart of one bar per step, each the stack of `layers` (name, one value per step; 0
    where a layer did not run), with a legend; an empty string when there is nothing to draw."""
    totals = [sum(values[i] for _, values in layers) for i in range(len(steps))]
    if not steps or not layers or max(totals, default=0.0) <= 0:
        return ""
    legend_w = 110
    plot_w, plot_h = WIDTH + 120 - LEFT - RIGHT - legend_w, HEIGHT - TOP - BOTTOM
    top = max(totals)
    slot = plot_w / len(steps)
    bar = max(slot * 0.8, 1.0)

    def sy(y: float) -> float:
        return TOP + (1 - y / top) * plot_h

    width = WIDTH + 120
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
             f'viewBox="0 0 {width} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{LEFT}" y="15" font-size="13" font-weight="bold">{escape(title)}</text>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#bbb"/>']
    for k in range(5):
        y = top * k / 4
        parts.append(f'<text x="{LEFT - 4}" y="{sy(y) + 4:.1f}" font-size="10" text-anchor="end">{nice_number(y)} {unit}</text>')
    for i, step in enumerate(steps):
        x, base = LEFT + i * slot + (slot - bar) / 2, 0.0
        for j, (name, values) in enumerate(layers):
            if values[i] > 0:
                parts.append(f'<rect x="{x:.1f}" y="{sy(base + values[i]):.1f}" width="{bar:.1f}" '
                             f'height="{sy(base) - sy(base + values[i]):.1f}" fill="{COLOURS[j % len(COLOURS)]}">'
                             f'<title>step {round(step)} {escape(name)}: {nice_number(values[i])} {unit}</title></rect>')
                base += values[i]
    shown = range(len(steps)) if len(steps) <= 12 else sorted({0, len(steps) // 2, len(steps) - 1})
    for x_i in shown:
        x = LEFT + (x_i + 0.5) * slot
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - 14}" font-size="10" text-anchor="middle">{round(steps[x_i])}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 2}" font-size="10" text-anchor="middle">step</text>')
    for j, (name, _) in enumerate(layers):  # legend, top layer last as in the stack
        y = TOP + 10 + 13 * j
        parts.append(f'<rect x="{LEFT + plot_w + 8}" y="{y - 8}" width="9" height="9" fill="{COLOURS[j % len(COLOURS)]}"/>'
                     f'<text x="{LEFT + plot_w + 21}" y="{y}" font-size="10">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)
