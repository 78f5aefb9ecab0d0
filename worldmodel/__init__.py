"""unilab.worldmodel: an action-conditioned world model trained from episode stores.

Importing this package registers `algo=world_model`; the algorithm registry imports it on
its first lookup (`unilab.registry`), so `compose(["algo=world_model", ...])` just works.
"""

from unilab.worldmodel.config import WorldModelConfig
from unilab.worldmodel.learner import WorldModelLearner
from unilab.worldmodel.model import WorldModel

__all__ = ["WorldModel", "WorldModelConfig", "WorldModelLearner"]
