"""The controller-failover scenario: its judging on synthetic kills (no lab), how `run`
builds its lab (a second one, with replicas; a SKIP without etcd), and once on the lab fabric
with 3 controller replicas on a 3-member etcd cluster, which leaves nothing behind."""

from __future__ import annotations

import dataclasses
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mininet_labs import __main__ as labmain
from mininet_labs.clean import clean
from mininet_labs.etcd import INSTALL_HINT, EtcdCluster, replicas_missing
from mininet_labs.lab import Lab, LabOptions
from mininet_labs.netlinks import new_tag
from mininet_labs.processes import REPO, Softswitch, make_target
from mininet_labs.report import Result, Verdict
from mininet_labs.scenarios import SCENARIOS, Budget
from mininet_labs.scenarios.common import Sample
from mininet_labs.scenarios.controller_failover import NAME, Kill, goal_ms, judge
from mininet_labs.scenarios.failover import Probe, Window
from tests.lab.test_cleanup import leftovers

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"
NO_ETCD = pytest.mark.skipif(replicas_missing() is not None, reason=str(replicas_missing()))
SWITCHES = ("spine-p1-1", "tor-r1-b1", "tor-r2-b1")
BUDGET = Budget(controller_kills=2, probe_pps=1000)
TTL_S = 2


# -- judging (no lab) ------------------------------------------------------------------------


def kill(takeover_ms: float = 2_300.0, lost: int = 0, **changes: Any) -> Kill:
    k = Kill("127.0.0.1:1", 0, 0, new_leader="127.0.0.1:2", switches=len(SWITCHES))
    k.elected_ms, k.takeover_ms, k.on_new_leader = 2_200.0, takeover_ms, len(SWITCHES)
    k.writes = dict.fromkeys(SWITCHES, 0)
    k.window = Window(math.nan, Sample(3_000, 3_000 - lost))
    return dataclasses.replace(k, **changes)


ALL_DELIVERED = Sample(5_000, 5_000)  # the probe outside the takeovers


def probe(kills: list[Kill], outside: Sample = ALL_DELIVERED) -> Probe:
    inside = sum((k.window.sample for k in kills), Sample(0, 0))
    return Probe(inside + outside, outside)


def judged(kills: list[Kill], outside: Sample = ALL_DELIVERED) -> Result:
    return judge(kills, probe(kills, outside), BUDGET, TTL_S)


@pytest.mark.unit
def test_takeovers_without_loss_or_writes_pass_with_their_samples() -> None:
    r = judged([kill(2_100.0), kill(2_500.0)])
    assert r.passed, r.reason
    m = r.metrics
    assert (m["kills"], m["takeovers_measured"], m["takeovers_within_goal"]) == (2, 2, 2)
    assert (m["takeover_ms_p50"], m["takeover_ms_max"], m["takeover_goal_ms"]) == (
        2_100.0,
        2_500.0,
        3_000.0,
    )
    assert (m["takeover_sent"], m["takeover_received"], m["takeover_lost"]) == (6_000, 6_000, 0)
    assert (m["updates_written"], m["updates_written_reads"]) == (0, 2 * len(SWITCHES))
    assert m["outcome_problems"] == 0
    assert "0 (6,000/6,000 datagrams received/sent)" in r.reason


@pytest.mark.unit
def test_a_datagram_lost_a_write_or_an_agent_elsewhere_fails() -> None:
    lost = judged([kill(), kill(lost=3)])
    assert not lost.passed and "3 at kill 2" in lost.reason
    wrote = judged([kill(writes={**dict.fromkeys(SWITCHES, 0), "tor-r1-b1": 4})])
    assert not wrote.passed and "tor-r1-b1 4" in wrote.reason
    assert wrote.metrics["switches_with_writes"] == 1
    astray = judged([kill(on_new_leader=2), kill(without_session_up=("tor-r2-b1",))])
    assert not astray.passed
    assert "2/3 agents on the new leader" in astray.reason
    assert "no SESSION_UP on the new leader for tor-r2-b1" in astray.reason
    unread = judged([kill(writes={"tor-r1-b1": 0})])
    assert not unread.passed and "updates written read for 1/3" in unread.reason
    for r in (lost, wrote, astray, unread):
        assert int(r.metrics["outcome_problems"]) > 0


@pytest.mark.unit
def test_empty_or_broken_samples_and_missing_kills_fail() -> None:
    empty = judged([kill(window=Window(math.nan, Sample(0, 0)))])
    assert not empty.passed and "empty sample" in empty.reason
    dead = judged([kill()], outside=Sample(5_000, 10))
    assert not dead.passed and "outside the takeovers" in dead.reason
    broken = judge(
        [kill()], Probe(Sample(10, 12), Sample(0, 0), "datagram #11 received"), BUDGET, 2
    )
    assert not broken.passed and "broken" in broken.reason
    assert not judged([]).passed


@pytest.mark.unit
def test_a_slow_takeover_misses_the_goal_only() -> None:
    """The goal (lease TTL + 1 s) fails the scenario, as failover's loss targets do, and is
    the only problem: the lab test checks outcomes, not this machine's speed."""
    r = judged([kill(2_000.0), kill(3_400.0)])
    assert not r.passed
    assert "takeover max 3400.0 ms > 3000 ms" in r.reason
    assert (r.metrics["outcome_problems"], r.metrics["takeovers_within_goal"]) == (0, 1)
    assert goal_ms(5) == 6_000.0


# -- how a run builds its labs (no lab) -------------------------------------------------------


@pytest.mark.unit
def test_all_runs_it_on_a_second_lab_with_replicas() -> None:
    assert SCENARIOS[NAME].controllers == 3
    assert [n for n, s in SCENARIOS.items() if s.controllers > 1] == [NAME]
    runs = labmain.lab_runs(list(SCENARIOS))
    assert runs == [(1, [n for n in SCENARIOS if n != NAME]), (3, [NAME])]
    assert labmain.lab_runs([NAME, "reachability", NAME]) == [
        (3, [NAME]),
        (1, ["reachability"]),
        (3, [NAME]),
    ]


@pytest.mark.unit
def test_without_etcd_it_is_a_skip_with_the_reason_and_no_lab(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(labmain, "replicas_missing", lambda: INSTALL_HINT)
    monkeypatch.setattr(labmain, "_runnable_target", lambda kind, rate: Softswitch())

    def no_lab(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("no lab is built for a skipped scenario")

    monkeypatch.setattr(labmain, "Lab", no_lab)
    out = tmp_path / "out.json"
    status = labmain.run(LAB_FABRIC, [NAME], "softswitch", None, LabOptions(), Budget.quick(), out)
    assert status == 0
    printed = capsys.readouterr().out
    assert f"== {NAME}: SKIP — etcd is not installed" in printed
    assert "0 passed, 0 failed, 1 skipped" in printed
    assert '"result": "skip"' in out.read_text()


@pytest.mark.unit
def test_on_a_lab_with_one_controller_it_is_a_skip() -> None:
    class OneController:
        replicated = False

    lab: Any = OneController()
    r = SCENARIOS[NAME].run(lab, Budget.quick())
    assert r.verdict is Verdict.SKIP and "--controllers 3" in r.reason


# -- on the lab fabric -------------------------------------------------------------------------


@pytest.mark.lab
@NO_ETCD
def test_a_killed_leader_is_taken_over_losing_and_writing_nothing() -> None:
    options = LabOptions(controllers=3)
    with Lab(LAB_FABRIC, make_target("softswitch", 20.0), options) as lab:
        tag, run_dir = lab.names.tag, lab.run_dir
        # 3 replicas on a 3-member etcd cluster kept under the run directory; every agent
        # lists every replica.
        assert len(lab.controller_addrs) == 3 and lab.etcd is not None
        assert len(lab.etcd.pids()) == 3
        assert {p.name for p in (run_dir / "etcd").iterdir()} >= {"m0.log", "m0.data"}
        for agent in lab.agents.values():
            argv = list(agent.proc.args)  # type: ignore[arg-type]
            assert argv[argv.index("--controller") + 1] == ",".join(lab.controller_addrs)
        first = lab.controller_addr
        assert lab.serving(first)

        r = SCENARIOS[NAME].run(lab, Budget.quick())
        m = r.metrics
        # Outcomes: every takeover measured, nothing lost, nothing written, every agent on
        # the new leader, every figure from its sample. The goal (lease + 1 s) is a figure
        # for `make demo`: on a slow machine it may fail the scenario, and only it may.
        assert m["outcome_problems"] == 0, r.reason
        assert r.passed or float(m["takeover_ms_max"]) > float(m["takeover_goal_ms"]), r.reason
        assert m["kills"] == m["takeovers_measured"] == Budget.quick().controller_kills
        assert m["windows_with_empty_sample"] == 0
        assert int(m["takeover_sent"]) == int(m["takeover_received"]) > 0, r.reason
        assert int(m["outside_takeovers_received"]) >= 0.95 * int(m["outside_takeovers_sent"]) > 0
        assert m["takeover_lost"] == m["updates_written"] == 0
        assert m["updates_written_reads"] == 2 * len(lab.fabric.switches)
        assert m["agents_on_new_leader_min"] == len(lab.fabric.switches)
        assert 0 < float(m["takeover_ms_p50"]) <= float(m["takeover_ms_max"]) < 30_000

        # The lab's handles reach the leader of now (the first one was killed, and maybe
        # leads again since its restart): controller_addr, the admin channel, railctl.
        now = lab.controller_addr
        assert lab.serving(now)
        assert [lab.serving(a) for a in lab.controller_addrs].count(True) == 1
        lab.wait_converged(timeout_s=30)
        done = subprocess.run(
            lab.railctl_argv("switches"), capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0 and "tor-r1-b1" in done.stdout, done.stderr
    # Replicas and etcd members are gone with the rest (their command lines hold the tag).
    assert leftovers(tag) == []
    assert not run_dir.exists()


@pytest.mark.lab
@NO_ETCD
def test_clean_removes_a_killed_labs_etcd_members() -> None:
    """What the reaper runs after a lab killed outright: its etcd members (data under
    /tmp/rfl<tag>/) are found by their command line and stopped, with the run's logs."""
    tag = new_tag()
    cluster = EtcdCluster(1, Path("/tmp", tag, "etcd"))
    with cluster:
        pid = cluster.pids()[0]
        assert any(f"process {pid}" == line for line in clean(tag))
        assert leftovers(tag) == []
    assert not Path("/tmp", tag).exists()
