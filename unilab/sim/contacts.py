"""Per-env contact forces on chosen geoms, through MuJoCo contact sensors.

mujoco.batch cannot bind the contact list (it lives in the arena, whose size changes every
step), and cfrc_ext is only computed when some sensor needs it. A `contact` sensor per geom
is the cheap alternative: MuJoCo reduces that geom's contacts to one net force in C, and the
result arrives with sensordata, (num_envs, 4) per sensor: [number of contacts, fx, fy, fz].
Add the sensors to the robot's MjSpec before compiling, then read them with
`BatchedSim.sensor(name)`; a geom touches something when the first column is > 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco

# intprm of a contact sensor: (data fields bitmask, reduce mode, max contacts).
_FOUND_AND_FORCE = (1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)) | (
    1 << int(mujoco.mjtConDataField.mjCONDATA_FORCE)
)
_REDUCE_NETFORCE = 3  # reduce="netforce" in MJCF: one net force over all contacts
CONTACT_SENSOR_DIM = 4


def contact_sensor_name(geom: str, prefix: str = "contact_") -> str:
    return f"{prefix}{geom}"


def add_contact_sensors(
    spec: mujoco.MjSpec, geoms: Sequence[str], prefix: str = "contact_"
) -> tuple[str, ...]:
    """Add one net-contact-force sensor per geom (against any other geom); return their names."""
    known = {g.name for g in spec.geoms}
    missing = [g for g in geoms if g not in known]
    if missing:
        raise KeyError(
            f"unknown geoms {missing}; the spec's named geoms: {sorted(n for n in known if n)}"
        )
    names = []
    for geom in geoms:
        name = contact_sensor_name(geom, prefix)
        spec.add_sensor(
            name=name,
            type=mujoco.mjtSensor.mjSENS_CONTACT,
            objtype=mujoco.mjtObj.mjOBJ_GEOM,
            objname=geom,
            intprm=[_FOUND_AND_FORCE, _REDUCE_NETFORCE, 1],
        )
        names.append(name)
    return tuple(names)
