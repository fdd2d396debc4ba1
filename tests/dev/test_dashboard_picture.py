"""The dashboard picture is drawn from the data it is given: each panel where its
``gridPos`` puts it, a series as a line, a stat's last finite value, a table's labels."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ascend_pd_dev.cli.dashboard_picture import legend, svg

NS = "{http://www.w3.org/2000/svg}"


def _dump() -> dict[str, object]:
    nan = float("nan")
    line = {"legend": "{{pd_instance}} queued", "metric": {"pd_instance": "1"},
            "values": [[100.0, 1.0], [102.0, nan], [104.0, 3.0], [106.0, 4.0]]}  # fmt: skip
    return {
        "namespace": "llm", "pddeployment": "dsv3",
        "panels": [
            {"title": "Serving", "type": "row", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1},
             "series": []},
            {"title": "Queued", "type": "timeseries",
             "gridPos": {"x": 0, "y": 1, "w": 12, "h": 8}, "series": [line]},
            {"title": "Rollout", "type": "stat", "gridPos": {"x": 12, "y": 1, "w": 12, "h": 8},
             "series": [{"legend": "", "metric": {"pddeployment": "dsv3"},
                         "values": [[100.0, 1.0], [106.0, float("nan")]]}]},
            {"title": "Layout", "type": "table", "gridPos": {"x": 0, "y": 9, "w": 24, "h": 5},
             "series": [{"legend": "", "metric": {"__name__": "x", "fingerprint": "3f2a"},
                         "values": [[106.0, 1.0]]}]},
        ],
    }  # fmt: skip


def test_the_picture_shows_the_data_where_the_dashboard_puts_it() -> None:
    root = ET.fromstring(svg(_dump()))
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert {"Queued", "Rollout", "Layout", "1 queued", "fingerprint", "3f2a"} <= set(texts)
    assert "▾ Serving" in texts
    # the stat shows the last finite value, not the NaN after it
    assert "1" in texts and "NaN" not in texts
    # the NaN splits the line: one run of the two points after it (a run of one is no line)
    (polyline,) = list(root.iter(f"{NS}polyline"))
    assert len(polyline.get("points", "").split()) == 2
    # the panel grid: 24 columns over the picture's width, rows of 30 px under the header
    rects = [r for r in root.iter(f"{NS}rect") if r.get("rx")]
    assert [(float(r.get("x", 0)), float(r.get("width", 0))) for r in rects][:2] == [
        (4.0, 676.0), (688.0, 676.0)]  # fmt: skip


def test_legend_fills_the_format_or_names_the_labels() -> None:
    assert legend({"legend": "p95 {{result}}", "metric": {"result": "ok"}}) == "p95 ok"
    assert legend({"legend": "", "metric": {"__name__": "x", "role": "decode"}}) == "role=decode"
    assert legend({"legend": "{{missing}}", "metric": {}}) == "value"
