"""A bench's last output: its figures as one JSON line on stdout, and in a file if asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def emit(figures: dict, json_out: Optional[Path] = None) -> None:
    line = json.dumps(figures)
    print(line)
    if json_out is not None:
        json_out.write_text(line + "\n")
