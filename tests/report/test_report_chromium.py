"""report.html in a real browser: headless Chromium (Debian's chromium + chromium-driver, driven
by selenium) loads the page of a ResNet-8 tile8x8 build, takes a screenshot, and checks that
the page logged no console error and that every plot is there and draws its data.

The checks are themselves checked: a page that logs an error, and a page whose plot has no
data, must both be caught."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from hwc.report.html import render

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,900", "--hide-scrollbars"]
PLOTS = ("timeline", "utilization", "memory", "quant", "energy-variants", "energy-layers")

#: per <figure class="plot">: its id, whether it has an <svg> with an area, its data elements
#: (ids containing "-data-", see hwc/report/plots.py) and how many of them are drawn with an area
FIGURES_JS = """
return Array.from(document.querySelectorAll('figure.plot')).map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const data = Array.from(f.querySelectorAll('[id*="-data-"]'));
  const drawn = data.filter(e => { const b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0; });
  return {id: f.id, svg: !!svg && box.width > 100 && box.height > 100, data: data.length, drawn: drawn.length};
});
"""


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, ("headless Chromium is needed: `make setup` (scripts/ensure-tools.sh) installs the "
                                 "Debian packages chromium and chromium-driver; as root: apt-get install -y chromium "
                                 "chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="hwc-chromium-")
    for a in CHROMIUM_ARGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=opts, service=Service(driver))
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


def load(browser, path):
    browser.get(path.resolve().as_uri())
    browser.get_log("browser")  # nothing of an earlier page counts
    browser.refresh()
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def expected_data(rep: dict) -> dict[str, int]:
    """How many data elements each plot draws with a non-zero area, from report.json."""
    e = rep["energy"]
    split = ("compute_pj", "onchip_pj", "offchip_pj")
    return {
        "plot-timeline": len({(row, kind) for row, kind, _, _ in rep["timeline"]["bars"]}),
        "plot-utilization": sum(1 for layer in rep["layers"] if layer["utilization"] > 0),
        "plot-memory": len(rep["memory"]["buffers"]),
        "plot-quant": sum(1 for t in rep["quant"]["tensors"].values() if t["source"] in rep["quant"]["histograms"]),
        "plot-energy-variants": sum(1 for v in e["variants"] if "error" not in v for k in split if v[k] > 0),
        "plot-energy-layers": sum(1 for r in e["layers"] for k in split if r[k] > 0),
    }


def plot_problems(browser, expected: dict[str, int]) -> list[str]:
    figs = {f["id"]: f for f in browser.execute_script(FIGURES_JS)}
    problems = [f"{name}: missing" for name in expected if name not in figs]
    for name, want in expected.items():
        f = figs.get(name)
        if f is None:
            continue
        if not f["svg"]:
            problems.append(f"{name}: no drawn <svg>")
        if f["drawn"] != want or want == 0:
            problems.append(f"{name}: {f['drawn']} data elements drawn (of {f['data']}), expected {want} > 0")
    return problems


def test_resnet8_report_renders_in_chromium(browser, resnet8_tile, tmp_path):
    rep = json.loads((resnet8_tile / "report.json").read_text())
    errors = load(browser, resnet8_tile / "report.html")
    assert errors == [], errors
    assert browser.title == "hwc report: resnet8 on tile8x8"
    expected = expected_data(rep)
    assert set(expected) == {f"plot-{p}" for p in PLOTS}
    assert plot_problems(browser, expected) == []
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, height)
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size[1] >= 0.9 * height > 3000
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 50           # not a blank page


def test_the_browser_checks_catch_a_console_error_and_an_empty_plot(browser, resnet8_tile, tmp_path):
    bad = tmp_path / "error.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('broken')</script></body></html>")
    assert any("broken" in e["message"] for e in load(browser, bad))
    missing = tmp_path / "missing.html"
    missing.write_text('<!DOCTYPE html><html><body><img src="no-such-plot.png"></body></html>')
    assert load(browser, missing) != []                              # a resource that does not load
    rep = json.loads((resnet8_tile / "report.json").read_text())
    rep["timeline"]["bars"] = []
    empty = tmp_path / "empty.html"
    empty.write_text(render(rep))
    assert load(browser, empty) == []
    problems = plot_problems(browser, expected_data(json.loads((resnet8_tile / "report.json").read_text())))
    assert problems and all(p.startswith("plot-timeline") for p in problems), problems


def test_quant_search_page_renders_with_the_pick_marked(browser, tmp_path):
    import argparse
    import math

    from hwc.quant.cli import write_search_html
    from hwc.quant.config import QuantConfig
    from hwc.quant.search import Result

    base = QuantConfig()
    results = [Result(base.with_(method="minmax"), metric=0.95, loss=0.0, sqnr_db=30.0, cost=1000, stage=1),
               Result(base.with_(method="mse"), metric=0.945, loss=0.005, sqnr_db=28.0, cost=1000, stage=1),
               Result(base.with_(prune=0.5), metric=0.94, loss=0.01, sqnr_db=20.0, cost=500, stage=2),
               Result(base.with_(prune=0.75), metric=0.6, loss=0.35, sqnr_db=5.0, cost=250, stage=2),
               Result(base.with_(prune=0.9), error="ValueError: a candidate that failed", stage=2, sqnr_db=math.nan)]
    args = argparse.Namespace(model="m.onnx", max_loss=0.01, output=str(tmp_path / "q.json"))
    page = write_search_html(args, {"name": "tile8x8"}, results, results[2], True, 0.95)
    assert page == tmp_path / "q.html"
    assert load(browser, page) == []
    figs = {f["id"]: f for f in browser.execute_script(FIGURES_JS)}
    # stage 1 within budget, stage 2 within budget, stage 2 over budget, the pick
    assert figs["plot-search"]["svg"] and figs["plot-search"]["drawn"] == 4
    assert browser.execute_script("return document.querySelectorAll('[id$=\"-data-picked\"]').length") == 1
    text = page.read_text()
    assert "★ " + results[2].cfg.label() in text and "a candidate that failed" in text
