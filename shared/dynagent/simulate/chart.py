"""Small SVG charts written by hand: lines and filled bands over time, and labelled points.

The simulator's plots need no plotting library: an SVG is text, opens in any browser,
and embeds in a self-contained HTML page. Each chart is one ``<svg>`` element; its
parts carry a ``class`` (and a series its ``data-series``) so a reader or a test can
find them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from dynagent.simulate.labels import Box, place, text_width

WIDTH = 960
HEIGHT = 300
FONT_SIZE = 12
_MARGIN = (48, 24, 48, 84)  # top, right, bottom, left
_FONT = f'font-family="system-ui, sans-serif" font-size="{FONT_SIZE}"'
_RADIUS = 4  # of a point's dot
# An axis not drawn from zero spans at least this share of its largest value, so a
# difference smaller than that is drawn as small as it is, not across the whole axis.
_MIN_SPAN = 0.1

Format = Callable[[float], str]


@dataclass(frozen=True)
class Line:
    label: str
    color: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False
    width: float = 1.5
    series: str = ""  # its data-series in the SVG


@dataclass(frozen=True)
class Band:
    """A filled area between a lower and an upper value at each x, such as the GPUs
    billed but running no task, between busy and fleet."""

    label: str
    color: str
    points: Sequence[tuple[float, float, float]]  # (x, low, high)
    opacity: float = 1.0
    series: str = ""


@dataclass(frozen=True)
class Rule:
    """A reference line across the frame, labelled where it starts: at ``value`` on the
    y axis (``axis="y"``, such as the pool's cap) or on the x axis (the trace's end)."""

    label: str
    color: str
    value: float
    axis: str = "y"
    series: str = ""


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str


@dataclass(frozen=True)
class PointGroup:
    label: str
    color: str
    points: Sequence[Point]


@dataclass(frozen=True)
class _Frame:
    """Maps data to pixels inside the margins."""

    x_range: tuple[float, float]
    y_range: tuple[float, float]
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def box(self) -> Box:
        return (_MARGIN[3], _MARGIN[0], self.width - _MARGIN[1], self.height - _MARGIN[2])

    def x(self, value: float) -> float:
        low, high = self.x_range
        left, _, right, _ = self.box
        return left + (value - low) / ((high - low) or 1) * (right - left)

    def y(self, value: float) -> float:
        low, high = self.y_range
        _, top, _, bottom = self.box
        return bottom - (value - low) / ((high - low) or 1) * (bottom - top)


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) from at or below ``low`` to at
    or above ``high``."""
    span = high - low
    if span <= 0:
        return [low, low + 1]
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step)
    last = math.ceil(high / step - 1e-9)
    return [round(index * step, 10) for index in range(first, last + 1)]


def axis_range(values: Sequence[float], from_zero: bool = False) -> tuple[float, float]:
    """The range an axis shows: the values and a tenth of their span each side, so no
    point sits on the frame (never below zero for values that are not). From zero when
    asked; otherwise at least ``_MIN_SPAN`` of the largest value wide, centred on them."""
    low, high = min(values, default=0.0), max(values, default=1.0)
    floor = 0.0 if low >= 0 else -math.inf
    if from_zero:
        low = min(low, 0.0)
    span = max(high - low, _MIN_SPAN * max(abs(low), abs(high))) or 1.0
    middle = (low + high) / 2
    return max(floor, middle - span * 0.6), middle + span * 0.6


def line_chart(
    title: str,
    lines: Sequence[Line],
    bands: Sequence[Band],
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    x_format: Format = lambda v: f"{v:g}",
    y_format: Format = lambda v: f"{v:,.0f}",
    rules: Sequence[Rule] = (),
    x_range: tuple[float, float] | None = None,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """Bands under lines, on a y axis from zero to ``y_max`` (default: the highest value)
    rounded up: charts given the same ``y_max`` share their scale. The x axis spans
    ``x_range`` (default: from zero or below to the points' end), with round ticks
    unless given ``x_ticks``; rules are drawn over the bands, under the lines."""
    xs = [x for line in lines for x, _ in line.points]
    xs += [x for band in bands for x, _, _ in band.points]
    ys = [y for line in lines for _, y in line.points]
    ys += [high for band in bands for _, _, high in band.points]
    y_ticks = nice_ticks(0, (max(ys, default=1) if y_max is None else y_max) or 1)
    x_range = x_range or (min(0.0, *xs), max(xs, default=1.0))
    x_ticks = x_ticks or nice_ticks(*x_range)
    frame = _Frame(x_range, (0, y_ticks[-1]))
    body = [_axes(frame, x_ticks, y_ticks, x_label, y_label, x_format, y_format)]
    body += [_band(frame, band) for band in bands]
    body += [_rule(frame, rule) for rule in rules]
    for line in lines:
        path = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in line.points)
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        body.append(
            f'<polyline class="line" data-series="{escape(line.series)}" fill="none" '
            f'stroke="{line.color}" stroke-width="{line.width}"{dash} points="{path}"/>'
        )
    entries = [(band.label, band.color, "area") for band in bands]
    entries += [(line.label, line.color, "dashed" if line.dashed else "line") for line in lines]
    body.append(_legend(entries))
    return _svg(title, body)


def _rule(frame: _Frame, rule: Rule) -> str:
    """A dotted line across the frame and its label: above a horizontal one at the
    frame's left; at the top of a vertical one, on the side with more room."""
    left, top, right, bottom = frame.box
    if rule.axis == "x":
        x = frame.x(rule.value)
        ends = f'x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}"'
        side = f'x="{x + 4:.1f}" text-anchor="start"'
        if x > (left + right) / 2:
            side = f'x="{x - 4:.1f}" text-anchor="end"'
        place = f'{side} y="{top + FONT_SIZE + 2}"'
    else:
        y = frame.y(rule.value)
        ends = f'x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"'
        place = f'x="{left + 4}" y="{y - 4:.1f}" text-anchor="start"'
    return (
        f'<line class="rule" data-series="{escape(rule.series)}" data-value="{rule.value:g}" '
        f'{ends} stroke="{rule.color}" stroke-width="1.5" stroke-dasharray="2 3"/>\n'
        f'<text class="rule-label" {place} fill="{rule.color}" {_FONT}>'
        f"{escape(rule.label)}</text>"
    )


def _band(frame: _Frame, band: Band) -> str:
    """A polygon along the upper values and back along the lower ones."""
    upper = [f"{frame.x(x):.1f},{frame.y(high):.1f}" for x, _, high in band.points]
    lower = [f"{frame.x(x):.1f},{frame.y(low):.1f}" for x, low, _ in reversed(band.points)]
    return (
        f'<polygon class="band" data-series="{escape(band.series)}" fill="{band.color}" '
        f'fill-opacity="{band.opacity}" stroke="none" points="{" ".join(upper + lower)}"/>'
    )


def point_chart(
    title: str,
    groups: Sequence[PointGroup],
    x_label: str,
    y_label: str,
    x_from_zero: bool = False,
    x_format: Format = lambda v: f"{v:g}",
    y_format: Format = lambda v: f"{v:,.0f}",
) -> str:
    """Labelled points, joined in order within each group; the x axis from zero when
    asked (a wait, where no wait is the natural floor)."""
    points = [p for group in groups for p in group.points]
    x_ticks = nice_ticks(*axis_range([p.x for p in points], x_from_zero))
    y_ticks = nice_ticks(*axis_range([p.y for p in points]))
    frame = _Frame((x_ticks[0], x_ticks[-1]), (y_ticks[0], y_ticks[-1]))
    body = [_axes(frame, x_ticks, y_ticks, x_label, y_label, x_format, y_format)]
    for group in groups:
        path = " ".join(f"{frame.x(p.x):.1f},{frame.y(p.y):.1f}" for p in group.points)
        body.append(f'<polyline fill="none" stroke="{group.color}" points="{path}"/>')
    for group in groups:
        body += [
            f'<circle class="point" cx="{frame.x(p.x):.1f}" cy="{frame.y(p.y):.1f}" '
            f'r="{_RADIUS}" fill="{group.color}"/>'
            for p in group.points
        ]
    body += _point_labels(frame, groups)
    body.append(_legend([(group.label, group.color, "line") for group in groups]))
    return _svg(title, body)


def _point_labels(frame: _Frame, groups: Sequence[PointGroup]) -> list[str]:
    """One label per spot of each group (the values of points drawn at the same spot
    joined), placed inside the frame clear of every dot and of the labels before it.
    The first group's labels go left of their points first, the others' right."""
    spots = [_spots(frame, group) for group in groups]
    taken: list[Box] = [
        (x - _RADIUS, y - _RADIUS, x + _RADIUS, y + _RADIUS) for group in spots for x, y in group
    ]
    left, top, right, bottom = frame.box
    area = (left + 2, top + 2, right - 2, bottom - 2)
    parts = []
    for index, group in enumerate(spots):
        for spot, values in group.items():
            label = place(", ".join(values), spot, area, taken, FONT_SIZE, index == 0)
            taken.append(label.box)
            parts.append(
                f'<text class="point-label" x="{label.x:.1f}" y="{label.y:.1f}" '
                f'text-anchor="{label.anchor}" {_FONT}>{escape(label.text)}</text>'
            )
    return parts


def _spots(frame: _Frame, group: PointGroup) -> dict[tuple[float, float], list[str]]:
    """The group's labels by the pixel their point is drawn at (to the nearest one)."""
    spots: dict[tuple[float, float], list[str]] = {}
    for p in group.points:
        spot = (round(frame.x(p.x)), round(frame.y(p.y)))
        spots.setdefault(spot, []).append(p.label)
    return spots


def _axes(
    frame: _Frame,
    x_ticks: Sequence[float],
    y_ticks: Sequence[float],
    x_label: str,
    y_label: str,
    x_format: Format,
    y_format: Format,
) -> str:
    left, top, right, bottom = frame.box
    parts = [f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" '
             f'height="{bottom - top}" fill="none" stroke="#bbb"/>']  # fmt: skip
    for tick in y_ticks:
        y = frame.y(tick)
        parts.append(f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(
            f'<text class="tick-y" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>'
            f"{escape(y_format(tick))}</text>"
        )
    for tick in x_ticks:
        if not frame.x_range[0] <= tick <= frame.x_range[1]:
            continue
        x = frame.x(tick)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="#eee"/>')
        parts.append(
            f'<text class="tick-x" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" {_FONT}>'
            f"{escape(x_format(tick))}</text>"
        )
    parts.append(
        f'<text x="{(left + right) / 2}" y="{frame.height - 10}" text-anchor="middle" {_FONT}>'
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f'<text transform="translate(16 {(top + bottom) / 2}) rotate(-90)" '
        f'text-anchor="middle" {_FONT}>{escape(y_label)}</text>'
    )
    return "\n".join(parts)


def _legend(entries: Sequence[tuple[str, str, str]]) -> str:
    """A swatch and a label per entry, in a row: a filled square for an ``area``, a bar
    for a ``line``, a dashed bar for a ``dashed`` line."""
    parts = []
    x = float(_MARGIN[3])
    for label, color, style in entries:
        if style == "area":
            parts.append(f'<rect x="{x}" y="25" width="14" height="10" fill="{color}"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if style == "dashed" else ""
            parts.append(f'<line x1="{x}" x2="{x + 14}" y1="30" y2="30" stroke="{color}" '
                         f'stroke-width="3"{dash}/>')  # fmt: skip
        parts.append(f'<text x="{x + 20}" y="34" {_FONT}>{escape(label)}</text>')
        x += 34 + text_width(label, FONT_SIZE)
    return "\n".join(parts)


def _svg(title: str, body: Sequence[str]) -> str:
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}">',
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
            f'<text x="{_MARGIN[3]}" y="18" font-weight="bold" {_FONT}>{escape(title)}</text>',
            *body,
            "</svg>",
        ]
    )
