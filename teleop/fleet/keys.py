"""The key directory of a fleet (CurveZMQ, made with `unilab.teleop.keys`):

DIR/public/fleet.key, DIR/private/fleet.key_secret    the fleet server
DIR/public/<robot>.key, DIR/private/<robot>.key_secret robot hosts (the sim shares "sim")
DIR/public/<station>.key, ...                          operator stations ("operator")
DIR/allowed/      robot keys the fleet server accepts
DIR/stations/     station keys the robot hosts accept (for a takeover with `hil run`)

unilab fleet keygen --dir keys/fleet [--robot NAME ...] [--station NAME ...]
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unilab.teleop.keys import KeyFileError, generate_keypair

SERVER = "fleet"
SIM_ROBOT = "sim"
STATION = "operator"


@dataclass(frozen=True)
class FleetKeys:
    root: Path

    def secret(self, name: str) -> str:
        return str(self.root / "private" / f"{name}.key_secret")

    def public(self, name: str) -> str:
        return str(self.root / "public" / f"{name}.key")

    @property
    def allowed(self) -> str:
        return str(self.root / "allowed")

    @property
    def stations(self) -> str:
        return str(self.root / "stations")

    def require(self, *names: str) -> None:
        """Raise `KeyFileError`, naming the fix, unless these key pairs exist."""
        for name in names:
            if not Path(self.secret(name)).is_file():
                raise KeyFileError(
                    f"no key {self.secret(name)}: make the fleet keys first with "
                    f"`unilab fleet keygen --dir {self.root}`"
                )


def make_fleet_keys(
    root: str | os.PathLike[str],
    robots: Sequence[str] = (SIM_ROBOT,),
    stations: Sequence[str] = (STATION,),
) -> FleetKeys:
    keys = FleetKeys(Path(root))
    for sub in ("allowed", "stations"):
        (keys.root / sub).mkdir(parents=True, exist_ok=True)
    for name in (SERVER, *robots, *stations):
        if not Path(keys.secret(name)).is_file():
            generate_keypair(keys.root, name)
    for name in robots:
        shutil.copy(keys.public(name), Path(keys.allowed) / f"{name}.key")
    for name in stations:
        shutil.copy(keys.public(name), Path(keys.stations) / f"{name}.key")
    return keys
