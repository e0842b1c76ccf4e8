"""The facts about the machine each benchmark's JSON records beside its figures."""
import json
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


def write_results(path: str, settings: Any, load_before: Sequence[float], **sections: Any) -> None:
    """Write a benchmark's JSON: its settings (``argparse`` arguments), the machine's facts and
    ``sections``; then say where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(dict(settings=vars(settings),
                       machine=machine_facts(load_before, os.getloadavg()),
                       **sections),
                  out,
                  indent=1)
    print(f"\nwrote {path}")
