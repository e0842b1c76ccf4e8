"""The learning-curve picture (AverageReturn against Iteration), drawn without a display."""
import io
from typing import Optional, Sequence

import numpy as np

from async_plotter.rl.snapshot import PathLike, atomic_write_bytes


def save_learning_curve(path: PathLike,
                        iterations: Sequence[float],
                        average_returns: Sequence[float],
                        std_returns: Optional[Sequence[float]] = None,
                        title: str = "") -> None:
    """Write a PNG of the curve (a band of one standard deviation when given), atomically.

    Uses matplotlib's object API with the Agg canvas, which draws off-screen and, unlike
    ``matplotlib.use("Agg")``, leaves the backend of the user's own plots alone.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = np.asarray(iterations, dtype=float)
    y = np.asarray(average_returns, dtype=float)
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    if std_returns is not None:
        std = np.asarray(std_returns, dtype=float)
        axes.fill_between(x, y - std, y + std, alpha=0.2, linewidth=0, label="± std over paths")
    axes.plot(x, y, marker="o" if len(x) < 30 else None, markersize=3, label="AverageReturn")
    axes.set_xlabel("Iteration")
    axes.set_ylabel("AverageReturn")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best")
    # Fixed margins: tight_layout would cost an extra draw pass (~20 ms of ~70 ms).
    figure.subplots_adjust(left=0.13, right=0.97, top=0.92, bottom=0.12)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    atomic_write_bytes(path, buffer.getvalue())
