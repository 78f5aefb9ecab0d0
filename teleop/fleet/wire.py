"""What robot hosts and the fleet server say to each other, on the HIL protocol
(`unilab.teleop.protocol`, docs/decisions/0051-hil-wire-protocol.md): no second format.

    host -> server   hello    {role: "robot", robot: {...}, versions}
    server -> host   welcome  {schema, status_hz, thumb_fps}
    host -> server   status   fleet status body (below) [+ images/thumb]
    server -> host   control  {op: takeover | pause | reset | resume, operator, request}
    host -> server   ack      {op, ok, detail, request}
    server -> host   error    {reason: "no_hello"} (the host says hello again)

A thumbnail is a JPEG. The protocol's header refuses binary values (`max_bin_len=0`), so
the JPEG travels as the buffer frame `images/thumb`: uint8 of a fixed `THUMB_MAX_BYTES`
(the negotiated schema fixes shapes), zero-padded, with its length in `body.thumb_len`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unilab.teleop.protocol import ArraySpec

THUMB = "images/thumb"
THUMB_MAX_BYTES = 8192
"""A 64x48 JPEG at quality 70 is about 1.2 KB; 8 KiB leaves room for 160x120."""
FLEET_SCHEMA = {"status": {THUMB: ArraySpec("uint8", (THUMB_MAX_BYTES,))}}
FLEET_OPS = ("takeover", "pause", "reset", "resume")
MAX_FLEET_BYTES = 64 * 1024
"""Inbound limit on both ends of the fleet link (a status is a few KB)."""
STATUS_HZ = 10.0
THUMB_FPS = 2.0
ROBOT_ROLE = "robot"


def pack_thumb(jpeg: bytes) -> np.ndarray | None:
    """The JPEG zero-padded into the fixed-size frame; None when it does not fit."""
    if not 0 < len(jpeg) <= THUMB_MAX_BYTES:
        return None
    out = np.zeros(THUMB_MAX_BYTES, dtype=np.uint8)
    out[: len(jpeg)] = np.frombuffer(jpeg, dtype=np.uint8)
    return out


def unpack_thumb(frame: np.ndarray, length: Any) -> bytes | None:
    """The JPEG back out of a checked frame; None unless the length fits and the bytes
    start with a JPEG marker (the browser is only ever handed JPEG)."""
    if not isinstance(length, int) or isinstance(length, bool):
        return None
    if not 0 < length <= min(THUMB_MAX_BYTES, frame.shape[0]):
        return None
    data = frame[:length].tobytes()
    return data if data[:2] == b"\xff\xd8" else None


def encode_jpeg(image: np.ndarray, quality: int = 70) -> bytes | None:
    """RGB uint8 (H, W, 3) -> JPEG bytes (OpenCV is imported only when a camera exists)."""
    import cv2

    ok, buf = cv2.imencode(
        ".jpg", np.ascontiguousarray(image[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    )
    return buf.tobytes() if ok else None
