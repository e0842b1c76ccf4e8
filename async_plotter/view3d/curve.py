"""The 3D history's curve: each recording's return against its iteration, drawn as an SVG in
viser's panel, with a marker per recording. Clicking a marker asks the page's server to show
that recording (``POST pick?x=...``, relative to the page, so behind the same checks as the
page); the one shown is ringed, the ghosts take their tints.
"""
import html
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

WIDTH, HEIGHT = 300, 150
# Margins inside the drawing: left for the returns' labels, bottom for the iterations'.
_LEFT, _RIGHT, _TOP, _BOTTOM = 40, 10, 10, 22
_SHOWN = "#d9480f"
_LINE = "#868e96"


def curve_svg(
    points: Sequence[Tuple[int, Optional[float], str]],
    shown: Optional[int],
    tints: Dict[int, Tuple[int, int, int]],
    line: Sequence[Tuple[int, float]] = ()) -> str:
    """The curve as HTML for ``gui.add_html``: ``points`` are ``(x, return or None, what it
    shows)`` in order of x, a marker each; ``shown`` the x of the recording shown; ``tints`` the
    ghosts' by x. The line joins ``line``'s ``(x, return)`` where given (every recording's
    return, those whose file was thinned away too), else the markers."""
    if not points:
        return "<p>no recordings yet</p>"
    drawn = sorted(line) if line else [(x, value) for x, value, _ in points if value is not None]
    xs = np.array([x for x, _, _ in points] + [x for x, _ in drawn], float)
    known = [value for _, value, _ in points if value is not None] + [value for _, value in drawn]
    low, high = (min(known), max(known)) if known else (0.0, 1.0)
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    first, last = float(xs.min()), float(xs.max())
    span = max(last - first, 1.0)

    def place(x: float, value: Optional[float]) -> Tuple[float, float]:
        left = _LEFT + (x - first) / span * (WIDTH - _LEFT - _RIGHT)
        if first == last:
            left = (_LEFT + WIDTH - _RIGHT) / 2
        level = low if value is None else value
        top = _TOP + (high - level) / (high - low) * (HEIGHT - _TOP - _BOTTOM)
        return left, top

    polyline = " ".join("%.1f,%.1f" % place(x, value) for x, value in drawn)
    parts = [
        f'<svg class="history-curve" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" '
        f'style="display:block;font:10px sans-serif">',
        f'<polyline points="{polyline}" fill="none" stroke="{_LINE}" stroke-width="1.5"/>',
        _text(_LEFT - 4, _TOP + 4, f"{high:.3g}", "end"),
        _text(_LEFT - 4, HEIGHT - _BOTTOM, f"{low:.3g}", "end"),
        _text(_LEFT, HEIGHT - 6, f"{first:g}", "start"),
        _text(WIDTH - _RIGHT, HEIGHT - 6, f"{last:g}", "end"),
        _text((_LEFT + WIDTH) / 2, HEIGHT - 6, "iteration", "middle"),
    ]
    for x, value, what in points:
        left, top = place(x, value)
        tint = tints.get(x)
        fill = "#%02x%02x%02x" % tint if tint else ("#ffffff" if value is None else _LINE)
        ring = f' stroke="{_SHOWN}" stroke-width="2.5"' if x == shown else ""
        size = 5 if x == shown or tint else 3
        # A wider, invisible disc under each marker takes the click.
        parts.append(f'<g class="marker" data-x="{x}" style="cursor:pointer" '
                     f'onclick="fetch(\'pick?x={x}\',{{method:\'POST\'}})">'
                     f'<title>{html.escape(what)}</title>'
                     f'<circle cx="{left:.1f}" cy="{top:.1f}" r="9" fill="transparent"/>'
                     f'<circle cx="{left:.1f}" cy="{top:.1f}" r="{size}" fill="{fill}"{ring}/></g>')
    parts.append("</svg>")
    return "".join(parts)


def _text(x: float, y: float, text: str, anchor: str) -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="#495057">'
            f'{html.escape(text)}</text>')
