"""Live Rerun view of a HIL session: camera frames, applied and commanded actions, who is in
control, reward, and the policy's predicted success when it has one.

`LiveView("spawn")` streams to a Rerun viewer it starts (needs a display); `LiveView(path)`
with a `.rrd` path writes a recording to open later with `rerun <file>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

APPLICATION_ID = "unilab_hil"


class LiveView:
    def __init__(self, target: str) -> None:
        import rerun as rr

        self.rr = rr
        self.rec = rr.RecordingStream(APPLICATION_ID)
        if target == "spawn":
            self.rec.spawn()
            self.path: Path | None = None
        else:
            self.path = Path(target)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.rec.save(str(self.path))
        self.frames = 0

    def log(
        self,
        tick: int,
        status: dict[str, Any],
        arrays: dict[str, np.ndarray],
        commanded: np.ndarray | None,
        human: bool,
        predicted_success: float | None,
    ) -> None:
        rr, rec = self.rr, self.rec
        rec.set_time("tick", sequence=tick)
        for key, value in arrays.items():
            if key.startswith("images/"):
                rec.log(f"cameras/{key[7:]}", rr.Image(np.asarray(value)))
        rec.log("action/applied", rr.Scalars(np.asarray(arrays["action"], np.float64)))
        if commanded is not None:
            rec.log("action/commanded", rr.Scalars(np.asarray(commanded, np.float64)))
        rec.log("control/human", rr.Scalars(float(human)))
        rec.log("reward", rr.Scalars(float(status.get("reward", 0.0))))
        if predicted_success is not None:
            rec.log("policy/predicted_success", rr.Scalars(float(predicted_success)))
        self.frames += 1

    def close(self) -> None:
        self.rec.flush()
        self.rec.disconnect()
