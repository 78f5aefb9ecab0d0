"""Supervisor with real worker processes: kills, hangs, exceptions, shutdown."""

from __future__ import annotations

import collections
import logging
import os
import random
import signal
import time
from pathlib import Path

import pytest
from runtime_procs import lingering_worker

from unilab.runtime.ring import RingBuffer
from unilab.runtime.shm import list_segments
from unilab.runtime.supervisor import Supervisor, WorkerEvent, WorkerFailure
from unilab.runtime.synthetic import check_chunk, synthetic_spec, synthetic_worker_main


def process_gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie nobody has reaped yet)."""
    status = Path(f"/proc/{pid}/status")
    try:
        text = status.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in text


class Learner:
    """A minimal learner loop: poll, read, verify, release."""

    def __init__(self, ring: RingBuffer, sup: Supervisor) -> None:
        self.ring, self.sup = ring, sup
        self.keys: list[tuple[int, int, int]] = []  # (worker, generation, seq)
        self.problems: list[str] = []
        self.events: list[WorkerEvent] = []

    def step(self, timeout: float = 0.02) -> None:
        self.events += self.sup.poll()
        for slot in self.ring.get_ready(timeout):
            header = self.ring.header(slot)
            self.problems += check_chunk(header, self.ring.views(slot))
            self.keys.append((header.worker_id, header.generation, header.seq))
            self.ring.release(slot)

    def run_until(self, condition: object, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while not condition():  # type: ignore[operator]
            assert time.monotonic() < deadline, "condition not reached in time"
            self.step()

    def check_streams(self) -> None:
        assert self.problems == []
        assert len(self.keys) == len(set(self.keys)), "a chunk arrived twice"
        streams: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        for worker, generation, seq in self.keys:
            streams[worker, generation].append(seq)
        for stream, seqs in streams.items():
            assert seqs == list(range(len(seqs))), f"{stream} out of order or gapped: {seqs}"


def make(num_workers: int, *, config: dict | None = None, **kwargs: float | None) -> Learner:
    ring = RingBuffer(synthetic_spec(), num_workers, 3, chunk_len=8, slots_per_worker=2,
                      debug_poison=True)  # fmt: skip
    sup = Supervisor(synthetic_worker_main, num_workers, ring=ring,
                     config=config or {"step_sleep_s": 0.002}, **kwargs)  # fmt: skip
    return Learner(ring, sup)


def all_running(learner: Learner) -> bool:
    return all(learner.sup.worker_running(w) for w in range(learner.sup.num_workers))


def test_random_sigkills_lose_nothing_published() -> None:
    # (Kills land at random, sometimes thrice on one worker before its first chunk: the
    # repeated-failure rule, tested in test_liveness.py, is off here.)
    learner = make(3, hang_timeout_s=5.0, max_restarts=25, max_failures_without_progress=None)
    sup, rng = learner.sup, random.Random(1234)
    kills, killed_pids = 0, set()
    with sup:
        learner.run_until(lambda: all_running(learner), 30)
        next_kill = time.monotonic() + rng.uniform(0.05, 0.3)
        deadline = time.monotonic() + 60
        while kills < 20:
            assert time.monotonic() < deadline, f"only {kills} kills"
            learner.step()
            if time.monotonic() < next_kill:
                continue
            candidates = [w for w, pid in enumerate(sup.pids())
                          if pid not in killed_pids and sup.worker_running(w)]  # fmt: skip
            if candidates:
                pid = sup.pids()[rng.choice(candidates)]
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                killed_pids.add(pid)
                kills += 1
                next_kill = time.monotonic() + rng.uniform(0.05, 0.3)
        learner.run_until(lambda: sup.stats()["deaths"] == 20 and all_running(learner), 30)
        received = len(learner.keys)
        learner.run_until(lambda: len(learner.keys) >= received + 10, 10)  # still flowing
        pids = [p for p in sup.pids() if p is not None]
    learner.check_streams()
    died = [e for e in learner.events if e.kind == "died"]
    assert len(died) == 20 and all(e.exitcode == -signal.SIGKILL and e.restarted for e in died)
    stats = sup.stats()
    assert (stats["deaths"], stats["restarts"], stats["hangs"]) == (20, 20, 0)
    assert stats["discarded_chunks"] == sum(e.discarded_chunks for e in died) >= 1
    assert stats["discarded_chunks"] == learner.ring.stats()["discarded_unpublished"]
    assert sum(sup.generations()) == 20
    assert all(process_gone(pid) for pid in set(pids) | killed_pids)
    assert list_segments(sup.owner.prefix) == []


def test_stopped_worker_is_detected_as_hung_and_replaced() -> None:
    learner = make(2, hang_timeout_s=1.0)
    sup = learner.sup
    with sup:
        learner.run_until(lambda: all_running(learner) and len(learner.keys) >= 4, 30)
        victim = sup.pids()[0]
        assert victim is not None
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        learner.run_until(lambda: any(e.kind == "hung" for e in learner.events), 10)
        detected_after = time.monotonic() - stopped_at
        learner.run_until(lambda: any(k[:2] == (0, 1) for k in learner.keys), 30)
    hung = [e for e in learner.events if e.kind == "hung"]
    assert [(e.worker_id, e.pid, e.restarted) for e in hung] == [(0, victim, True)]
    assert detected_after < 1.6, f"hang detected after {detected_after:.2f} s"
    print(f"SIGSTOP detected as hung after {detected_after:.2f} s")
    assert sup.stats()["hangs"] == 1 and sup.stats()["deaths"] == 0
    assert process_gone(victim)
    learner.check_streams()


def test_worker_exception_reaches_the_main_process(caplog: pytest.LogCaptureFixture) -> None:
    config = {"fail_worker": 1, "fail_generation": 0, "fail_at_seq": 2, "step_sleep_s": 0.001}
    learner = make(2, config=config)
    sup = learner.sup
    with caplog.at_level(logging.ERROR, logger="unilab.runtime"), sup:
        learner.run_until(lambda: {(0, 0), (1, 1)} <= {k[:2] for k in learner.keys}, 30)
    assert len(sup.errors) == 1
    text = sup.errors[0]
    assert text.startswith("worker 1 (generation 0, pid ")
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: synthetic failure in worker 1 at seq 2" in text
    assert any("synthetic failure" in r.getMessage() for r in caplog.records)
    kinds = [(e.kind, e.worker_id) for e in learner.events]
    assert ("error", 1) in kinds and ("died", 1) in kinds
    died = next(e for e in learner.events if e.kind == "died")
    assert died.exitcode == 1 and died.discarded_chunks == 1
    learner.check_streams()
    assert sorted({k[:2] for k in learner.keys}) == [(0, 0), (1, 0), (1, 1)]


def test_restart_budget_and_clean_idempotent_shutdown() -> None:
    config = {"fail_worker": 0, "fail_generation": 0, "fail_at_seq": 0}
    learner = make(1, config=config, max_restarts=0)
    sup = learner.sup
    sup.start()
    pid = sup.pids()[0]
    with pytest.raises(WorkerFailure, match="max_restarts=0"):
        learner.run_until(lambda: False, 30)
    sup.shutdown()
    sup.shutdown()
    assert pid is not None and process_gone(pid)
    assert list_segments(sup.owner.prefix) == []
    assert sup.poll() == []


def test_worker_that_returns_is_not_restarted() -> None:
    learner = make(2, config={"max_chunks": 3})
    with learner.sup:
        learner.run_until(lambda: learner.sup.stats()["exits"] == 2, 30)
        assert learner.sup.pids() == [None, None]
    assert sorted(learner.keys) == [(w, 0, s) for w in range(2) for s in range(3)]
    assert learner.sup.stats()["restarts"] == 0


def test_slow_exit_is_not_a_hang() -> None:
    sup = Supervisor(lingering_worker, 1, config={"linger_s": 1.2}, hang_timeout_s=0.3)
    events: list[WorkerEvent] = []
    with sup:
        deadline = time.monotonic() + 30
        while not events:
            assert time.monotonic() < deadline
            events += sup.poll()
            time.sleep(0.01)
    assert [(e.kind, e.exitcode, e.restarted) for e in events] == [("exited", 0, False)]


def test_config_must_be_plain() -> None:
    with pytest.raises(TypeError, match="worker config holds only"):
        Supervisor(synthetic_worker_main, 1, config={"obj": object()})
    with pytest.raises(ValueError, match="not importable"):
        Supervisor(lambda ctx: None, 1)
