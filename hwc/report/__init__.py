"""Reports people look at: report.html (plots), `hwc report` (text), the energy estimate.

    data.py     the report data, computed once at build time into report.json
    events.py   event counts: exact from a tile's command stream, estimated for CPU/reference
    energy.py   the per-event energy table (target YAML `energy_pj`, Horowitz 2014 defaults)
    plots.py    matplotlib figures of report.json sections, as deterministic inline SVG
    html.py     report.html (written by every `Artifact.save`) and the quant-search page
    text.py     the same content as rich tables, for `hwc report OUT` (cli.py)
    progress.py rich progress bars for the long steps
"""
