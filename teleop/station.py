"""`unilab hil run`: the operator station. It connects to a robot host, runs the policy,
reads the teleop device, switches control between them (takeover / hand-back mid-episode,
no reset), records every frame with who was in control, and shows it live in Rerun.

Per status tick: feed the status to the recorder (which pairs it with the previous one
into a frame), read the device, handle its events, compute the action from the policy or
the operator, shape it to what the host's safety filter accepts (limits, max step from
the host's current target), and send it answering that tick. When statuses queue up (the
station was slow), all are recorded but only the newest is answered.

    unilab hil run --robot sim:arm_reach --policy runs/arm_reach/ppo/... \\
        --key keys/private/op.key_secret --server-key keys/public/robot.key \\
        --device keyboard --store data/hil.zarr --rerun spawn
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from unilab.teleop.devices import (
    DISCARD,
    QUIT,
    RERECORD,
    SAVE,
    STOP,
    SUCCESS,
    TAKEOVER,
    ActionSpace,
    DeviceUnavailableError,
    TeleopDevice,
    make_device,
)
from unilab.teleop.link import IMAGE_PREFIX, ClientLink, LinkError, StatusSubscriber
from unilab.teleop.policy_runner import HilPolicy, PolicyMismatchError, load_hil_policy
from unilab.teleop.protocol import Message
from unilab.teleop.recording import InterventionRecorder

SILENCE_S = 2.0
"""No status for this long: the robot host is gone; the session ends with an error."""


@dataclass
class SessionReport:
    statuses: int = 0
    commands: int = 0
    takeovers: int = 0
    episodes_saved: int = 0
    episodes_discarded: int = 0
    rerecords: int = 0
    frames_saved: int = 0
    held_frames: int = 0
    gaps: int = 0
    late_starts: int = 0
    """Episodes recorded from after their first state (see RecordingStats.late_starts)."""
    command_gap_p99_ms: float = 0.0
    """Time between consecutive commands sent (the control period when all is well)."""
    command_gap_max_ms: float = 0.0
    unanswered: int = 0
    """Statuses recorded but not answered because a newer one was already waiting."""
    host_rejects: dict[str, int] = field(default_factory=dict)
    host_late_ticks: int = 0
    safe_stops: int = 0
    stop_reasons: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    saved_ids: list[int] = field(default_factory=list)
    session_episodes: list[int] = field(default_factory=list)
    end: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class OperatorStation:
    def __init__(
        self,
        link: ClientLink,
        *,
        policy: HilPolicy | None,
        device: TeleopDevice | None,
        store: str | os.PathLike[str] | None,
        operator: str,
        origin: str = "sim",
        live_view: Any = None,
        auto_resume: bool = False,
        instruction: str | None = None,
    ) -> None:
        self.link = link
        self.policy = policy
        self.device = device
        self.store_path = store
        self.operator = operator
        self.origin = origin
        self.live_view = live_view
        self.auto_resume = auto_resume
        self.instruction = instruction
        """The operator's instruction for a language policy (None: the robot host's, which
        a simulated task sends per episode)."""
        self.human = policy is None
        self.report = SessionReport()
        self.recorder: InterventionRecorder | None = None
        self.space: ActionSpace | None = None
        self.sub: StatusSubscriber | None = None
        self._stopped_by_us = False
        self._last_mode = ""
        self._last_status: Message | None = None
        self._last_command_at: float | None = None
        self._gaps: list[float] = []
        self._frames: dict[str, np.ndarray] = {}
        """Newest frame of each camera (`images/<cam>`): hosts send them every few ticks."""
        self._host_episode: int | None = None

    # ------------------------------------------------------------------ setup
    def connect(self, timeout_s: float = 10.0) -> Message:
        welcome = self.link.hello(self.operator, timeout_s=timeout_s)
        robot = welcome.robot
        self.space = ActionSpace.from_welcome(robot)
        if self.policy is not None:
            self.policy.check_robot(robot)
        if self.device is not None:
            self.device.connect(self.space)
        if self.store_path is not None:
            self.recorder = InterventionRecorder(
                self.store_path, robot=robot, origin=self.origin, task=str(robot.get("driver", ""))
            )
            self.recorder.instruction = self.instruction
        self.sub = self.link.subscribe()
        first = self.sub.recv(timeout_s)
        if first is None:
            raise LinkError(
                "the robot host's status stream is silent (no status within "
                f"{timeout_s:g} s after the welcome)"
            )
        if self.policy is not None:
            self.policy.check_instruction(self._instruction_of(first))
        return first

    def _instruction_of(self, status: Message) -> str | None:
        text = status.body.get("instruction")
        return self.instruction or (str(text) if text else None)

    def _resume(self) -> None:
        ack = self.link.control("resume", operator=self.operator)
        if not ack.body.get("ok"):
            raise LinkError(f"robot host refused control: {ack.body.get('detail')}")
        self._stopped_by_us = False

    def _new_episode(self) -> None:
        self.human = self.policy is None
        if self.policy is not None:
            self.policy.reset()
        begin = getattr(self.device, "begin_episode", None)
        if begin is not None and self.recorder is not None:
            begin(self.recorder.session_episode)

    # ------------------------------------------------------------------ the loop
    def run(
        self, *, max_episodes: int | None = None, duration_s: float | None = None
    ) -> SessionReport:
        assert self.sub is not None and self.space is not None, "connect() first"
        sub = self.sub
        self._resume()
        # Start from a fresh episode (a real robot's reset is the person at the robot).
        self._reset()
        start = time.monotonic()
        last_seen = start
        try:
            while True:
                now = time.monotonic()
                if duration_s is not None and now - start >= duration_s:
                    self.report.end = "duration"
                    break
                first = sub.recv(0.5)
                if first is None:
                    if time.monotonic() - last_seen > SILENCE_S:
                        raise LinkError(f"no status from the robot host for {SILENCE_S:g} s")
                    continue
                last_seen = time.monotonic()
                batch = [first]
                while sub.sock.poll(0):
                    msg = sub.recv_ready()
                    if msg is not None:
                        batch.append(msg)
                for msg in batch:
                    self._record(msg)
                self.report.unanswered += len(batch) - 1
                status = batch[-1]
                if not self._answer(status):
                    break
                if max_episodes is not None and self.report_saved() >= max_episodes:
                    self.report.end = "episodes"
                    break
        finally:
            self._finish(start)
        return self.report

    def report_saved(self) -> int:
        return self.recorder.stats.episodes_saved if self.recorder is not None else 0

    def _record(self, msg: Message) -> None:
        self.report.statuses += 1
        if self.recorder is not None and self.recorder.on_status(msg) in ("ended", "cut"):
            self._new_episode()
        mode = msg.body["mode"]
        self._last_status = msg
        if self._last_mode == "running" and mode != "running":
            self.report.safe_stops += 1
            self.report.stop_reasons.append(str(msg.body.get("stop_reason", "")))
            if self.auto_resume and not self._stopped_by_us:
                self._resume()
                self._new_episode()
        self._last_mode = mode

    def _answer(self, status: Message) -> bool:
        """Decide and send the command answering `status`; False ends the session."""
        assert self.space is not None
        body = status.body
        if body["mode"] != "running":
            return True
        obs = {k[4:]: v for k, v in status.arrays.items() if k.startswith("obs/")}
        self._frames.update((k, v) for k, v in status.arrays.items() if k.startswith(IMAGE_PREFIX))
        episode = int(body["episode"])
        if episode != self._host_episode:  # a new host episode: no chunk carries over
            if self.policy is not None and self._host_episode is not None:
                self.policy.reset()
            self._host_episode = episode
        target = np.asarray(status.arrays["target"], np.float32)
        frame = (
            self.recorder.frame_index if self.recorder is not None else int(body["episode_step"])
        )
        dt = float(self.link.welcome.robot["control_dt"]) if self.link.welcome else 0.02
        inp = self.device.poll(frame, obs, dt) if self.device is not None else None
        toggled = False
        for event in inp.events if inp is not None else []:
            if event == TAKEOVER:
                self.human = not self.human or self.policy is None
                toggled = True
                self.report.takeovers += int(self.human)
                if self.human and self.device is not None:
                    self.device.start(target)
                if self.policy is not None:
                    self.policy.reset()
            elif event in (SAVE, SUCCESS, DISCARD, RERECORD):
                self._episode_key(event)
                return True
            elif event == STOP:
                self.link.control("stop")
                self._stopped_by_us = True
                return True
            elif event == QUIT:
                self.report.end = "quit"
                return False
        success = None
        if self.human:
            # The takeover tick holds the current target: the device starts from there.
            action = target if (toggled or inp is None or inp.action is None) else inp.action
            source = "human"
        else:
            assert self.policy is not None
            seen = {**obs, **self._frames}
            if self.policy.missing(seen):  # no frame of a camera yet: hold where it is
                action, source = target, "policy"
            else:
                step = self.policy(seen, self._instruction_of(status))
                action, success, source = step.action, step.predicted_success, "policy"
        command = self.space.shape(action, target)
        info = {"predicted_success": success} if success is not None else None
        seq = self.link.command(
            command, source=source, operator=self.operator, answers=int(body["tick"]), info=info
        )
        if self.recorder is not None:
            self.recorder.note_command(int(body["tick"]), seq, command, source, self.operator)
        self.report.commands += 1
        now = time.monotonic()
        if self._last_command_at is not None:
            self._gaps.append(now - self._last_command_at)
        self._last_command_at = now
        if self.live_view is not None:
            self.live_view.log(int(body["tick"]), body, status.arrays, command, self.human, success)
        return True

    def _episode_key(self, event: str) -> None:
        if self.recorder is not None:
            if event in (SAVE, SUCCESS):
                self.recorder.save(success=True if event == SUCCESS else None)
            else:
                self.recorder.discard()
                self.report.rerecords += int(event == RERECORD)
        self._reset()

    def _reset(self) -> None:
        ack = self.link.control("reset")
        if self.recorder is not None:
            self.recorder.skip_until_episode(int(ack.body.get("episode", 0)))
        self._new_episode()

    def _finish(self, start: float) -> None:
        with contextlib.suppress(LinkError):
            self.link.control("release", timeout_s=2.0)
        r = self.report
        r.duration_s = time.monotonic() - start
        if self._gaps:
            r.command_gap_p99_ms = float(np.percentile(self._gaps, 99) * 1e3)
            r.command_gap_max_ms = float(np.max(self._gaps) * 1e3)
        if self._last_status is not None:
            r.host_rejects = dict(self._last_status.body.get("rejects", {}))
            r.host_late_ticks = int(self._last_status.body.get("late_ticks", 0))
        if self.recorder is not None:
            st = self.recorder.stats
            r.episodes_saved, r.episodes_discarded = st.episodes_saved, st.episodes_discarded
            r.frames_saved, r.held_frames, r.gaps = st.frames_saved, st.held_frames, st.gaps
            r.late_starts = st.late_starts
            r.saved_ids, r.session_episodes = list(st.saved_ids), list(st.session_episodes)
            self.recorder.close()
        if self.device is not None:
            self.device.close()
        if self.live_view is not None:
            self.live_view.close()


# ---------------------------------------------------------------------- entry points
def run_hil(
    *,
    robot: str,
    policy: str | None,
    key: str,
    server_key: str,
    endpoint: str = "tcp://127.0.0.1:5555",
    device: str = "keyboard",
    store: str | None = None,
    operator: str = "operator",
    rerun: str | None = None,
    max_episodes: int | None = None,
    duration_s: float | None = None,
    start_host: bool = False,
    host_key: str | None = None,
    allow: str | None = None,
    host_args: list[str] | None = None,
    auto_resume: bool = False,
    seed: int = 0,
    instruction: str | None = None,
) -> SessionReport:
    """A HIL session against the robot host at `endpoint` (started here as a child process
    with `start_host=True` for `sim:` robots)."""
    host_proc = None
    hil_policy = load_hil_policy(policy, seed=seed) if policy else None
    host_args = list(host_args or [])
    if start_host and hil_policy is not None:  # stream the cameras the policy reads
        for cam in hil_policy.cameras:
            if cam not in host_args:
                host_args += ["--camera", cam]
        if hil_policy.cameras and "--camera-every" not in host_args:
            host_args += ["--camera-every", "1"]  # a VLA plans on the newest frames
    if start_host:
        if not (host_key and allow):
            raise LinkError("starting a robot host needs --host-key and --allow")
        host_proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "unilab.teleop.robot_host",
                "--robot",
                robot,
                "--key",
                host_key,
                "--allow",
                allow,
                "--endpoint",
                endpoint,
                *host_args,
            ],
        )
    link = ClientLink(endpoint, secret_key=key, server_key=server_key, sender=f"station-{operator}")
    dev = make_device(device, seed=seed) if device else None
    view = None
    if rerun:
        from unilab.teleop.live_view import LiveView

        view = LiveView(rerun)
    origin = "sim" if robot.startswith("sim:") else "real"
    station = OperatorStation(
        link,
        policy=hil_policy,
        device=dev,
        store=store,
        operator=operator,
        origin=origin,
        live_view=view,
        auto_resume=auto_resume,
        instruction=instruction,
    )
    try:
        station.connect(timeout_s=30.0 if start_host else 10.0)
        return station.run(max_episodes=max_episodes, duration_s=duration_s)
    finally:
        link.close()
        if host_proc is not None:
            host_proc.terminate()
            host_proc.wait(timeout=10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unilab hil run",
        description="Operator station: run a policy on a robot host, take over with a teleop "
        "device (space toggles on the keyboard), record episodes with per-frame "
        "is_intervention labels into an episode store, view it live in Rerun.",
    )
    p.add_argument(
        "--robot",
        required=True,
        help="sim:<task> or lerobot:<type>:<port> (names the robot host's robot)",
    )
    p.add_argument(
        "--policy", default=None, help="run directory or policy.onnx (none: teleop only)"
    )
    p.add_argument("--key", required=True, help="this station's secret key file")
    p.add_argument("--server-key", required=True, help="the robot host's public key file")
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="robot host command endpoint")
    p.add_argument(
        "--device",
        default="keyboard",
        help="keyboard, gamepad, spacemouse, leader:<type>:<port>, virtual[:seed]",
    )
    p.add_argument("--store", default=None, help="episode store to append to (created if absent)")
    p.add_argument(
        "--operator",
        default=os.environ.get("USER", "operator"),
        help="operator id recorded per frame",
    )
    p.add_argument("--rerun", default=None, help="'spawn' for a live viewer, or a path.rrd")
    p.add_argument("--episodes", type=int, default=None, help="stop after N saved episodes")
    p.add_argument("--duration", type=float, default=None, help="stop after N seconds")
    p.add_argument(
        "--start-host", action="store_true", help="start a robot host for a sim: robot here"
    )
    p.add_argument("--host-key", default=None, help="with --start-host: the host's secret key file")
    p.add_argument(
        "--host-args",
        default="",
        help='with --start-host: more robot-host options, e.g. --host-args="--task '
        'episode_length_s=4 --watchdog-periods 5"',
    )
    p.add_argument(
        "--allow", default=None, help="with --start-host: the host's allowlist directory"
    )
    p.add_argument(
        "--auto-resume", action="store_true", help="resume after a safe stop without a key press"
    )
    p.add_argument(
        "--instruction",
        default=None,
        help="the language instruction for a VLA policy (default: the one a simulated task "
        "sends per episode; a real robot needs it)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the virtual operator and a VLA's noise"
    )
    p.add_argument("--report", default=None, help="write the session report (JSON) here")
    return p


def main(argv: list[str] | None = None) -> int:
    import json

    from unilab.teleop.keys import KeyFileError

    args = build_parser().parse_args(argv)
    try:
        report = run_hil(
            robot=args.robot,
            policy=args.policy,
            key=args.key,
            server_key=args.server_key,
            endpoint=args.endpoint,
            device=args.device,
            store=args.store,
            operator=args.operator,
            rerun=args.rerun,
            max_episodes=args.episodes,
            duration_s=args.duration,
            start_host=args.start_host,
            host_key=args.host_key,
            allow=args.allow,
            auto_resume=args.auto_resume,
            seed=args.seed,
            instruction=args.instruction,
            host_args=shlex.split(args.host_args),
        )
    except (LinkError, KeyFileError, DeviceUnavailableError, PolicyMismatchError) as exc:
        print(f"unilab hil run: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__name__ in ("LeRobotUnavailableError", "MetadataError"):
            print(f"unilab hil run: error: {exc}", file=sys.stderr)
            return 2
        raise
    text = json.dumps(report.to_dict(), indent=2)
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
