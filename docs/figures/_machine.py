"""What the figures say about where they were made (shared by fig_*.py)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else platform's guess."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """One line: torch version, CPU, threads; e.g. for a figure's subtitle."""
    return (
        f"torch {torch.__version__}, {cpu_model()}, {torch.get_num_threads()} thread(s)"
    )


def save(fig, path: Path) -> Path:
    """Save a figure as a small PNG (the repository keeps each <= 150 KB)."""
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    return path
