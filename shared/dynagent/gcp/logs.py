"""Structured logs for Cloud Functions: one JSON object per line on stdout.

Cloud Logging reads ``severity`` and ``message`` from such lines and keeps the other
fields as the entry's JSON payload, so every action and its reason is searchable.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO


class StructuredLogger:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def _write(self, severity: str, message: str, extra: dict[str, Any] | None) -> None:
        entry = {"severity": severity, "message": message, **(extra or {})}
        print(json.dumps(entry, default=str), file=self.stream or sys.stdout, flush=True)

    def info(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("INFO", message, extra)

    def warning(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("WARNING", message, extra)

    def error(self, message: str, extra: dict[str, Any] | None = None) -> None:
        self._write("ERROR", message, extra)
