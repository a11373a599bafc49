"""Where a point's label goes on a chart: beside its point, inside the frame, clear of
the other labels and points (and so of the axes' tick labels, which are outside it).

Plain Python knows no font metrics, so a text's width is estimated from its characters,
on the wide side (DejaVu Sans, the widest common sans, for a browser's ``system-ui``):
a label kept clear on paper is clear on screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# left, top, right, bottom, in pixels (y grows downwards, as in SVG)
Box = tuple[float, float, float, float]

_GAP = 8  # pixels between a point's centre and its label
_NARROW = set(".,:;'|!iIjlft ()[]")
_WIDE = set("mwMW%@")


def text_width(text: str, size: float) -> float:
    """An estimate of ``text``'s width at ``size`` pixels, a little wider than it is."""
    em = 0.0
    for char in text:
        if char in _WIDE:
            em += 1.0
        elif char in _NARROW:
            em += 0.4
        elif char.isupper():
            em += 0.8
        else:
            em += 0.66
    return em * size


def text_box(x: float, y: float, anchor: str, text: str, size: float) -> Box:
    """The box a ``<text>`` at (x, y) takes: y is its baseline, ``anchor`` its
    ``text-anchor`` (start, middle or end)."""
    width = text_width(text, size)
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (left, y - size, left + width, y + size * 0.3)


@dataclass(frozen=True)
class Label:
    """A ``<text>``: anchored at (x, y), y its baseline."""

    x: float
    y: float
    anchor: str
    text: str
    box: Box


def place(
    text: str,
    point: tuple[float, float],
    area: Box,
    taken: Sequence[Box],
    size: float,
    left_first: bool = False,
) -> Label:
    """The first place beside ``point`` (one side, the other, above, below, then the
    corners and farther out) whose box is inside ``area`` and overlaps nothing ``taken``;
    if every place overlaps something, the one inside that overlaps least."""
    candidates = list(_candidates(text, point, size, left_first))
    inside = [c for c in candidates if _within(c.box, area)] or candidates
    return min(inside, key=lambda c: sum(overlap(c.box, box) for box in taken))


def _candidates(
    text: str, point: tuple[float, float], size: float, left_first: bool
) -> Iterable[Label]:
    cx, cy = point
    middle = cy + size * 0.35  # the baseline that centres a text on the point
    sides = [(-1, "end"), (1, "start")]
    if not left_first:
        sides.reverse()
    for reach in (1, 2):
        gap = _GAP * reach
        for sign, anchor in sides:
            yield _label(cx + sign * gap, middle, anchor, text, size)
        yield _label(cx, cy - gap, "middle", text, size)  # above
        yield _label(cx, cy + gap + size, "middle", text, size)  # below
        for sign, anchor in sides:
            yield _label(cx + sign * gap / 2, cy - gap, anchor, text, size)
            yield _label(cx + sign * gap / 2, cy + gap + size, anchor, text, size)


def _label(x: float, y: float, anchor: str, text: str, size: float) -> Label:
    return Label(x, y, anchor, text, text_box(x, y, anchor, text, size))


def _within(box: Box, area: Box) -> bool:
    return area[0] <= box[0] and area[1] <= box[1] and box[2] <= area[2] and box[3] <= area[3]


def overlap(a: Box, b: Box) -> float:
    """The area two boxes share (0 when they only touch)."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0
