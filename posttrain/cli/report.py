"""`posttrain report RUN_DIR`: write an HTML page with the run's curves and validation samples."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="write an HTML report (curves, before/after-RL accuracy, sample generations) of a run directory",
        description="Write RUN_DIR/report.html: the summary, one chart per logged metric (reward, accuracy, KL, "
        "entropy, response length, grad norm, tokens/s, ...) per stage, and validation samples at the first and "
        "last validation. Self-contained: open it in any browser.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory (printed as 'run directory:' by posttrain train)")
    p.add_argument("-o", "--output", default=None, help="where to write the page (default: RUN_DIR/report.html)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from posttrain.report import load_run, summary_lines, write_report

    path = write_report(args.run_dir, args.output)
    for line in summary_lines(load_run(args.run_dir)):
        print(line)
    print(f"report: {path}")
    return 0
