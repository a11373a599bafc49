"""A progress bar on a terminal, for replays that take more than a moment."""

from __future__ import annotations

from typing import TextIO


class ProgressBar:
    """Redraws one line each time the shown percentage changes; ends it at 100 %."""

    def __init__(self, stream: TextIO, label: str, width: int = 30) -> None:
        self.stream = stream
        self.label = label
        self.width = width
        self._shown = -1

    def __call__(self, fraction: float) -> None:
        percent = max(0, min(100, int(fraction * 100)))
        if percent == self._shown:
            return
        self._shown = percent
        filled = self.width * percent // 100
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if percent == 100 else ""
        self.stream.write(f"\r{self.label:<12} [{bar}] {percent:3d}%{end}")
        self.stream.flush()
