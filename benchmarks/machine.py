"""The facts about the machine each benchmark's JSON records beside its figures."""
import os
import platform
from typing import Any, Dict, Sequence


def machine_facts(load_before: Sequence[float], load_after: Sequence[float]) -> Dict[str, Any]:
    """Platform, Python, CPU count and the load averages around the measurement (a busy machine
    explains odd figures)."""
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
    }
