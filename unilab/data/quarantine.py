"""Save the readable frames of the episodes `repair` takes out of a store.

Layout of one repair's quarantine directory (`<store>.quarantine/<stamp>/`; a repair killed
while writing it leaves `<stamp>.incomplete/`):

    report.json                      the repair plan: what left the store and why
    episodes/<old index>/meta.json   the episode's metadata (when readable)
    episodes/<old index>/<field>.npy its frames of each field (fill values where unreadable)
    episodes/<old index>/<field>.unreadable_rows.npy   frame offsets that could not be read
    frames_<a>_<b>/<field>.npy       committed frames no index entry locates
    fields/<field>/                  the files of a quarantined field, moved as they were

Plain `.npy` files (no pickle) and JSON, so any tool can read them back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from unilab.data.layout import INDEX_GROUP, atomic_write_json, fsync_dir
from unilab.data.repair_plan import ArrayDamage, RepairPlan, quarantined_fields
from unilab.data.schema import fill_value_for


def read_readable(
    arr: Any, dmg: ArrayDamage | None, a: int, b: int, fill: Any, skip_below: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Rows [a, b) of `arr`, with `fill` where they cannot be read, and the bad-row mask."""
    bad = dmg.bad_mask(a, b) if dmg is not None else np.zeros(b - a, dtype=bool)
    if skip_below > a:
        bad[: min(b, skip_below) - a] = True
    out = np.full((b - a, *arr.shape[1:]), fill, dtype=arr.dtype)
    per = arr.chunks[0]
    lo = a
    while lo < b:
        hi = min(b, (lo // per + 1) * per)
        if not bad[lo - a : hi - a].any():
            out[lo - a : hi - a] = np.asarray(arr[lo:hi])
        lo = hi
    return out, bad


def _save_frames(plan: RepairPlan, folder: Path, a: int, b: int, skip: dict[str, int]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, spec in plan.schema.fields.items():
        if name in plan.quarantine_fields:
            continue  # its files move to fields/ as they are
        arr = plan.open_array(name)
        if arr is None:
            continue
        data, bad = read_readable(
            arr, plan.damage.get(name), a, b, fill_value_for(spec.dtype), skip.get(name, 0)
        )
        target = folder / f"{name}.npy"
        target.parent.mkdir(parents=True, exist_ok=True)
        np.save(target, data, allow_pickle=False)
        if bad.any():
            np.save(folder / f"{name}.unreadable_rows.npy", np.flatnonzero(bad), allow_pickle=False)


def write_quarantine(plan: RepairPlan, qdir: Path, root: dict[str, Any]) -> None:
    """Save what leaves the store (the store itself is not touched). Written under
    `<qdir>.incomplete` and renamed when whole, so a folder without the suffix is complete."""
    final = qdir
    qdir = final.with_name(final.name + ".incomplete")
    qdir.mkdir(parents=True, exist_ok=True)
    skip = {name: int(q["frames"]) for name, q in quarantined_fields(root).items()}
    meta_arr = plan.open_array(f"{INDEX_GROUP}/meta")
    meta_dmg = plan.damage.get(f"{INDEX_GROUP}/meta")
    for i in sorted(plan.quarantine_episodes):
        a = int(plan.starts[i])
        b = a + int(plan.lengths[i])
        folder = qdir / "episodes" / str(i)
        _save_frames(plan, folder, a, b, skip)
        doc: dict[str, Any] = {"old_index": i, "frames": [a, b]}
        doc["why"] = plan.quarantine_episodes[i]
        if meta_arr is not None and not (meta_dmg is not None and meta_dmg.bad_mask(i, i + 1)[0]):
            doc["meta"] = json.loads(str(np.asarray(meta_arr[i : i + 1])[0]))
        (folder / "meta.json").write_text(json.dumps(doc, indent=1))
    if plan.unindexed is not None:
        a, b = plan.unindexed
        _save_frames(plan, qdir / f"frames_{a}_{b}", a, b, skip)
    atomic_write_json(qdir / "report.json", plan.to_json())
    os.rename(qdir, final)
    fsync_dir(final.parent)
