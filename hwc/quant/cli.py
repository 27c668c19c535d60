"""Command-line pieces of quantization, wired into `hwc` by hwc/cli.py:

    from hwc.quant import cli as qcli
    qcli.add_parser(sub)            # `hwc quant-search MODEL --calib C.npz --eval E.npz ...`
    qcli.add_build_options(b)       # `hwc build ... --quant-config Q.json`
    # and in cmd_build: hwc.build(..., quant_config=args.quant_config)
"""

from __future__ import annotations

import math
import time


def add_build_options(parser) -> None:
    """`--quant-config` for `hwc build` (implies an int8 build; still needs --calib)."""
    parser.add_argument("--quant-config", metavar="CONFIG.json",
                        help="quantization knobs (written by `hwc quant-search`); implies --int8")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "quant-search", help="measure int8 quantization configurations and pick one within a loss budget",
        description="Quantize MODEL with every configuration of a staged search (range method, per-channel "
                    "or per-tensor weights, bias correction, pruning, and for --target cpu which layers stay "
                    "float), measure each on the evaluation data (top-1 accuracy with a 'labels' array, "
                    "otherwise SQNR and top-1 agreement with the float model), print the table and write the "
                    "cheapest configuration within the loss budget to a quant-config for `hwc build "
                    "--quant-config`.")
    p.add_argument("model")
    p.add_argument("--calib", required=True, help="calibration inputs (.npz keyed by input names, N samples)")
    p.add_argument("--eval", required=True, dest="eval_data",
                   help="evaluation inputs (.npz), optionally with 'labels' [N] (int class ids)")
    p.add_argument("--target", default="ref", help="ref, cpu, tile8x8, tile32x32 or a target .yaml")
    p.add_argument("--max-loss", type=float, default=0.01,
                   help="largest accepted accuracy (or agreement) loss, a fraction (default 0.01)")
    p.add_argument("-o", "--output", default="quant_config.json", help="where to write the pick")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: CPU count, at most 8)")
    p.add_argument("--input-shape", action="append", metavar="NAME=1x3x32x32",
                   help="bind the shape of an input with symbolic dims (repeatable)")
    p.set_defaults(fn=cmd_quant_search)


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def results_table(results, picked, labels: bool, float_metric: float, title: str):
    from rich.table import Table

    name = "accuracy" if labels else "agreement"
    t = Table(title=title)
    for col, just in (("#", "right"), ("stage", "right"), ("configuration", "left"), (name, "right"),
                      ("loss", "right"), ("SQNR dB", "right"), ("model bytes", "right"), ("MACs", "right"),
                      ("cost", "right"), ("float nodes", "right"), ("s", "right")):
        t.add_column(col, justify=just)
    if labels:
        t.add_row("", "", "float32 (reference)", f"{100 * float_metric:.2f}%", "", "", "", "", "", "", "")
    for i, r in enumerate(results, 1):
        mark = "[bold green]*[/bold green] " if r is picked else ""
        if r.error:
            t.add_row(str(i), str(r.stage), mark + r.cfg.label(), f"[red]{r.error[:60]}[/red]", *[""] * 7)
            continue
        t.add_row(str(i), str(r.stage), mark + r.cfg.label(), f"{100 * r.metric:.2f}%", f"{100 * r.loss:+.2f}%",
                  _fmt(r.sqnr_db, ".2f"), f"{r.bytes:,}", f"{r.macs:,}", f"{r.cost:,}", str(r.float_nodes),
                  f"{r.seconds:.1f}")
    return t


def write_search_html(args, tgt, results, picked, labels: bool, float_metric: float):
    """The accuracy (SQNR without labels) against cost page, next to the quant-config (hwc/report/html.py)."""
    from pathlib import Path

    from hwc.report.html import render_search

    metric = "accuracy" if labels else "agreement"
    doc = {"model": str(args.model), "target": tgt["name"], "metric": metric, "max_loss": args.max_loss,
           "float_metric": float_metric, "results": [r.to_json() for r in results],
           "picked": next((i for i, r in enumerate(results) if r is picked), None),
           "y": "metric" if labels else "sqnr_db",
           "y_label": "top-1 accuracy (%)" if labels else "output SQNR (dB) against the float model",
           "budget": float_metric - args.max_loss if labels else None,
           "summary": f"{len(results)} configurations measured; the pick is the cheapest whose {metric} loss is "
                      f"within {100 * args.max_loss:.2f}%" + ("" if labels else " (filled markers: within the "
                                                                                 "budget)") + "."}
    from hwc.artifact import write_output

    path = Path(args.output).with_suffix(".html")
    html = render_search(doc).encode("utf-8")
    write_output(path, lambda f: f.write(html))
    return path


def cmd_quant_search(args) -> int:
    from hwc.cli import err, input_shapes, out
    from hwc.errors import UserError
    from hwc.frontend.onnx_import import import_onnx
    from hwc.quant.build import load_data, optimize_for_quant
    from hwc.quant.qdq import is_qdq
    from hwc.quant.search import make_problem, search
    from hwc.targets import load_target

    if not 0.0 <= args.max_loss < 1.0:
        raise UserError(f"--max-loss must be a fraction in [0, 1), not {args.max_loss} (0.01 is 1%).")
    tgt = load_target(args.target)
    g = import_onnx(args.model, input_shapes(args))
    if is_qdq(g):
        raise UserError(f"{args.model} is already quantized (QDQ): it is built with its own scales "
                        f"(`hwc build --int8`), there is nothing to search.")
    calib = load_data(args.calib, g, "calibration data")
    evaluation = load_data(args.eval_data, g, "evaluation data", keep=("labels",))
    t0 = time.perf_counter()
    fg = optimize_for_quant(g, tgt)
    try:
        p = make_problem(fg, calib, evaluation, tgt["kind"])
    except ValueError as e:
        raise UserError(str(e)) from None
    labels = p.labels is not None
    what = "top-1 accuracy" if labels else "SQNR and top-1 agreement with the float model"
    out.print(f"quant-search {args.model} for {tgt['name']}: {len(next(iter(p.calib.values())))} calibration, "
              f"{len(next(iter(p.feeds.values())))} evaluation samples; measuring {what}; "
              f"budget {100 * args.max_loss:.2f}% loss")
    from hwc.report.progress import work

    with work("measuring configurations") as bar:
        picked, results = search(p, max_loss=args.max_loss, jobs=args.jobs or None,
                                 progress=lambda r: bar.done(r.cfg.label()), queued=bar.queued)
    from rich.console import Console

    wide = Console(highlight=False, width=max(out.width, 150))  # the table is wider than 80 columns
    wide.print(results_table(results, picked, labels, p.float_metric,
                             f"quant-search {args.model} ({tgt['name']}, {time.perf_counter() - t0:.0f} s)"))
    page = write_search_html(args, tgt, results, picked, labels, p.float_metric)
    out.print(f"plot of accuracy against cost: {page}")
    if picked is None:
        err.print(f"hwc: no configuration is within the loss budget of {100 * args.max_loss:.2f}%; "
                  f"no quant-config written. Raise --max-loss, or give more representative calibration data.",
                  soft_wrap=True)
        return 2
    cfg = picked.cfg.with_(search={"model": str(args.model), "target": tgt["name"], "max_loss": args.max_loss,
                                   "metric": "accuracy" if labels else "agreement",
                                   "float_metric": p.float_metric, "picked": picked.to_json()})
    cfg.save(args.output)
    metric = "accuracy" if labels else "agreement"
    out.print(f"picked [bold]{picked.cfg.label()}[/bold]: {metric} {100 * picked.metric:.2f}% "
              f"(loss {100 * picked.loss:+.2f}%), SQNR {_fmt(picked.sqnr_db, '.2f')} dB, cost {picked.cost:,} "
              f"-> {args.output}")
    out.print(f"build it: hwc build {args.model} --target {args.target} --calib {args.calib} "
              f"--quant-config {args.output}")
    return 0
