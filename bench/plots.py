"""The bench's PNG plots (matplotlib, Agg canvas, imported only when plots are asked for).

- ``latency.png``: T(n) per model and precision from the profile;
- ``acceptance.png``: per (drafter, verifier) pair, alpha and the positional (rank) acceptance;
- ``speedup_by_category.png``: every method's speedup over plain per category;
- ``predicted_vs_measured.png``: the planner's predicted tokens/s against the measured one for
  every grid point, one marker per kind (plain, sequence, tree, hierarchy), the chosen plan in
  red; the plan, plain decoding and the fastest point named;
- ``plan.png``: the chosen plan: its stages and each stage's draft shape (a chain of gamma
  tokens, or the tree drawn from its parent array).

Figures are built with ``matplotlib.figure.Figure`` on an Agg canvas (no pyplot, no global
backend switch) and kept small (about 6 x 3.6 inches at 80 dpi).
"""

from __future__ import annotations

import io
from pathlib import Path

from specplan.core.errors import BackendMissingError
from specplan.core.files import write_bytes_atomic
from specplan.core.parents import node_depths

DPI = 80
SIZE = (6.4, 3.6)


def require_matplotlib() -> None:
    """Raise BackendMissingError (one line) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BackendMissingError("the bench's plots need matplotlib: pip install specplan[bench] (or pass --no-plots)") from None


def _figure(columns: int = 1, size=SIZE):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, columns)
    return figure, axes


def _save(figure, folder: Path, name: str) -> str:
    """The PNG, rendered in memory and written atomically (core/files.py)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=DPI, format="png")
    write_bytes_atomic(folder / name, buffer.getvalue())
    return name


def plot_latency(profile, folder: Path) -> str:
    figure, axes = _figure()
    for model in profile.models:
        for curve in model.latency:
            axes.plot(curve.n, curve.ms, marker="o", markersize=3,
                      label=f"{model.id} ({model.dtype}, {model.quant}, ctx {curve.context})")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("new tokens per forward, n")
    axes.set_ylabel("ms per forward, T(n)")
    axes.set_title("Latency curves (profile)")
    axes.legend(fontsize=7)
    return _save(figure, folder, "latency.png")


def plot_acceptance(profile, folder: Path) -> str:
    figure, (left, right) = _figure(2)
    pairs = [f"{a.drafter}\n-> {a.verifier}" for a in profile.acceptance]
    left.barh(pairs, [a.alpha for a in profile.acceptance], color="tab:blue")
    left.set_xlim(0, 1)
    left.set_xlabel("alpha (per-token acceptance)")
    left.tick_params(axis="y", labelsize=7)
    for entry in profile.acceptance:
        if entry.rank_accept:
            ranks = range(1, len(entry.rank_accept) + 1)
            right.plot(ranks, entry.rank_accept, marker="o", markersize=3, label=f"{entry.drafter}")
    right.set_xlabel("rank k of the accepted child")
    right.set_ylabel("p_k")
    right.set_title("rank acceptance", fontsize=9)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    figure.suptitle("Acceptance by the verifier (profile)", fontsize=10)
    return _save(figure, folder, "acceptance.png")


def plot_speedup(report, folder: Path) -> str:
    figure, axes = _figure(size=(6.4, 4.4))
    categories = report.categories() + ["all"]
    methods = [m["name"] for m in report.methods if m["name"] != report.reference]
    height = 0.8 / max(1, len(methods))
    for index, method in enumerate(methods):
        values = []
        for category in categories:
            table = report.aggregates(None if category == "all" else category)
            values.append(table[method].get("speedup") or 0.0)
        positions = [c + index * height for c in range(len(categories))]
        axes.barh(positions, values, height=height, label=method)
    axes.set_yticks([c + 0.4 - height / 2 for c in range(len(categories))], categories, fontsize=7)
    axes.axvline(1.0, color="black", linewidth=0.8)
    axes.invert_yaxis()
    axes.set_xlabel(f"speedup over {report.reference}")
    axes.set_title("Speedup per category")
    axes.legend(fontsize=7)
    return _save(figure, folder, "speedup_by_category.png")


MARKERS = {"plain": "s", "sequence": "o", "tree": "^", "hierarchy": "D", "plan": "*"}  # "plan": no grid ran


def _grid_points(report) -> list[dict]:
    """The grid's measured points; the plan alone (from plan quality) when the grid did not run."""
    points = [row for row in report.grid_table() if row["measured_decode_tokens_per_s"]]
    if not points and report.quality.get("measured_decode_tokens_per_s"):
        points = [{"name": "plan", "kind": "plan", "roles": ["plan"],
                   "predicted_tokens_per_s": report.quality["predicted_tokens_per_s"],
                   "measured_decode_tokens_per_s": report.quality["measured_decode_tokens_per_s"]}]
    return points


def _labelled(points: list[dict]) -> set[str]:
    """Points to name on the plot: the plan, plain decoding and the fastest measured."""
    names = {p["name"] for p in points if {"plan", "plain"} & set(p["roles"])}
    if points:
        names.add(max(points, key=lambda p: p["measured_decode_tokens_per_s"])["name"])
    return names


def plot_predicted_vs_measured(report, folder: Path) -> str:
    figure, axes = _figure(size=(5.6, 4.4))
    points = _grid_points(report)
    for kind, marker in MARKERS.items():
        group = [p for p in points if p["kind"] == kind]
        if group:
            axes.scatter([p["predicted_tokens_per_s"] for p in group], [p["measured_decode_tokens_per_s"] for p in group],
                         c=["tab:red" if "plan" in p["roles"] else "tab:gray" if "plain" in p["roles"] else "tab:blue"
                            for p in group], marker=marker, s=22)
            axes.scatter([], [], c="black", marker=marker, s=22, label=kind)  # legend: the kind's marker only
    named = _labelled(points)
    for point in points:
        if point["name"] in named:
            axes.annotate(point["name"], (point["predicted_tokens_per_s"], point["measured_decode_tokens_per_s"]),
                          fontsize=6, xytext=(3, 3), textcoords="offset points")
    top = max([p["predicted_tokens_per_s"] for p in points] + [p["measured_decode_tokens_per_s"] for p in points]
              + [1.0]) * 1.1
    axes.plot([0, top], [0, top], color="black", linewidth=0.8)
    axes.fill_between([0, top], [0, top / 1.1], [0, top / 0.9], color="tab:green", alpha=0.15, label="predicted/measured 0.9-1.1")
    axes.set_xlim(0, top)
    axes.set_ylim(0, top)
    axes.set_xlabel("predicted tokens/s")
    axes.set_ylabel("measured tokens/s (after prefill)")
    axes.set_title("Predicted vs measured per grid point (red: the plan; gray: plain)", fontsize=9)
    axes.legend(fontsize=7, loc="upper left")
    return _save(figure, folder, "predicted_vs_measured.png")


def _tree_layout(parents: list[int]) -> list[tuple[float, float]]:
    """(depth, row) per node of a parent array: leaves get consecutive rows, parents their children's mean."""
    children: dict[int, list[int]] = {i: [] for i in range(len(parents))}
    for node, parent in enumerate(parents[1:], start=1):
        children[parent].append(node)
    depth = node_depths(parents)
    rows: dict[int, float] = {}
    counter = [0]

    def place(node: int) -> float:
        if not children[node]:
            rows[node] = counter[0]
            counter[0] += 1
        else:
            rows[node] = sum(place(child) for child in children[node]) / len(children[node])
        return rows[node]

    place(0)
    return [(float(depth[i]), -rows[i]) for i in range(len(parents))]


def _depth(shape) -> int:
    if shape.kind == "sequence":
        return shape.gamma
    if shape.parents:
        return int(max(depth for depth, _ in _tree_layout(list(shape.parents))))
    return max(1, shape.depth)


def plot_plan(plan, folder: Path) -> str:
    stages = list(plan.stages)
    figure, axes = _figure(size=(6.4, 1.6 + 1.4 * max(1, len(stages))))
    axes.set_axis_off()
    if not stages:
        axes.text(0.5, 0.5, f"{plan.target}: plain decoding", ha="center", va="center", fontsize=11)
    for index, stage in enumerate(reversed(stages)):  # top stage (verified by the target) first
        y = -index * 3.0
        shape = stage.shape
        if shape.kind == "sequence":
            parents = [-1] + list(range(shape.gamma))
            label = f"sequence, gamma {shape.gamma}"
        elif shape.parents:
            parents = list(shape.parents)
            label = f"{'dynamic' if shape.dynamic else 'static'} tree, {len(parents)} nodes"
        else:
            parents = [-1] + list(range(max(1, shape.depth)))
            label = f"dynamic tree, budget {shape.budget}, depth {shape.depth} (filled at run time)"
        layout = _tree_layout(parents)
        scale = 1.8 / max(1.0, -min(row for _, row in layout))
        for node, parent in enumerate(parents):
            if parent >= 0:
                (x0, y0), (x1, y1) = layout[parent], layout[node]
                axes.plot([x0 + 3, x1 + 3], [y + y0 * scale, y + y1 * scale], color="gray", linewidth=0.8)
        axes.scatter([x + 3 for x, _ in layout], [y + r * scale for _, r in layout],
                     c=["black"] + ["tab:blue"] * (len(layout) - 1), s=20, zorder=3)
        axes.text(0, y, f"{stage.drafter}\n  -> {stage.verifier}", va="center", fontsize=9,
                  bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "tab:blue"})
        axes.text(3, y + 0.6, label, fontsize=8, color="tab:blue")
    predicted = plan.predicted
    axes.set_title(f"Chosen plan: predicted {predicted.tokens_per_s:.1f} tok/s, {predicted.speedup:.2f}x, "
                   f"{predicted.accepted_per_target_forward:.2f} accepted/forward (black: last committed token)", fontsize=8)
    widest = max([_depth(stage.shape) for stage in stages] + [1])
    axes.set_xlim(-0.3, 3 + widest + 0.8)
    axes.set_ylim(-3.0 * max(0, len(stages) - 1) - 2.2, 1.4)
    return _save(figure, folder, "plan.png")


def write_plots(report, profile, plan, folder: Path) -> list[str]:
    """Write every plot into ``folder``; return the file names."""
    folder.mkdir(parents=True, exist_ok=True)
    return [plot_latency(profile, folder), plot_acceptance(profile, folder), plot_speedup(report, folder),
            plot_predicted_vs_measured(report, folder), plot_plan(plan, folder)]
