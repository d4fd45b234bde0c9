"""Drawing a report's figures: seaborn on matplotlib's Agg backend, saved as PNG.

seaborn and matplotlib come with the ``report`` extra and take about a second to import, so
they are imported when the first figure is drawn, not when the package is. Agg draws without a
display (a server, CI). Figures are PNG at ``DPI``: sharp enough on a screen, and a report of
half a dozen of them stays well under 2 MB with the images inlined in its HTML. The PNG's
metadata leaves out the software version, so the same data gives the same bytes.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

DPI = 90  # dots per inch: a 10 x 6 inch figure is 900 x 540 pixels
REPORT_EXTRA = ("seaborn", "matplotlib", "pandas")  # pip install 'fleetcast[report]'
# A log axis labels its 2s and 5s between powers of ten while it spans at most this many
# decades; past that they collide with the powers' labels (1,000 beside 2,000 and 5,000 on an
# x axis). A y axis stacks its labels, so they collide only over many more decades.
MINOR_LABELS_UP_TO_DECADES = {"x": 2.0, "y": 4.0}


@functools.cache
def _libraries() -> tuple[Any, Any]:
    """matplotlib.pyplot on the Agg backend, and seaborn with the report's theme (set once)."""
    # imported here: matplotlib and seaborn, the report extra (~1.3 s of CPU), for figures only
    import matplotlib

    matplotlib.use("Agg")  # no display: draw into memory
    # imported here: after choosing the backend
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    return plt, sns


@dataclass
class Drawing:
    """A figure being drawn: its axes (rows x columns, always two-dimensional), seaborn, and
    after the ``drawing`` block its PNG bytes."""

    figure: Any
    axes: Any
    sns: Any
    png: bytes = b""


@contextmanager
def drawing(
    rows: int = 1, columns: int = 1, size: tuple[float, float] = (9.0, 4.5), **options: Any
) -> Iterator[Drawing]:
    """A figure of ``rows`` x ``columns`` axes, ``size`` inches; its PNG is in ``.png`` once
    the block ends (``options`` go to ``plt.subplots``: ``sharex=True``, ...)."""
    plt, sns = _libraries()
    figure, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, **options)
    try:
        made = Drawing(figure, axes, sns)
        yield made
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
        made.png = buffer.getvalue()
    finally:
        plt.close(figure)


def plain_log_labels(axis: Any) -> None:
    """A log ``axis`` labelled in plain numbers (0.02, not 2 x 10^-2), its minor ticks only
    at 2 and 5 times a power of ten, and only while it spans at most
    ``MINOR_LABELS_UP_TO_DECADES``: readable where decades are close, uncluttered where they
    are many."""
    decades = MINOR_LABELS_UP_TO_DECADES[axis.axis_name]

    def sparse(value: float, _: object = None) -> str:
        low, high = sorted(axis.get_view_interval())  # read when drawn: the final limits
        many = low > 0 and math.log10(high / low) > decades
        if value <= 0 or many:
            return ""
        leading = round(value / 10 ** math.floor(math.log10(value)))
        return f"{value:g}" if leading in (2, 5) else ""

    axis.set_major_formatter(lambda value, _=None: f"{value:g}")
    axis.set_minor_formatter(sparse)


def hours_or_seconds(largest_s: float) -> tuple[float, str]:
    """(divisor, unit) for a time axis: hours from three hours on, else seconds."""
    return (3600.0, "h") if largest_s >= 3 * 3600 else (1.0, "s")
