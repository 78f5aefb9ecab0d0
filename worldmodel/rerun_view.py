"""Generated and real frames side by side in Rerun: `unilab wm eval ... --rrd PATH`.

Entities `wm/model/<camera>` and `wm/real/<camera>` on the `step` timeline (control steps
after the window's start), so the viewer shows the two streams next to each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

APPLICATION_ID = "unilab_wm"


def write_side_by_side(
    path: Path,
    steps: list[int],
    model: Mapping[str, np.ndarray],
    real: Mapping[str, np.ndarray],
) -> Path:
    """model/real: camera -> (len(steps), S, S, 3) uint8 frames at those steps."""
    import rerun as rr  # only this view needs rerun-sdk

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = rr.RecordingStream(APPLICATION_ID)
    rec.save(str(path))
    for i, step in enumerate(steps):
        rec.set_time("step", sequence=int(step))
        for who, frames in (("model", model), ("real", real)):
            for cam, images in frames.items():
                rec.log(f"wm/{who}/{cam}", rr.Image(images[i], color_model="RGB"))
    rec.flush()
    rec.disconnect()
    return path
