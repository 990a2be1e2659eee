"""dashboards/railfabric.json: every PromQL query in it (panels and variables) names only
metrics the daemons export, matches and groups by labels they carry, and parses as PromQL
(`promtool check rules`). What is exported comes from the real collectors of a controller, an
agent and a softswitch, fed enough state that every family has samples."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from finsy.proto import p4i, p4r

from agent.main import Agent, build_parser
from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.daemon.core_planner import load_planner
from controller.daemon.metrics import Metrics, snapshot
from controller.daemon.runner import now
from controller.daemon.store import SqliteStore
from railfabric import metrics
from railfabric.fabric_counters import roce_index
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from railfabric.v1 import control_pb2, state_pb2
from softswitch.dataplane import DataPlane
from softswitch.egress import TmEgress
from softswitch.metrics import collector
from softswitch.switch import Switch
from tests import pki
from tests.metrics_checks import PROMTOOL, exported

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "railfabric.json"
LAB = REPO / "examples" / "lab-2rail.yaml"
# Labels Prometheus adds to every series it scrapes.
TARGET_LABELS = {"instance", "job"}
# Grafana's variables, as a query would get them (for promtool).
GRAFANA = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_NAME = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$")
# Words that are not metric names: operators, and aggregations whose `by (...)` comes first.
_KEYWORDS = {
    *("by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"),
    *("and", "or", "unless", "inf", "nan"),
    *("sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk"),
    *("quantile", "count_values"),
}

Selector = tuple[str, frozenset[str]]


def parse(expr: str) -> tuple[list[Selector], set[str]]:
    """The metric selectors of a PromQL expression (name, label names matched) and the
    labels it groups or joins by."""
    text = _RANGE.sub("", _STRING.sub('""', expr))
    grouping = {
        label.strip()
        for match in _GROUPING.finditer(text)
        for label in match.group(2).split(",")
        if label.strip()
    }
    text = _GROUPING.sub(r"\1", text)
    selectors = [
        (name, frozenset(_MATCHER.findall(braces or "")))
        for name, braces, call in _NAME.findall(text)
        if not call and name not in _KEYWORDS
    ]
    return selectors, grouping


def test_the_parser_finds_names_labels_and_groupings() -> None:
    selectors, grouping = parse(
        'topk(10, sum by (switch, le) (rate(a_total{switch=~"$s", port!="x y"}[5m])))'
        " * on (instance) group_left (peer) (0 * b + 1) or vector(0)"
    )
    assert selectors == [("a_total", frozenset({"switch", "port"})), ("b", frozenset())]
    assert grouping == {"switch", "le", "instance", "peer"}


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panel_queries(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for panel in panels:
        out += [(panel["title"], t["expr"]) for t in panel.get("targets", []) if t.get("expr")]
        out += _panel_queries(panel.get("panels", []))
    return out


def _variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            out.append((variable["name"], query["query"] if isinstance(query, dict) else query))
    return out


async def _exported(p4info: p4i.P4Info) -> dict[str, set[str]]:
    """Every sample name the three daemons' collectors export -> its labels."""
    loop = asyncio.get_running_loop()

    core = DecisionCore(load_planner(LAB), DampingParams())
    core.start(SqliteStore.open(":memory:").load(), now())
    core.store_health(False, "disk full", now())  # an alarm
    core.hello(control_pb2.Hello(switch_name="tor-r1-b1"), now())
    core.applied("tor-r1-b1", control_pb2.Applied(generation=10**6), now())  # a refusal
    for i in range(2):  # RoCE NAKs and CNPs arriving: rates need two reports
        roce = control_pb2.Counters(wall_ns=10**18 + i * 10**9)
        roce.ports.add(port=1)
        roce.roce_cells.extend(
            [
                roce_index(1, 3, control_pb2.ROCE_KIND_NAK_PSN_SEQUENCE),
                roce_index(1, 6, control_pb2.ROCE_KIND_CNP),
            ]
        )
        roce.roce_packets.extend([i, i])
        core.counters("tor-r1-b1", roce, now())
    controller = Metrics()
    controller.watch(loop, lambda: snapshot(core, 1, False))

    agent = Agent(
        build_parser().parse_args(
            ["--switch", "tor-r1-b1", "--controller", "127.0.0.1:1", "--target", "127.0.0.1:1",
             "--device-id", "1", "--port-map", "1=eth1", "--p4info", str(DEFAULT_P4INFO),
             *pki.flags(pki.switch("tor-r1-b1"))]
        )
    )  # fmt: skip
    agent.writer.held = state_pb2.DesiredState(
        neighbors=[state_pb2.Neighbor(port=1, kind=state_pb2.PEER_KIND_HOST, peer_name="h/nic1")]
    )
    agent.last_counters = control_pb2.Counters(
        wall_ns=time.time_ns(),
        ports=[
            control_pb2.PortCounters(
                port=1,
                drops_by_reason=[control_pb2.DropCount(reason=control_pb2.DROP_REASON_ACL)],
                queue_depth_bytes=1,
                queue_watermark_bytes=1,
                queue_depth_packets=1,
                queue_watermark_packets=1,
            )
        ],
    )
    agent.metrics.watch(loop, agent)

    switch = Switch(1, {1: "p1"})
    switch.commit(p4r.ForwardingPipelineConfig(p4info=p4info))
    dataplane = DataPlane(Switch(1, {}))
    egress = TmEgress(switch, dataplane, loop, None)
    egress.tm.add_port(1, mac=bytes(6))
    softswitch = metrics.registry()
    softswitch.register(collector(loop, switch, dataplane, egress))

    names: dict[str, set[str]] = {}
    for registry in (controller.registry, agent.metrics.registry, softswitch):
        for name, labels in (await asyncio.to_thread(exported, registry)).items():
            names.setdefault(name, set()).update(labels)
    # What only a softswitch with interfaces has (kernel losses need a socket).
    assert "railfabric_softswitch_kernel_drops_total" in names
    names["railfabric_softswitch_kernel_drops_total"] |= {"port", "direction"}
    return names


async def test_every_query_names_exported_metrics_and_their_labels(p4info: p4i.P4Info) -> None:
    names = await _exported(p4info)
    dashboard = _dashboard()
    queries = _panel_queries(dashboard["panels"])
    assert len(queries) >= 40, "the dashboard lost its panels"
    problems: list[str] = []
    used: set[str] = set()

    def check(where: str, selectors: list[Selector], grouping: set[str]) -> None:
        assert selectors, f"{where}: no metric in the query"
        carried = set(TARGET_LABELS)
        for name, labels in selectors:
            used.add(name)
            if name not in names:
                problems.append(f"{where}: no daemon exports {name}")
                continue
            carried |= names[name]
            if unknown := labels - names[name] - TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {sorted(unknown)}")
        if missing := grouping - carried:
            problems.append(f"{where}: grouped by {sorted(missing)}, which no metric carries")

    for title, expr in queries:
        check(f"panel {title!r}", *parse(expr))
    variables = _variable_queries(dashboard)
    assert {name for name, _ in variables} == {"switch", "port", "softswitch"}
    for variable, query in variables:
        match = _LABEL_VALUES.match(query)
        assert match, f"variable {variable}: {query!r} is not label_values(selector, label)"
        selectors, _ = parse(match.group(1))
        check(f"variable {variable}", selectors, {match.group(2)})
    assert not problems, "\n".join(problems)
    # The overview, drill-down and PFC/ECN panels draw on every daemon.
    assert any(n.startswith("railfabric_port_pfc_") for n in used)
    assert any(n.startswith("railfabric_softswitch_tm_") for n in used)
    assert "railfabric_links" in used and "process_cpu_seconds_total" in used


def test_the_dashboard_is_a_grafana_model_on_a_prometheus_variable() -> None:
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 36  # Grafana 9
    source = dashboard["templating"]["list"][0]
    assert (source["type"], source["name"], source["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == [
        "Fabric overview",
        "Switch drill-down ($switch)",
        "PFC and ECN ($switch)",
        "Softswitch traffic manager ($softswitch)",
    ]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool is not installed (Debian package prometheus, scripts/setup.sh)")
    rules = []
    for i, (_, expr) in enumerate(_panel_queries(_dashboard()["panels"])):
        for variable, value in GRAFANA.items():
            expr = expr.replace(variable, value)  # noqa: PLW2901
        rules.append({"record": f"dashboard:query_{i}", "expr": re.sub(r"\$\w+", ".*", expr)})
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def p4info() -> p4i.P4Info:
    return load_p4info(DEFAULT_P4INFO)
