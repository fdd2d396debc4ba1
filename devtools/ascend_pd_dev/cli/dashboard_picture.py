"""The dashboard picture (``docs/dashboard-layout.svg``), drawn from what a real Prometheus
holds: the chart's dashboard laid out as Grafana lays it out (its ``gridPos``), each panel
showing the series its queries returned.

The data comes from the Prometheus e2e tier (``tests/e2e/test_prometheus_scrape.py``):
with ``ASCEND_PD_PROMETHEUS_DUMP=<file>`` it writes every panel query's answer over the
last minutes (``query_range``) to that JSON file. ``ascend-pd-dev dashboard-picture`` runs
that test on its own dev cluster (``e2e-prometheus``) and draws the file; ``--data FILE``
draws a file written before. The picture is SVG, written by hand here: text and lines need
no image library, and the file diffs as text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from html import escape
from pathlib import Path
from typing import Any

from ascend_pd_dev.controlplane import paths
from ascend_pd_dev.controlplane.paths import TEST_CLUSTER_ENV

Json = dict[str, Any]

WIDTH, COLUMNS, ROW = 1368, 24, 30
HEADER = 44
PALETTE = ("#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff")
BACKGROUND, PANEL, BORDER, TEXT, DIM = "#111217", "#181b1f", "#2c3235", "#d8d9da", "#8e8e8e"
#: the test that writes the data, and where the picture goes
TEST = "tests/e2e/test_prometheus_scrape.py"
DUMP_ENV = "ASCEND_PD_PROMETHEUS_DUMP"


def legend(series: Json) -> str:
    """The series' legend: the target's ``legendFormat`` with its ``{{label}}``s filled, or
    its labels."""
    text = str(series.get("legend") or "")
    metric = series.get("metric") or {}
    for key, value in metric.items():
        text = text.replace("{{" + key + "}}", str(value))
    if text and "{{" not in text:
        return text
    return ", ".join(f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__") or "value"


def _number(value: float) -> str:
    if not math.isfinite(value):
        return "NaN"
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-2):
        return f"{value:.2e}"
    return f"{value:.3g}"


def _text(x: float, y: float, text: str, size: int = 12, fill: str = TEXT,
          weight: str = "normal", anchor: str = "start") -> str:  # fmt: skip
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" '
            f'font-weight="{weight}" text-anchor="{anchor}">{escape(text)}</text>')  # fmt: skip


def _timeseries(panel: Json, x: float, y: float, w: float, h: float, span: tuple[float, float]
                ) -> list[str]:  # fmt: skip
    series = panel["series"]
    shown = series[:6]
    plot_top = y + 28 + 14 * len(shown)
    plot = (x + 48, plot_top, w - 60, y + h - 10 - plot_top)
    values = [v for s in series for _, v in s["values"] if math.isfinite(v)]
    low, high = (min(0.0, *values), max(values)) if values else (0.0, 1.0)
    high = high if high > low else low + 1.0
    out = [f'<rect x="{plot[0]:.1f}" y="{plot[1]:.1f}" width="{plot[2]:.1f}" '
           f'height="{plot[3]:.1f}" fill="none" stroke="{BORDER}"/>',
           _text(plot[0] - 4, plot[1] + 10, _number(high), 10, DIM, anchor="end"),
           _text(plot[0] - 4, plot[1] + plot[3], _number(low), 10, DIM, anchor="end")]  # fmt: skip
    start, end = span
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        runs: list[list[str]] = [[]]
        for t, v in s["values"]:
            if not math.isfinite(v):
                runs.append([])
                continue
            px = plot[0] + plot[2] * (t - start) / ((end - start) or 1.0)
            py = plot[1] + plot[3] * (1 - (v - low) / (high - low))
            runs[-1].append(f"{px:.1f},{py:.1f}")
        out += [f'<polyline points="{" ".join(r)}" fill="none" stroke="{colour}" '
                f'stroke-width="1.5"/>' for r in runs if len(r) > 1]  # fmt: skip
        if i < len(shown):
            ly = y + 40 + 14 * i
            out.append(f'<rect x="{x + 10}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>')
            out.append(_text(x + 26, ly, legend(s)[:90], 11, DIM))
    if len(series) > len(shown):
        out.append(_text(x + w - 10, y + 18, f"{len(series)} series", 10, DIM, anchor="end"))
    return out


def _stat(panel: Json, x: float, y: float, w: float, h: float) -> list[str]:
    out = []
    for i, s in enumerate(panel["series"][:4]):
        last = next((v for _, v in reversed(s["values"]) if math.isfinite(v)), math.nan)
        cy = y + 70 + 48 * i
        out.append(_text(x + 12, cy - 22, legend(s)[:60], 11, DIM))
        out.append(_text(x + 12, cy + 8, _number(last), 28, PALETTE[i % len(PALETTE)], "bold"))
    return out


def _table(panel: Json, x: float, y: float, w: float) -> list[str]:
    rows = [s["metric"] for s in panel["series"]]
    keys = sorted({k for r in rows for k in r if k not in ("__name__", "job", "pod", "endpoint",
                                                           "service", "instance")})  # fmt: skip
    step = (w - 20) / max(1, len(keys))
    out = [_text(x + 10 + step * i, y + 44, k, 11, DIM, "bold") for i, k in enumerate(keys)]
    for j, row in enumerate(rows[:3]):
        out += [_text(x + 10 + step * i, y + 62 + 16 * j, str(row.get(k, ""))[:28], 11)
                for i, k in enumerate(keys)]  # fmt: skip
    return out


def svg(data: Json) -> str:
    """The picture of ``data`` (the e2e tier's dump) as an SVG document."""
    panels = data["panels"]
    col = WIDTH / COLUMNS
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height = HEADER + bottom * ROW + 8
    times = [t for p in panels for s in p["series"] for t, _ in s["values"]]
    span = (min(times), max(times)) if times else (0.0, 1.0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
           f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="DejaVu Sans, sans-serif">',
           f'<rect width="100%" height="100%" fill="{BACKGROUND}"/>',
           _text(12, 28, f"Ascend PD: namespace {data['namespace']}, PDDeployment "
                 f"{data['pddeployment']}, {span[1] - span[0]:.0f} s as a real Prometheus "
                 "scraped them (the Prometheus e2e tier)", 15, TEXT, "bold")]  # fmt: skip
    for panel in panels:
        grid = panel["gridPos"]
        x, y = grid["x"] * col + 4, HEADER + grid["y"] * ROW + 2
        w, h = grid["w"] * col - 8, grid["h"] * ROW - 4
        if panel["type"] == "row":
            out.append(_text(x + 4, y + 20, f"▾ {panel['title']}", 15, "#f2cc0c", "bold"))
            continue
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="3" '
                   f'fill="{PANEL}" stroke="{BORDER}"/>')  # fmt: skip
        out.append(_text(x + 10, y + 18, panel["title"], 13, TEXT, "bold"))
        if panel["type"] == "stat":
            out += _stat(panel, x, y, w, h)
        elif panel["type"] == "table":
            out += _table(panel, x, y, w)
        else:
            out += _timeseries(panel, x, y, w, h, span)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def collect(dump: Path) -> None:
    """Run the Prometheus e2e test with the dump on, on its own dev cluster."""
    env = {**os.environ, DUMP_ENV: str(dump)}
    env.setdefault(TEST_CLUSTER_ENV, "e2e-prometheus")
    cmd = [sys.executable, "-m", "pytest", TEST, "-m", "e2e and prometheus",
           "-k", "every_panel_query", "-p", "no:cacheprovider", "-q"]  # fmt: skip
    subprocess.run(cmd, cwd=paths.project_root(), env=env, check=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="draw this dump of the Prometheus e2e tier instead of running it",
    )
    parser.add_argument("--out", type=Path, default=None,
                        help="the picture (default: docs/dashboard-layout.svg)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    out = args.out or paths.project_root() / "docs" / "dashboard-layout.svg"
    if args.data is not None:
        data = json.loads(args.data.read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            dump = Path(tmp) / "dashboard.json"
            collect(dump)
            data = json.loads(dump.read_text())
    out.write_text(svg(data))
    print(f"wrote {out}")
    return 0
