"""The task's success rule for a world model's predicted states (the generator's `state`
filter): `task_state_rule(wm_run)` builds the task the model was trained on, without
cameras, and returns its `success_from_state`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from unilab.config.compose import compose
from unilab.tasks.registry import make_task
from unilab.worldmodel.fidelity import WorldModelRunError


def task_state_rule(run: str | Path) -> Callable[[np.ndarray], np.ndarray]:
    """(B, D) predicted states -> (B,) bool success, by the task of world-model run `run`.
    Refused (WorldModelRunError, naming the fix) when the model's proprioception is not the
    task's critic state or the task has no rule."""
    path = Path(run)
    run_dir = path if path.is_dir() else path.parent.parent
    config = run_dir / "config.yaml"
    if not config.is_file():
        raise WorldModelRunError(f"{run_dir} has no config.yaml: not a world-model run")
    doc = yaml.safe_load(config.read_text()) or {}
    task_doc, algo = dict(doc.get("task") or {}), dict(doc.get("algo") or {})
    field = algo.get("proprio_field", "obs/policy")
    if field != "obs/policy" or not task_doc.get("state_policy", False):
        raise WorldModelRunError(
            f"{run_dir}: the state filter needs a model of the task's critic state: train it "
            f"with task.state_policy=true and algo.proprio_field=obs/policy (this one: "
            f"state_policy={task_doc.get('state_policy')}, proprio_field={field})"
        )
    task_doc["cameras"] = []  # the rule reads vectors; no renderer
    cfg = compose([], base={"task": task_doc, **{k: doc[k] for k in ("sim",) if k in doc}})
    task = make_task(cfg.task, num_envs=1, seed=0, sim_cfg=cfg.sim)
    if task.success_from_state(task.observe()["critic"]) is None:
        task.close()
        raise WorldModelRunError(
            f"task {task_doc['name']!r} has no success rule on states "
            "(Task.success_from_state): use another --filter"
        )

    def rule(state: np.ndarray) -> np.ndarray:
        out = task.success_from_state(np.asarray(state, np.float32))
        assert out is not None
        return out

    return rule
