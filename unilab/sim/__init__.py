"""unilab.sim: batched MuJoCo simulation (mujoco.batch) for tasks.

Tasks use BatchedSim and never call MuJoCo stepping functions themselves.
"""

from unilab.sim.batched_sim import BatchedSim, EnvSnapshot, SimSnapshot, StepStatus
from unilab.sim.contacts import add_contact_sensors
from unilab.sim.randomization import DomainRandomization
from unilab.sim.stability import StabilityLimits, UnstableReason

__all__ = [
    "BatchedSim",
    "DomainRandomization",
    "EnvSnapshot",
    "SimSnapshot",
    "StabilityLimits",
    "StepStatus",
    "UnstableReason",
    "add_contact_sensors",
]
