"""The live page's layout at a small window: the "no training metrics yet" hint stays inside its
panel (it was one line of canvas text, cut off at both sides at 1000x800).

The page is opened straight from the package (no server): before any metrics arrive this is
exactly what a browser shows. Set ``ASYNC_PLOTTER_SCREENSHOT_DIR`` to keep the screenshot.
"""
import os
import pathlib

import pytest

import async_plotter.web
from tests.test_web_browser import chromium, screenshot  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def test_no_metrics_hint_wraps_inside_its_panel_at_1000x800(chromium):  # noqa: F811
    chromium.call("Emulation.setDeviceMetricsOverride",
                  width=1000,
                  height=800,
                  deviceScaleFactor=1,
                  mobile=False)
    page = pathlib.Path(async_plotter.web.__file__).with_name("page.html").as_uri()
    chromium.call("Page.navigate", url=page)
    boxes = None
    for _ in range(100):
        boxes = chromium.evaluate("""(() => {
            const hint = document.querySelector('#curve-empty span');
            if (!hint || document.readyState !== 'complete') return null;
            const r = (e) => { const b = e.getBoundingClientRect();
                               return {left: b.left, right: b.right, top: b.top,
                                       bottom: b.bottom}; };
            return {hint: r(hint), panel: r(hint.closest('.panel')),
                    visible: getComputedStyle(document.getElementById('curve-empty')).display,
                    lines: Math.round(hint.getBoundingClientRect().height /
                                      parseFloat(getComputedStyle(hint).lineHeight))};
        })()""")
        if boxes:
            break
    assert boxes, "the page did not load"
    folder = os.environ.get("ASYNC_PLOTTER_SCREENSHOT_DIR")
    if folder:
        screenshot(chromium).save(os.path.join(folder, "no_metrics_1000x800.png"))
    hint, panel = boxes["hint"], boxes["panel"]
    assert boxes["visible"] != "none"
    assert hint["left"] >= panel["left"] and hint["right"] <= panel["right"], boxes
    assert boxes["lines"] >= 2, "at this width the hint wraps"
