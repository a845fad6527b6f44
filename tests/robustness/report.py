"""Figures the robustness tests record (calls tried, internal errors, stalls, writes lost): appended as
JSON lines to $TRIPTYCH_ROBUSTNESS_REPORT when set (bench/robustness.py reads them), else dropped."""

from __future__ import annotations

import json
import os
from typing import Any


def record(test: str, **figures: Any) -> None:
    path = os.environ.get("TRIPTYCH_ROBUSTNESS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"test": test, **figures}) + "\n")
