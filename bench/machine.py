"""Facts about the machine a benchmark ran on, recorded beside its figures."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def facts() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
