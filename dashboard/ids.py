"""Every component id of the dashboard, in one place (pages and callbacks import them from here)."""

from __future__ import annotations

URL = "url"
PAGE = "page"
TITLE = "page-title"  # dcc.Store in each page: the browser tab's title (set by a clientside callback)
TITLE_SINK = "page-title-sink"  # the clientside callback's (unused) output

# the list pages (runs, alerts, compare): redrawn by an interval when what they show changed
LIST_TICK = "list-tick"  # dcc.Interval
LIST_MARKS = "list-marks"  # dcc.Store: what the body was drawn from (store.change_marks and the like)
LIST_BODY = "list-body"  # the part of the page the refresh redraws (filters and controls stay)

# runs page
RUNS_TABLE = "runs-table"
EMPTY_RUNS = "empty-runs"
FILTER_PROJECT = "filter-project"
FILTER_TAG = "filter-tag"
FILTER_STATUS = "filter-status"
FILTER_VERDICT = "filter-verdict"
FILTER_SEARCH = "filter-search"  # substring of the name or project (URL: q=)
RUNS_PAGER = "runs-pager"
COMPARE_PICK = "compare-pick"
COMPARE_LINK = "compare-link"

# run page
RUN_STATE = "run-state"  # dcc.Store: run id and the last step shown per metric
RUN_TICK = "run-tick"  # dcc.Interval of the live refresh
DIAGNOSIS = "diagnosis"
VERDICT = "verdict"
RUN_CONFIG = "run-config"
RUN_STATUS = "run-status"  # "updated at step N" line, rewritten by each refresh
RUN_SMOOTHING = "run-smoothing"  # the panels' EMA weight (URL: smooth=)
RUN_LOG = "run-log"  # y axes logarithmic (URL: log=1)
RUN_XRANGE = "run-xrange"  # dcc.Store: the steps the panels are zoomed to (shared by the eight, URL: from=, to=)
PANEL_GRID = "panel-grid"
AUDIT = "harness-audit"  # the "Harness audit" section: the three checks and their worst examples


def panel(key: str) -> str:
    """The dcc.Graph id of an indicator panel (``panel-importance_weight_max``)."""
    return f"panel-{key}"


# alerts page
ALERTS_TABLE = "alerts-table"
ALERTS_STATE = "alerts-state-filter"
ALERTS_SEVERITY = "alerts-severity"  # filter (URL: severity=)
ALERTS_RUN = "alerts-run"  # filter (URL: run=)
ALERTS_MESSAGE = "alerts-message"
SILENCES = "silences"  # the list of active silences
ALERTS_TOKEN = "alerts-token"  # password input: the write token, when one is set
ACK = "ack"  # pattern-matching: {"type": ACK, "index": alert_id}
SILENCE = "silence"  # pattern-matching: {"type": SILENCE, "index": alert_id}

# compare page
COMPARE_SMOOTHING = "compare-smoothing"
COMPARE_XAXIS = "compare-xaxis"
CONFIG_DIFF = "config-diff"
COMPARE_ALERTS = "compare-alerts"
COMPARE_LEGEND = "compare-legend"

# run page, on demand
EXTRA_PICK = "extra-pick"  # other logged metrics to plot
EXTRA_GRAPH = "extra-graph"
CSV_BUTTON = "csv-button"
CSV_DOWNLOAD = "csv-download"
