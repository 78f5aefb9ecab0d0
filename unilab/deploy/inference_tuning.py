"""Tune discrete inference settings on the robot by Thompson sampling over their values.

A VLA's success at deployment depends on settings that training never fixes: how many
actions of each chunk to execute (`n_act`), temporal ensembling of overlapping chunks,
the classifier-free guidance scale, the flow's noise temperature, best-of-N candidate
chunks, and the number of Euler steps that integrate each chunk. Trying every combination
costs real episodes, so `SettingsBandit` learns them online from episode outcomes:

- per setting and value, an independent Beta(a, b) posterior over the success probability,
  starting at Beta(1, 1);
- `propose()` draws p ~ Beta(a, b) for every value of every setting and picks each
  setting's argmax (Thompson sampling: values are tried as often as they might be best);
- `update(settings, successes, trials)` credits the outcome of the episodes run with the
  proposed settings to the chosen value of each setting;
- `decay_round()` shrinks every (a - 1, b - 1) by `decay`, so old evidence fades toward the
  prior and the bandit follows a policy that changes between rounds.

The settings are treated as independent (a factorised bandit): interactions between them
(guidance scale x temperature, say) are averaged over, which keeps the number of arms the
sum rather than the product of the value counts. Values are JSON scalars so the state is
plain JSON (`to_json` / `from_json`, no pickle), like `unilab.runtime.allocation`'s.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SettingValue = bool | int | float | str | None
"""A setting's value: a JSON scalar."""

DEFAULT_SPACE: dict[str, list[SettingValue]] = {
    "n_act": [2, 4, 8, 16],
    # ACT ensembling weight exp(-m i) over overlapping chunks; None: off (execute n_act).
    "ensemble_decay": [None, 0.0, 0.01, 0.1],
    # v = v_u + s (v_c - v_u): 1.0 is the conditional policy alone.
    "guidance_scale": [1.0, 1.5, 2.0, 3.0],
    "noise_temperature": [0.5, 0.75, 1.0],
    "best_of_n": [1, 2, 4, 8],
    # Euler steps per chunk: the velocity field is the same at any K (trained with K = 10).
    "flow_steps": [2, 4, 10],
}
"""The inference settings of issue 16 with discrete values around the VLA's defaults
(`policies.vla.config`: horizon 16, n_act 8, no ensembling, no guidance, K = 10), and the
number of flow steps (stop 47: K = 2 beat the trained K = 10 on arm_move_to_goal's far
goals on 6 of 6 seeds, and tied on arm_move_side)."""

_FORMAT = "unilab.settings_bandit/1"


def _value_key(value: object) -> tuple[str, object]:
    """How values are compared: numbers by value (1 == 1.0 == numpy's 1), booleans apart
    from numbers (True is not 1), strings and None as themselves."""
    if isinstance(value, bool | np.bool_):
        return ("bool", bool(value))
    if isinstance(value, int | float | np.integer | np.floating):
        return ("number", float(value))
    return (type(value).__name__, value)


def _check_space(space: Mapping[str, Sequence[SettingValue]]) -> dict[str, list[SettingValue]]:
    if not space:
        raise ValueError("the settings space is empty; give at least one setting and its values")
    checked: dict[str, list[SettingValue]] = {}
    for name, values in space.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"setting names must be non-empty strings, got {name!r}")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise ValueError(f"setting {name!r}: values must be a list, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"setting {name!r} has no values; give at least one")
        for value in values:
            if value is not None and not isinstance(value, bool | int | float | str):
                raise ValueError(
                    f"setting {name!r}: value {value!r} is not a JSON scalar "
                    "(bool, int, float, str or None)"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"setting {name!r}: value {value!r} is not finite")
        keys = [_value_key(v) for v in values]
        if len(set(keys)) != len(keys):
            raise ValueError(f"setting {name!r} lists a value twice: {list(values)}")
        checked[name] = list(values)
    return checked


class SettingsBandit:
    """Thompson sampling over the values of independent discrete inference settings."""

    def __init__(
        self,
        space: Mapping[str, Sequence[SettingValue]] | None = None,
        decay: float = 1.0,
        seed: int = 0,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        self.space = _check_space(DEFAULT_SPACE if space is None else space)
        self.decay = float(decay)
        self.alpha: dict[str, np.ndarray] = {k: np.ones(len(v)) for k, v in self.space.items()}
        self.beta: dict[str, np.ndarray] = {k: np.ones(len(v)) for k, v in self.space.items()}
        self.rng = np.random.default_rng(int(seed))

    def _index(self, name: str, value: SettingValue) -> int:
        if name not in self.space:
            raise ValueError(f"unknown setting {name!r}; settings: {sorted(self.space)}")
        key = _value_key(value)
        for i, candidate in enumerate(self.space[name]):
            if _value_key(candidate) == key:
                return i
        raise ValueError(f"setting {name!r} has no value {value!r}; values: {self.space[name]}")

    def propose(self) -> dict[str, SettingValue]:
        """One value per setting: the argmax of a posterior draw over its values."""
        choice: dict[str, SettingValue] = {}
        for name, values in self.space.items():
            draw = self.rng.beta(self.alpha[name], self.beta[name])
            choice[name] = values[int(np.argmax(draw))]
        return choice

    def update(self, settings: Mapping[str, SettingValue], successes: float, trials: float) -> None:
        """Credit `successes` out of `trials` episodes to the chosen value of each setting in
        `settings` (settings left out are not updated)."""
        if not (math.isfinite(trials) and trials >= 0):
            raise ValueError(f"trials must be a finite number >= 0, got {trials}")
        if not (math.isfinite(successes) and 0 <= successes <= trials):
            raise ValueError(f"successes must be in [0, trials={trials}], got {successes}")
        rows = [(name, self._index(name, value)) for name, value in settings.items()]
        for name, i in rows:  # all checked before any posterior changes
            self.alpha[name][i] += successes
            self.beta[name][i] += trials - successes

    def decay_round(self) -> None:
        """Multiply every pseudo-count (a - 1, b - 1) by `decay`: evidence fades to the prior."""
        for name in self.space:
            self.alpha[name] = 1.0 + self.decay * (self.alpha[name] - 1.0)
            self.beta[name] = 1.0 + self.decay * (self.beta[name] - 1.0)

    def means(self) -> dict[str, list[float]]:
        """Posterior mean success probability of each value, per setting (in space order)."""
        return {
            name: (self.alpha[name] / (self.alpha[name] + self.beta[name])).tolist()
            for name in self.space
        }

    def best(self) -> dict[str, SettingValue]:
        """Per setting, the value of highest posterior mean (the first one on ties)."""
        return {
            name: self.space[name][int(np.argmax(means))] for name, means in self.means().items()
        }

    # -- plain-JSON state ------------------------------------------------------------------
    def to_json(self) -> str:
        """The whole state (space, posteriors, decay, random stream) as a JSON string."""
        doc: dict[str, Any] = {
            "format": _FORMAT,
            "space": self.space,
            "decay": self.decay,
            "alpha": {k: v.tolist() for k, v in self.alpha.items()},
            "beta": {k: v.tolist() for k, v in self.beta.items()},
            "rng": self.rng.bit_generator.state,
        }
        return json.dumps(doc)

    @classmethod
    def from_json(cls, text: str) -> SettingsBandit:
        """A bandit in the state `to_json` wrote; it continues the same random stream."""
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise ValueError(f"not a settings bandit state (format {found!r}, want {_FORMAT!r})")
        bandit = cls(doc["space"], decay=float(doc["decay"]))
        for key in ("alpha", "beta"):
            counts = doc[key]
            if set(counts) != set(bandit.space):
                raise ValueError(f"{key} is given for {sorted(counts)}, not {sorted(bandit.space)}")
            for name, values in bandit.space.items():
                array = np.asarray(counts[name], dtype=np.float64)
                if array.shape != (len(values),) or not np.all(array >= 1.0):
                    raise ValueError(
                        f"{key}[{name!r}] must hold {len(values)} numbers >= 1, got {counts[name]}"
                    )
                getattr(bandit, key)[name] = array
        bandit.rng.bit_generator.state = doc["rng"]
        return bandit
