"""`unilab.data.collect`: scripted-expert episodes from worker processes into a store that
validates, with seed, mode and instruction recorded; resumable without duplicate seeds;
failed episodes dropped unless kept; every episode replays from its seed; the ring limit is
enforced before anything is written; memory stays flat over a collection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from unilab.config import compose
from unilab.config.errors import ConfigError
from unilab.data import EpisodeStore, SchemaMismatchError, validate
from unilab.data.collect import MODE_FIELD, collect
from unilab.data.replay import replay_episode
from unilab.tasks.experts import EXPERTS
from unilab.tasks.instructions import Vocabulary

TASK = "arm_pick_place"


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("collect") / "demos.zarr"
    result = collect(store, TASK, episodes=5, workers=2, envs_per_worker=3, quiet=True)
    assert result.kept == 5 and result.existing == 0 and not result.interrupted
    assert result.attempted >= 5 and result.succeeded >= 5
    assert result.frames > 0 and result.steady["images_per_cpu_s"] > 0
    return store


def test_collected_episodes_carry_seed_mode_and_instruction(demos: Path) -> None:
    assert validate(demos) == []
    vocab = Vocabulary()
    with EpisodeStore.open(demos, "r") as store:
        assert len(store) == 5
        assert set(store.schema.user_fields) == {
            "obs/policy", "obs/critic", "obs/instruction", "images/front", "images/wrist",
            "action", MODE_FIELD,
        }  # fmt: skip
        assert store.schema.fields["images/front"].shape == (64, 64, 3)
        metas = store.all_meta()
        assert len({m.seed for m in metas}) == 5
        names = EXPERTS.get(TASK).mode_names
        for k, meta in enumerate(metas):
            frames = store.episode(k)
            assert meta.task == TASK and meta.success is True and meta.fps == 20.0
            assert frames["terminated"][-1] and not frames["truncated"].any()  # solved
            assert (frames[MODE_FIELD] == meta.tags["mode"]).all()
            assert meta.tags["mode_name"] == names[meta.tags["mode"]]
            # The instruction's token ids decode to the episode's instruction text.
            assert set(vocab.decode(frames["obs/instruction"])) == {meta.language_instruction}
            images = frames["images/front"]
            assert images.dtype == np.uint8 and np.ptp(images[0]) > 50  # a lit scene


def test_an_episode_replays_from_its_seed(demos: Path) -> None:
    with EpisodeStore.open(demos, "r") as store:
        metas = store.all_meta()
        for k in (0, 3):  # collected in some worker's env slot; replayed in a 1-env task
            stored = store.episode(k)
            again = replay_episode(TASK, int(metas[k].seed or 0))
            for name in (
                "action",
                "obs/policy",
                "obs/critic",
                "obs/instruction",
                MODE_FIELD,
                "reward",
            ):
                np.testing.assert_array_equal(again[name], stored[name], err_msg=name)
            # Pixels: the same state draws the same bytes in the same tile of the shared
            # framebuffer; in another tile a few edge pixels round the other way (llvmpipe).
            for cam in ("images/front", "images/wrist"):
                assert (again[cam] == stored[cam]).mean() > 0.99


def test_resume_continues_seeds_and_stops_at_the_target(tmp_path: Path) -> None:
    store = tmp_path / "resume.zarr"
    first = collect(store, "arm_move_side", episodes=2, workers=1, envs_per_worker=2, quiet=True)
    again = collect(store, "arm_move_side", episodes=4, workers=1, envs_per_worker=2, quiet=True)
    done = collect(store, "arm_move_side", episodes=4, workers=1, envs_per_worker=2, quiet=True)
    assert (first.kept, again.existing, again.kept, done.kept) == (2, 2, 2, 0)
    assert "nothing to collect" in done.notes[0]
    with EpisodeStore.open(store, "r") as st:
        seeds = [m.seed for m in st.all_meta()]
    assert len(seeds) == len(set(seeds)) == 4
    assert min(seeds[2:]) > max(seeds[:2]) and again.seed_start == max(seeds[:2]) + 1  # type: ignore[type-var,operator]


def test_failed_episodes_are_dropped_unless_kept(tmp_path: Path) -> None:
    # Half a second is too short for any grasp: every episode times out unsolved.
    short = compose([f"task={TASK}", "task.episode_length_s=0.5", "task.cameras=[front]"]).task
    kept = collect(
        tmp_path / "k.zarr", short, 3, workers=1, envs_per_worker=2, keep_failed=True, quiet=True
    )
    assert kept.kept == 3 and kept.succeeded == 0
    with EpisodeStore.open(tmp_path / "k.zarr", "r") as st:
        assert [m.success for m in st.all_meta()] == [False] * 3
        assert all(len(st.episode(k)["reward"]) == 10 for k in range(3))
        assert "images/wrist" not in st.schema.fields  # only the observed cameras
    dropped = collect(
        tmp_path / "d.zarr", short, 3, workers=1, envs_per_worker=2, max_attempts=4, quiet=True
    )
    assert dropped.kept == 0 and dropped.gave_up and dropped.attempted >= 4
    assert "max_attempts" in dropped.notes[-1]


def test_the_ring_limit_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ring buffer .* MiB.*exceeds max_ring_mb=1"):
        collect(tmp_path / "none.zarr", TASK, 2, workers=2, envs_per_worker=16, max_ring_mb=1)
    assert not (tmp_path / "none.zarr").exists()


def test_resident_memory_stays_flat_over_a_collection(tmp_path: Path) -> None:
    """The short version of bench/render.py's 100k-frame check (`rss` in render.json)."""
    result = collect(
        tmp_path / "rss.zarr", "arm_stack", 48, workers=1, envs_per_worker=8, quiet=True,
        rss_every_s=0.1, commit_frames=256,
    )  # fmt: skip
    samples = [s for s in result.rss if s["env_steps"] > 0]
    assert result.frames > 3000 and len(samples) >= 10
    with EpisodeStore.open(tmp_path / "rss.zarr", "r") as store:  # committed in groups
        assert result.kept == len(store) == len(set(result.episode_ids)) == 48
        assert result.frames == store.num_frames
    # After the first episodes (buffers allocated and touched) memory only moves with the
    # episodes waiting for a commit: the later half peaks no higher than the earlier half.
    warm = samples[len(samples) // 3 :]
    early, late = warm[: len(warm) // 2], warm[len(warm) // 2 :]
    for key in ("main_mib", "workers_mib"):
        growth = max(s[key] for s in late) - max(s[key] for s in early)
        assert growth < 16.0, (key, [round(s[key]) for s in samples])


def test_perturbed_collection_records_clean_actions_and_replays(tmp_path: Path) -> None:
    """action_noise: the executed actions carry bursts, the store keeps the expert's clean
    actions and a `perturbed` column, the episode's tag names the noise, and the episode
    replays from its seed with that noise."""
    from unilab.data.collect import PERTURBED_FIELD

    store = tmp_path / "dart.zarr"
    cfg = compose(["task=arm_move_side", "task.cameras=[]"]).task
    result = collect(
        store, cfg, episodes=3, workers=1, envs_per_worker=3, action_noise=0.5, quiet=True
    )
    assert result.kept == 3
    assert validate(store) == []
    with EpisodeStore.open(store, "r") as st:
        assert PERTURBED_FIELD in st.schema.user_fields
        metas = st.all_meta()
        flags = np.concatenate([st.episode(k)[PERTURBED_FIELD] for k in range(3)])
        assert 0.02 < flags.mean() < 0.5
        meta, frames = metas[0], st.episode(0)
    assert meta.tags["action_noise"] == 0.5
    again = replay_episode(cfg, int(meta.seed or 0), action_noise=0.5)
    for name in ("action", "obs/policy", PERTURBED_FIELD):
        np.testing.assert_array_equal(again[name], frames[name], err_msg=name)
    clean = replay_episode(cfg, int(meta.seed or 0))
    assert PERTURBED_FIELD not in clean
    assert len(clean["action"]) != len(frames["action"]) or not np.array_equal(
        clean["obs/policy"], frames["obs/policy"]
    )
    # A perturbed collection cannot append to a clean store (the schemas differ).
    with pytest.raises(SchemaMismatchError, match="perturbed"):
        collect(store, cfg, episodes=4, workers=1, envs_per_worker=1, quiet=True)
    with pytest.raises(ConfigError, match="action_noise"):
        collect(tmp_path / "bad.zarr", cfg, episodes=1, action_noise=-0.1, quiet=True)


def test_mode_shares_reach_the_workers_and_the_episode_tags(tmp_path: Path) -> None:
    """mode_shares=carry:1 makes every episode a carry, tags the probabilities, and the
    episode replays from its seed with them; a mode the expert lacks is refused by name."""
    store = tmp_path / "carry.zarr"
    cfg = compose(["task=arm_move_side", "task.cameras=[]"]).task
    result = collect(
        store, cfg, episodes=3, workers=1, envs_per_worker=3, mode_shares={"carry": 1.0},
        quiet=True,
    )  # fmt: skip
    assert result.kept == 3
    with EpisodeStore.open(store, "r") as st:
        metas = st.all_meta()
        frames = st.episode(0)
    assert [m.tags["mode_name"] for m in metas] == ["carry"] * 3
    assert metas[0].tags["mode_probs"] == [0.0, 1.0]
    again = replay_episode(cfg, int(metas[0].seed or 0), mode_probs=metas[0].tags["mode_probs"])
    np.testing.assert_array_equal(again["action"], frames["action"])
    with pytest.raises(ConfigError, match="its modes: push, carry"):
        collect(tmp_path / "bad.zarr", cfg, episodes=1, mode_shares={"lift": 1.0}, quiet=True)
    assert not (tmp_path / "bad.zarr").exists()


def test_throughput_covers_the_whole_run_when_it_ends_before_every_worker_delivered() -> None:
    from unilab.data.throughput_meter import ThroughputMeter

    meter = ThroughputMeter(cameras=2, rss_every_s=60.0)
    meter.open([None], 0)  # one worker delivered; the other never did
    sum(i * i for i in range(200_000))  # some CPU time in the window
    meter.stop([None], 120)
    steady = meter.steady()
    assert steady["whole_run"] == 1.0 and steady["env_steps"] == 120
    assert steady["images_per_cpu_s"] == pytest.approx(240 / steady["cpu_s"])
    # Once every worker delivered, the steady window is the one reported.
    meter.start([None], 40)
    sum(i * i for i in range(200_000))
    meter.stop([None], 120)
    steady = meter.steady()
    assert steady["whole_run"] == 0.0 and steady["env_steps"] == 80
