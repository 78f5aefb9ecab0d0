"""A scripted HIL session over loopback against a simulated robot host process: the stored
episodes' `is_intervention` spans are exactly the virtual operator's takeover spans, the
takeovers happen mid-episode without a reset, and save / success / discard / re-record
keys do what they say. (`unilab bench hil --part session` runs the 5-minute version.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hil_fixtures import Keys

from unilab.data import EpisodeStore
from unilab.teleop.devices import DISCARD, RERECORD, SUCCESS
from unilab.teleop.recording import spans_of
from unilab.teleop.session_tools import compare_labels, run_scripted_session

EPISODE_FRAMES = 100  # arm_reach at 50 Hz with episode_length_s=2
SCRIPT = {(1, 50): SUCCESS, (2, 40): DISCARD, (3, 30): RERECORD}


def test_scripted_session_labels_match_takeover_spans(
    keys: Keys, demo_policy: Path, tmp_path: Path
) -> None:
    store = tmp_path / "hil.zarr"
    # Ten-period watchdog: a busy 2-core CI box may stall a process for > 60 ms; the
    # 3-period watchdog has its own test (test_link_loss) and the bench runs with it.
    report, operator = run_scripted_session(
        keys,
        demo_policy,
        store,
        tmp_path,
        duration_s=20.0,
        seed=3,
        horizon=EPISODE_FRAMES,
        script=SCRIPT,
        host_args=("--task", "episode_length_s=2", "--watchdog-periods", "10"),
    )
    check = compare_labels(store, operator, EPISODE_FRAMES)
    assert check.exact, check  # labels == the takeovers performed, frame by frame
    # ... which are the scheduled ones, or a tick or two later where the station skipped one.
    assert len(check.off_schedule_episodes) <= 1, check
    for ep, frame, event in operator.pressed:
        if event == "takeover":
            scheduled = [f for span in operator.spans(ep) for f in span]
            assert any(0 <= frame - f <= 3 for f in scheduled), (ep, frame, scheduled)
    assert check.episodes == report["episodes_saved"] >= 5
    assert check.full_length >= 2 and check.spans >= 4
    assert report["takeovers"] >= check.spans
    assert report["frames_saved"] == check.frames
    pressed = {(ep, ev) for ep, _, ev in operator.pressed}
    assert {(1, SUCCESS), (2, DISCARD), (3, RERECORD)} <= pressed
    assert report["episodes_discarded"] == 2 and report["rerecords"] == 1
    assert report["host_rejects"].get("too_fast", 0) == 0  # the station shapes its commands
    with EpisodeStore.open(store) as st:
        sessions = [int(st.meta(i).tags["session_episode"]) for i in range(len(st))]
        assert sessions == sorted(set(sessions)) and not {2, 3} & set(sessions)
        for i in range(len(st)):
            meta = st.meta(i)
            ep = st.episode(i, ["is_intervention", "operator", "origin", "terminated", "truncated"])
            labels = ep["is_intervention"]
            assert meta.tags["interventions"] == spans_of(labels)
            assert np.array_equal(ep["operator"], np.where(labels, 1, 0))
            assert set(meta.tags["operators"]) <= {"alice"} and (ep["origin"] == 0).all()
            if meta.tags["end"] == "time_limit":  # ran through its takeovers: no reset
                assert ep["truncated"][-1]
                # Whole from where its recording began (the host's step index: 0 unless the
                # station joined mid-episode), unless a status gap cut it.
                first = int(meta.tags["first_step"])
                assert first + len(labels) == EPISODE_FRAMES or (
                    report["gaps"] > 0 and first + len(labels) < EPISODE_FRAMES
                ), (first, len(labels), report["gaps"])
            if int(meta.tags["session_episode"]) == 1:
                assert meta.tags["end"] == "saved" and meta.success is True
                assert len(labels) == 50 and ep["terminated"][-1]
