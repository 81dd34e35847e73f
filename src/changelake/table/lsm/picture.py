"""The picture of one bucket's LSM tree, drawn the way LSM articles draw it: one horizontal band
per level (level 0 on top, one row per level-0 file since each is a sorted run of its own),
each file a box over its key range, sorted runs in distinct colors, the files the pending
compaction would pick outlined in red with the reason as the caption, changelog files at the side.

It draws from a bucket's values (:mod:`.bucket_tree`), not from the inspection that holds
them. matplotlib, the optional extra ``plot``, is imported when a picture is drawn: ``import
changelake`` needs no matplotlib and does not pay the second it takes to load.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from changelake.handoff import require
from changelake.table.lsm.bucket_tree import BucketInspection, FileInspection, human_size, key_text

_PICKED = "#d62728"
_EMPTY = "#f4f4f4"
# tab10 without its red, which marks the pending compaction's files.
_RUN_COLOR_INDEXES = (0, 1, 2, 4, 5, 6, 7, 8, 9)
_MAX_TICKS = 8


def _x_axis(b: BucketInspection) -> tuple[Callable[[tuple[Any, ...]], float], float, str, list[tuple[float, str]]]:
    """Where a key goes on the x axis, the width of a one-key box, the axis label and ticks.

    A single numeric key column is drawn at its values; other keys at their rank among all the
    files' boundary keys (their order is what matters, their distance has no meaning)."""
    bounds = sorted({k for f in b.files for k in (f.min_key, f.max_key)})
    numeric = bool(bounds) and all(len(k) == 1 and isinstance(k[0], int | float) and not isinstance(k[0], bool)
                                   for k in bounds)
    if numeric:
        span = float(bounds[-1][0] - bounds[0][0]) if len(bounds) > 1 else 1.0
        return (lambda k: float(k[0])), max(span * 0.01, 1e-9), "key", []
    rank = {k: float(i) for i, k in enumerate(bounds)}
    step = max(1, len(bounds) // _MAX_TICKS)
    ticks = [(rank[k], key_text(k)) for k in bounds[::step]]
    return rank.__getitem__, 0.8, "rank among file bounds of key", ticks


def _box_label(f: FileInspection) -> str:
    return f"{human_size(f.size)}\n{f.rows} rows"


def _draw_tree(ax: Any, b: BucketInspection, key_names: tuple[str, ...]) -> None:
    # Imported when drawn, as draw() explains.
    from matplotlib import colormaps
    from matplotlib.patches import Patch, Rectangle

    run_colors = tuple(colormaps["tab10"](i) for i in _RUN_COLOR_INDEXES)
    x_of, min_width, xlabel, ticks = _x_axis(b)
    picked = set(b.pending.files)
    level0 = b.level(0)
    # Rows from the top: one per level-0 run (at least one), then one per higher level.
    rows: list[tuple[int, int]] = [(0, i) for i in range(max(1, len(level0)))]
    rows += [(level, 0) for level in range(1, b.num_levels)]
    top = len(rows)
    y_of = {row: top - 1 - i for i, row in enumerate(rows)}
    xs = [x_of(k) for f in b.files for k in (f.min_key, f.max_key)] or [0.0, 1.0]
    left, right = min(xs) - min_width, max(xs) + min_width
    span = right - left or 1.0
    for index, run in enumerate(b.runs):
        color = run_colors[index % len(run_colors)]
        for f in run.files:
            row = (0, index) if run.level == 0 else (run.level, 0)
            x0, x1 = x_of(f.min_key) - min_width / 2, x_of(f.max_key) + min_width / 2
            chosen = f.name in picked
            ax.add_patch(Rectangle((x0, y_of[row] + 0.12), x1 - x0, 0.76, facecolor=color, alpha=0.85,
                                   edgecolor=_PICKED if chosen else "#333333", linewidth=2.5 if chosen else 0.8,
                                   hatch="//" if chosen else None))
            if (x1 - x0) / span > 0.06:
                ax.text((x0 + x1) / 2, y_of[row] + 0.5, _box_label(f), ha="center", va="center", fontsize=7)
    for level in range(b.num_levels):
        level_rows = [y_of[r] for r in rows if r[0] == level]
        if not b.level(level):
            ax.add_patch(Rectangle((left, min(level_rows)), span, 1, facecolor=_EMPTY, edgecolor="none"))
            ax.text(left + span / 2, min(level_rows) + 0.5, "(empty)", ha="center", va="center", fontsize=7,
                    color="#888888")
        ax.axhline(min(level_rows), color="#999999", linewidth=0.6)
    ax.set_xlim(left, right)
    ax.set_ylim(0, top)
    ax.set_yticks([y_of[r] + 0.5 for r in rows])
    ax.set_yticklabels([f"L0 run {i}" if level == 0 and len(level0) > 1 else f"L{level}" for level, i in rows],
                       fontsize=8)
    ax.set_xlabel(f"{xlabel}: {', '.join(key_names) or '(no key)'}", fontsize=9)
    if ticks:
        ax.set_xticks([t for t, _ in ticks])
        ax.set_xticklabels([text[:16] for _, text in ticks], fontsize=7, rotation=20)
    if picked:
        ax.legend(handles=[Patch(facecolor="white", edgecolor=_PICKED, linewidth=2.5, hatch="//",
                                 label=f"pending compaction -> level {b.pending.output_level}")],
                  loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _draw_changelog(ax: Any, b: BucketInspection, snapshot_id: int | None) -> None:
    from matplotlib.patches import Rectangle  # imported when drawn, as draw() explains

    ax.set_axis_off()
    ax.set_title(f"changelog files of snapshot {snapshot_id}", fontsize=9)
    if not b.changelog:
        ax.text(0.5, 0.5, "none", ha="center", va="center", fontsize=8, color="#888888")
        return
    shown = b.changelog[:12]
    height = 1.0 / max(len(shown), 6)
    for i, f in enumerate(shown):
        y = 1.0 - (i + 1) * height
        ax.add_patch(Rectangle((0.02, y + height * 0.1), 0.96, height * 0.8, facecolor="#fdd49e", edgecolor="#333333",
                               linewidth=0.6))
        ax.text(0.5, y + height / 2, f"{f.name[:28]}\n{f.rows} rows, {human_size(f.size)}", ha="center",
                va="center", fontsize=6.5)
    if len(b.changelog) > len(shown):
        ax.text(0.5, 0.0, f"... and {len(b.changelog) - len(shown)} more", ha="center", fontsize=7)


def draw(b: BucketInspection, path: str, *, table: str, snapshot_id: int | None, key_names: tuple[str, ...],
         width: float, height: float, dpi: int) -> None:
    """Draw bucket ``b`` (of ``table`` at ``snapshot_id``, keyed by ``key_names``) to a PNG
    file at ``path``. MissingExtraError naming the extra ``plot`` without matplotlib."""
    require("matplotlib", "plot", "TableInspection.to_png()")
    # Imported here, after the check: matplotlib is an optional extra that takes a second to
    # load, and a missing one is reported by name and extra above.
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot): no global state, no GUI backend, the same picture every time.
    fig = Figure(figsize=(width, height), dpi=dpi)
    grid = fig.add_gridspec(1, 2, width_ratios=(4, 1), left=0.08, right=0.98, top=0.9, bottom=0.2, wspace=0.08)
    _draw_tree(fig.add_subplot(grid[0, 0]), b, key_names)
    _draw_changelog(fig.add_subplot(grid[0, 1]), b, snapshot_id)
    where = f"partition {b.partition_text}, " if b.partition else ""
    fig.suptitle(f"{table} @ snapshot {snapshot_id}: {where}bucket {b.bucket} - "
                 f"{len(b.files)} files, {human_size(b.size)}, {b.rows} rows, {len(b.runs)} sorted runs",
                 fontsize=11)
    caption = textwrap.fill(f"pending compaction ({b.pending.rule.value}): {b.pending.reason}", width=150)
    fig.text(0.01, 0.02, caption, fontsize=8, va="bottom", ha="left")
    fig.savefig(path, format="png", metadata={"Software": None})
