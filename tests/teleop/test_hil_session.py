"""A scripted HIL session over loopback against a simulated robot host process: the stored
episodes' `is_intervention` spans are exactly the virtual operator's takeover spans, the
takeovers happen mid-episode without a reset, and save / success / discard / re-record
keys do what they say. (bench/hil_session.py runs the 5-minute version.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hil_fixtures import Keys
from hil_procs import free_port_pair, start_host, stop

from unilab.data import EpisodeStore
from unilab.teleop.devices import DISCARD, RERECORD, SUCCESS
from unilab.teleop.link import ClientLink
from unilab.teleop.policy_runner import load_hil_policy
from unilab.teleop.recording import spans_of
from unilab.teleop.station import OperatorStation
from unilab.teleop.virtual_operator import VirtualOperator

EPISODE_FRAMES = 100  # arm_reach at 50 Hz with episode_length_s=2


def run_session(
    keys: Keys, policy: Path, store: Path, tmp: Path, duration_s: float, seed: int, *host_args: str
) -> tuple[dict, VirtualOperator]:  # type: ignore[type-arg]
    endpoint = f"tcp://127.0.0.1:{free_port_pair()}"
    host = start_host(
        keys.root, keys.allow, endpoint, tmp, "--task", "episode_length_s=2", *host_args
    )
    script = {(1, 50): SUCCESS, (2, 40): DISCARD, (3, 30): RERECORD}
    operator = VirtualOperator(seed, horizon=EPISODE_FRAMES, script=script)
    link = ClientLink(
        endpoint, secret_key=keys.secret("alice"), server_key=keys.public("robot"), sender="station"
    )
    station = OperatorStation(
        link,
        policy=load_hil_policy(policy),
        device=operator,
        store=store,
        operator="alice",
        auto_resume=True,
    )
    try:
        station.connect()
        report = station.run(duration_s=duration_s)
    finally:
        link.close()
        stop(host)
    return report.to_dict(), operator


def check_session(store_path: Path, report: dict, operator: VirtualOperator) -> dict:  # type: ignore[type-arg]
    """Assert the recording against the operator's independent schedule; return counts."""
    pressed = {(ep, ev) for ep, _, ev in operator.pressed}
    dropped = {ep for ep, ev in pressed if ev in (DISCARD, RERECORD)}
    with EpisodeStore.open(store_path) as store:
        assert len(store) == report["episodes_saved"] >= 5
        seen, frames, spans, full = [], 0, 0, 0
        for i in range(len(store)):
            meta = store.meta(i)
            ep = store.episode(
                i, ["is_intervention", "operator", "origin", "terminated", "truncated"]
            )
            se = int(meta.tags["session_episode"])
            labels = ep["is_intervention"]
            expected = operator.expected_labels(se, len(labels))
            assert np.array_equal(labels, expected), (se, spans_of(labels), operator.spans(se))
            assert meta.tags["interventions"] == spans_of(expected)
            assert np.array_equal(ep["operator"], np.where(labels, 1, 0))
            assert set(meta.tags["operators"]) <= {"alice"}
            assert (ep["origin"] == 0).all()  # sim
            assert se not in dropped
            end = meta.tags["end"]
            if end == "time_limit":  # ran to the time limit through its takeovers: no reset
                assert len(labels) == EPISODE_FRAMES and ep["truncated"][-1]
                full += 1
            if (se, SUCCESS) in pressed:
                assert end == "saved" and meta.success is True and ep["terminated"][-1]
                assert len(labels) == 50
            seen.append(se)
            frames += len(labels)
            spans += len(spans_of(labels))
        assert seen == sorted(seen) and len(seen) == len(set(seen))
        assert full >= 2 and spans >= 4
    return {"episodes": len(seen), "frames": frames, "spans": spans, "full_length": full}


def test_scripted_session_labels_match_takeover_spans(
    keys: Keys, demo_policy: Path, tmp_path: Path
) -> None:
    store = tmp_path / "hil.zarr"
    # Ten-period watchdog: a busy 2-core CI box may stall a process for > 60 ms; the
    # 3-period watchdog has its own test (test_link_loss) and the bench uses it.
    report, operator = run_session(
        keys, demo_policy, store, tmp_path, 20.0, 3, "--watchdog-periods", "10"
    )
    counts = check_session(store, report, operator)
    assert report["takeovers"] >= counts["spans"]
    assert (1, SUCCESS) in {(ep, ev) for ep, _, ev in operator.pressed}
    assert report["episodes_discarded"] == 2 and report["rerecords"] == 1
    assert report["frames_saved"] == counts["frames"]
    assert report["host_rejects"].get("too_fast", 0) == 0  # the station shapes its commands
