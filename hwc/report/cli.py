"""`hwc report OUT`: the build report as text tables, wired into hwc/cli.py by

    from hwc.report import cli as report_cli
    report_cli.add_parser(sub)
"""

from __future__ import annotations

import json
from pathlib import Path


def add_parser(subparsers) -> None:
    r = subparsers.add_parser(
        "report", help="print a build's report as text tables (OUT/report.html has the plots)",
        description="Print the report of a build folder (OUT/report.json) as text tables: per-layer figures, "
                    "the tile timeline, the memory plan, quantization ranges and the energy estimate. The same "
                    "data, with plots, is in OUT/report.html.")
    r.add_argument("artifact", help="a folder written by `hwc build`")
    r.add_argument("--width", type=int, default=None, help="terminal width to lay the tables out for")
    r.set_defaults(fn=cmd_report)


def read_report(folder) -> dict:
    from hwc.errors import UserError

    path = Path(folder) / "report.json"
    if not path.is_file():
        raise UserError(f"{str(folder)!r} has no report.json: give a folder written by `hwc build ... -o "
                        f"{folder}`.")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise UserError(f"{str(path)!r} is damaged ({e}); rebuild the folder with `hwc build`.") from None


def cmd_report(args) -> int:
    from rich.console import Console

    from hwc.report.text import print_report

    rep = read_report(args.artifact)
    print_report(rep, Console(highlight=False, width=args.width or None))
    html = Path(args.artifact) / "report.html"
    if html.is_file():
        Console(highlight=False, width=args.width or None).print(f"plots: {html}")
    return 0
