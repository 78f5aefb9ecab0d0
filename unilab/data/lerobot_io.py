"""Move episodes between an episode store and a LeRobotDataset (v3), through LeRobot's own API.

    export_to_lerobot("runs/demo.zarr", "exports", "me/demo")   # -> exports/me/demo
    import_from_lerobot("exports/me/demo", "runs/back.zarr", origin="human")

`lerobot` pins torch < 2.11, so it lives in its own environment (`make test-lerobot`
builds `.venv-lerobot`; docs/decisions/0008-lerobot-environment.md says why). This module
imports it only when called and says how to get it when it is missing.

Names (store field <-> LeRobot feature):

| store | LeRobot | notes |
|---|---|---|
| `obs/policy` | `observation.state` | |
| `obs/<group>` | `observation.<group>` | e.g. `observation.critic`, `observation.environment_state` |
| `images/<camera>` | `observation.images.<camera>` | dtype `video` (lossy) or `image` (PNG, exact) |
| `action` | `action` | |
| `reward` | `next.reward` | |
| `terminated` or `truncated` | `next.done` | |
| `terminated`, `truncated`, `timestamp`, `origin`, `is_intervention`, `policy_version`, `token`, `segment`, other fields | `unilab.<name>` | with `extras=True` (default) |
| episode metadata `language_instruction` (else `task`) | `task` | |

Episode metadata and the exact store schema travel in `meta/unilab.json` beside LeRobot's
own metadata (plain JSON), so a store -> LeRobot -> store round trip restores them. A dataset
made elsewhere imports by the names above; features it has beyond them are kept as
`lerobot/<name>` fields.

The export is written to a hidden sibling directory, finalized (a LeRobot v3 dataset is
unreadable before `finalize()`), and only then swapped into place (`dirswap.replace_dir`):
with `overwrite=True` the old dataset is deleted only after the new one is complete and in
its place, so a failure or a kill at any point leaves one whole dataset at the target.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from unilab.data.dirswap import replace_dir
from unilab.data.episode import EpisodeMeta
from unilab.data.schema import CORE_FIELDS, ENUMS, FieldSpec, StoreSchema
from unilab.data.store import EpisodeInput, EpisodeStore

SIDECAR = "meta/unilab.json"
SIDECAR_FORMAT = "unilab-lerobot/1"
EXTRA_PREFIX = "unilab."
FOREIGN_GROUP = "lerobot"
CORE_EXTRAS = (
    "terminated",
    "truncated",
    "timestamp",
    "origin",
    "is_intervention",
    "policy_version",
    "token",
    "segment",
)

INSTALL_HINT = (
    "LeRobot import/export needs the `lerobot` package (0.4.4 on Python 3.11), which pins "
    "torch < 2.11 and so cannot share unilab's main environment. Run `make test-lerobot` "
    "(it builds .venv-lerobot) and use .venv-lerobot/bin/python, or install the extra "
    "`pip install 'unilab[lerobot]'` into a separate Python 3.11 environment."
)


class LeRobotUnavailableError(ImportError):
    """`lerobot` is not installed in this environment."""


def _lerobot_dataset_cls() -> Any:
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as exc:
        raise LeRobotUnavailableError(f"{INSTALL_HINT} (import failed: {exc})") from exc
    return LeRobotDataset


def _decode_video_frames() -> Any:
    from lerobot.datasets.video_utils import decode_video_frames

    return decode_video_frames


# ---------------------------------------------------------------------- names
def lerobot_key(store_field: str) -> str:
    """The LeRobot feature name of a store field (see the module table)."""
    if store_field == "obs/policy":
        return "observation.state"
    if store_field.startswith("obs/"):
        return "observation." + store_field.removeprefix("obs/")
    if store_field.startswith("images/"):
        return "observation.images." + store_field.removeprefix("images/")
    if store_field == "action":
        return "action"
    return EXTRA_PREFIX + store_field.replace("/", ".")


def _sanitize(name: str) -> str:
    clean = re.sub(r"[^a-z0-9_]", "_", name.lower())
    return clean if clean[:1].isalpha() else f"f_{clean}"


def store_field_for(key: str, feature: dict[str, Any]) -> str | None:
    """The store field a LeRobot feature of a dataset made elsewhere maps to (None: it is
    one of LeRobot's bookkeeping columns or a core column handled apart)."""
    if key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        return None
    if key in ("next.reward", "next.done", "next.success"):
        return None
    if feature["dtype"] in ("video", "image"):
        name = key.removeprefix("observation.images.").removeprefix("observation.")
        return f"images/{_sanitize(name)}"
    if key == "observation.state":
        return "obs/policy"
    if key.startswith("observation."):
        return f"obs/{_sanitize(key.removeprefix('observation.'))}"
    if key == "action":
        return "action"
    if key.startswith(EXTRA_PREFIX):
        name = key.removeprefix(EXTRA_PREFIX)
        if name in CORE_EXTRAS:
            return name
        parts = name.split(".", 1)
        return "/".join(_sanitize(p) for p in parts)
    return f"{FOREIGN_GROUP}/{_sanitize(key)}"


# ---------------------------------------------------------------------- export
@dataclass
class LeRobotExport:
    """What `export_to_lerobot` wrote."""

    path: Path
    repo_id: str
    episodes: int
    frames: int
    fps: int
    features: dict[str, str]
    """LeRobot feature -> store field."""
    seconds: float


def _dataset_fps(metas: Sequence[EpisodeMeta], fps: float | None) -> int:
    if fps is None:
        rates = {m.fps for m in metas}
        if None in rates or len(rates) != 1:
            raise ValueError(
                f"episodes give fps {sorted(rates, key=str)}; LeRobot needs one fps per dataset: "
                "pass fps=..."
            )
        fps = float(next(iter(rates)))  # type: ignore[arg-type]
    if not (fps > 0 and abs(fps - round(fps)) < 1e-6):
        raise ValueError(f"LeRobot stores fps as a positive integer; got {fps}")
    return round(fps)


def _features(
    schema: StoreSchema, images: str, extras: bool
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    features: dict[str, dict[str, Any]] = {}
    source: dict[str, str] = {}
    for name, spec in schema.fields.items():
        if name in CORE_FIELDS:
            continue
        key = lerobot_key(name)
        if key in features:
            raise ValueError(f"store fields {source[key]!r} and {name!r} both map to {key!r}")
        if spec.is_image:
            if spec.shape[2] != 3 and images == "video":
                raise ValueError(
                    f"{name!r} has {spec.shape[2]} channels; video needs 3: pass images='image'"
                )
            features[key] = {
                "dtype": images,
                "shape": spec.shape,
                "names": ["height", "width", "channels"],
            }
        elif name.startswith("obs/") or name == "action" or extras:
            features[key] = {"dtype": spec.dtype, "shape": spec.shape or (1,), "names": None}
        else:
            continue
        source[key] = name
    features["next.reward"] = {"dtype": "float32", "shape": (1,), "names": None}
    features["next.done"] = {"dtype": "bool", "shape": (1,), "names": None}
    if extras:
        for name in CORE_EXTRAS:
            spec = schema.fields[name]
            key = EXTRA_PREFIX + name
            features[key] = {"dtype": spec.dtype, "shape": (1,), "names": None}
            source[key] = name
    return features, source


def _task_text(meta: EpisodeMeta) -> str:
    return meta.language_instruction or meta.task


def export_to_lerobot(
    store_path: str | os.PathLike[str],
    out_root: str | os.PathLike[str],
    repo_id: str,
    *,
    episodes: Iterable[int] | None = None,
    images: Literal["video", "image"] = "video",
    vcodec: str = "libsvtav1",
    fps: float | None = None,
    robot_type: str | None = None,
    extras: bool = True,
    overwrite: bool = False,
) -> LeRobotExport:
    """Write the store's episodes (all, or `episodes`) as the LeRobot v3 dataset
    `out_root/repo_id`, through `LeRobotDataset.create` / `add_frame` / `save_episode` /
    `finalize`.

    `images`: cameras as `video` (mp4, lossy, `vcodec`) or `image` (PNG in parquet,
    exact). `fps`: the dataset's frame rate (default: the episodes' common metadata fps).
    `robot_type`: default the episodes' common `robot`. `extras`: also write unilab's own
    per-frame columns (`unilab.*`) so that nothing is lost on the way back.
    """
    if images not in ("video", "image"):
        raise ValueError(f"images must be 'video' or 'image', got {images!r}")
    dataset_cls = _lerobot_dataset_cls()
    t0 = time.perf_counter()
    target = Path(out_root) / repo_id
    if target.exists():
        if not overwrite:
            raise FileExistsError(f"{target} exists; pass overwrite=True to replace it")
        if not (target / "meta" / "info.json").is_file():
            raise FileExistsError(f"{target} exists and is not a LeRobot dataset; not replacing it")
    with EpisodeStore.open(store_path, "r") as store:
        ids = list(range(len(store))) if episodes is None else [int(i) for i in episodes]
        if not ids:
            raise ValueError(f"{store_path}: no episodes to export")
        all_meta = store.all_meta()
        metas = [all_meta[i] for i in ids]
        rate = _dataset_fps(metas, fps)
        if robot_type is None:
            robots = {m.robot for m in metas}
            robot_type = robots.pop() if len(robots) == 1 else None
        features, source = _features(store.schema, images, extras)
        tmp = target.parent / f".{target.name}.exporting-{uuid.uuid4().hex[:8]}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        frames_total = 0
        try:
            dataset = dataset_cls.create(
                repo_id,
                fps=rate,
                features=features,
                root=tmp,
                robot_type=robot_type or None,
                use_videos=images == "video",
                vcodec=vcodec,
            )
            try:
                for i, meta in zip(ids, metas, strict=True):
                    frames_total += _add_episode(dataset, store.episode(i), meta, features, source)
            finally:
                dataset.finalize()
            sidecar = {
                "format": SIDECAR_FORMAT,
                "repo_id": repo_id,
                "store_schema": store.schema.to_json(),
                "features": source,
                "episodes": [json.loads(m.to_json()) for m in metas],
                "source_episodes": ids,
            }
            (tmp / SIDECAR).write_text(json.dumps(sidecar, indent=1))
            # The old dataset stays whole until the new one is: one atomic swap (Linux),
            # then the old one is deleted.
            replace_dir(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return LeRobotExport(
        target, repo_id, len(ids), frames_total, rate, source, time.perf_counter() - t0
    )


def _add_episode(
    dataset: Any,
    frames: dict[str, np.ndarray],
    meta: EpisodeMeta,
    features: dict[str, dict[str, Any]],
    source: dict[str, str],
) -> int:
    n = len(frames["reward"])
    done = frames["terminated"] | frames["truncated"]
    columns: dict[str, np.ndarray] = {}
    for key, name in source.items():
        array = frames[name]
        columns[key] = array.reshape(n, 1) if array.ndim == 1 else array
    columns["next.reward"] = frames["reward"].reshape(n, 1)
    columns["next.done"] = done.reshape(n, 1)
    for key, spec in features.items():
        dtype = np.dtype(spec["dtype"]) if spec["dtype"] not in ("video", "image") else None
        if dtype is not None and columns[key].dtype != dtype:
            columns[key] = columns[key].astype(dtype)
    task = _task_text(meta)
    for t in range(n):
        frame: dict[str, Any] = {key: col[t] for key, col in columns.items()}
        frame["task"] = task
        dataset.add_frame(frame)
    with warnings.catch_warnings():
        # lerobot's statistics cast bool columns (next.done, flags) to uint8 and warn each time.
        warnings.filterwarnings("ignore", "Converting input from bool", RuntimeWarning)
        dataset.save_episode()
    return n


# ---------------------------------------------------------------------- import
@dataclass
class LeRobotImport:
    """What `import_from_lerobot` appended."""

    store_path: Path
    episode_ids: list[int]
    frames: int
    fields: dict[str, str]
    """LeRobot feature -> store field."""
    restored_metadata: bool
    """True when the dataset carried unilab's sidecar and its episode metadata was used."""
    seconds: float
    notes: list[str] = field(default_factory=list)


def _read_sidecar(root: Path, total_episodes: int, notes: list[str]) -> dict[str, Any] | None:
    path = root / SIDECAR
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or doc.get("format") != SIDECAR_FORMAT:
        notes.append(
            f"{SIDECAR}: unknown format {doc.get('format') if isinstance(doc, dict) else doc!r}; ignored"
        )
        return None
    if len(doc.get("episodes", [])) != total_episodes:
        notes.append(
            f"{SIDECAR} describes {len(doc['episodes'])} episodes but the dataset has "
            f"{total_episodes} (edited after export?); ignored"
        )
        return None
    return doc


def _import_plan(
    features: dict[str, dict[str, Any]], sidecar: dict[str, Any] | None
) -> tuple[dict[str, str], dict[str, FieldSpec]]:
    """LeRobot feature -> store field, and the store's user field specs."""
    known = dict(sidecar["features"]) if sidecar else {}
    saved = StoreSchema.from_json(sidecar["store_schema"]).fields if sidecar else {}
    mapping: dict[str, str] = {}
    specs: dict[str, FieldSpec] = {}
    for key, feature in features.items():
        name = known.get(key) or store_field_for(key, feature)
        if name is None or feature["dtype"] == "string":
            continue
        if name in mapping.values():
            raise ValueError(f"LeRobot features map twice to store field {name!r}: rename one")
        mapping[key] = name
        if name in CORE_FIELDS:
            continue
        if name in saved:
            specs[name] = saved[name]
        elif feature["dtype"] in ("video", "image"):
            specs[name] = FieldSpec(_hwc(feature), "uint8")
        else:
            shape = tuple(int(s) for s in feature["shape"])
            specs[name] = FieldSpec(shape, str(feature["dtype"]))
    if "action" not in specs:
        raise ValueError(f"the dataset has no 'action' feature; features: {sorted(features)}")
    return mapping, specs


def _hwc(feature: dict[str, Any]) -> tuple[int, int, int]:
    shape = [int(s) for s in feature["shape"]]
    names = feature.get("names") or []
    if list(names)[:3] == ["channels", "height", "width"] or (
        not names and shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4)
    ):
        return shape[1], shape[2], shape[0]
    return shape[0], shape[1], shape[2]


def _arrow_to_numpy(column: Any, n: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A fixed-shape arrow column (plain values, nested lists, or datasets' ArrayND
    extension type) as an exact (n, *shape) numpy array."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(array.type, pa.ExtensionType):
        array = array.storage
    while (
        pa.types.is_list(array.type)
        or pa.types.is_fixed_size_list(array.type)
        or (pa.types.is_large_list(array.type))
    ):
        array = array.flatten()
    values = array.to_numpy(zero_copy_only=False)
    return values.reshape(n, *shape).astype(dtype, copy=False)


def import_from_lerobot(
    dataset_root: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    *,
    repo_id: str | None = None,
    origin: str | None = None,
    episodes: Iterable[int] | None = None,
    video_backend: str | None = None,
    commit_frames: int = 16384,
) -> LeRobotImport:
    """Append the episodes of the LeRobot dataset at `dataset_root` (all, or `episodes`)
    to the store at `store_path` (created when absent, else its schema must match).

    The dataset is opened with `LeRobotDataset(repo_id, root=dataset_root)`; nothing is
    downloaded when the files are there. `origin`: every imported frame's origin
    (`sim`, `real`, `human`, `wm`); default: the dataset's `unilab.origin` column when it
    has one, else `human`. Camera frames come back as uint8 H×W×3.
    """
    if origin is not None and origin not in ENUMS["origin"]:
        raise ValueError(f"origin {origin!r} is not one of {list(ENUMS['origin'])}")
    dataset_cls = _lerobot_dataset_cls()
    t0 = time.perf_counter()
    root = Path(dataset_root)
    if not (root / "meta" / "info.json").is_file():
        raise FileNotFoundError(
            f"{root} is not a LeRobot v3 dataset directory (no meta/info.json); give the "
            "dataset's own folder, e.g. <root>/<repo_id>"
        )
    notes: list[str] = []
    info = json.loads((root / "meta" / "info.json").read_text())
    sidecar = _read_sidecar(root, int(info.get("total_episodes", -1)), notes)
    repo = repo_id or (sidecar or {}).get("repo_id") or f"local/{root.name}"
    dataset = dataset_cls(repo, root=root, video_backend=video_backend)
    mapping, specs = _import_plan(dataset.meta.features, sidecar)
    store = EpisodeStore.open(store_path, "a", schema=StoreSchema(specs))
    try:
        ids = (
            list(range(dataset.meta.total_episodes))
            if episodes is None
            else [int(e) for e in episodes]
        )
        reader = _EpisodeReader(dataset, mapping, store.schema, sidecar, origin)
        stored: list[int] = []
        pending: list[EpisodeInput] = []
        pending_frames, frames_total = 0, 0
        for ep in ids:
            frames, meta = reader.episode(ep)
            pending.append((frames, meta))
            n = len(frames["reward"])
            pending_frames += n
            frames_total += n
            if pending_frames >= commit_frames:
                stored += store.append_episodes(pending)
                pending, pending_frames = [], 0
        stored += store.append_episodes(pending)
    finally:
        store.close()
    return LeRobotImport(
        Path(store_path),
        stored,
        frames_total,
        mapping,
        sidecar is not None,
        time.perf_counter() - t0,
        notes,
    )


class _EpisodeReader:
    """Reads one LeRobot episode at a time as store columns: numeric columns from the
    parquet data as arrow (exact dtypes), cameras decoded per episode in one call."""

    def __init__(
        self,
        dataset: Any,
        mapping: dict[str, str],
        schema: StoreSchema,
        sidecar: dict[str, Any] | None,
        origin: str | None,
    ) -> None:
        self.dataset = dataset
        self.mapping = mapping
        self.schema = schema
        self.sidecar = sidecar
        self.origin = origin
        self.features = dataset.meta.features
        self.video_keys = set(dataset.meta.video_keys)
        self.image_keys = set(dataset.meta.image_keys)
        self.arrow = dataset.hf_dataset.with_format("arrow")
        self.images = (
            dataset.hf_dataset.with_format("numpy", columns=sorted(self.image_keys))
            if self.image_keys
            else None
        )
        tasks = dataset.meta.tasks
        self.tasks = {int(row["task_index"]): str(name) for name, row in tasks.iterrows()}

    def episode(self, ep: int) -> tuple[dict[str, Any], EpisodeMeta]:
        info = self.dataset.meta.episodes[ep]
        a, b = int(info["dataset_from_index"]), int(info["dataset_to_index"])
        n = b - a
        table = self.arrow[a:b]
        index = table.column("index").to_numpy()
        if not (np.array_equal(index, np.arange(a, b)) and n > 0):
            raise ValueError(f"episode {ep}: parquet rows are not frames [{a}, {b}) in order")
        columns: dict[str, Any] = {}
        for key, name in self.mapping.items():
            spec = self.schema.fields[name]
            if key in self.video_keys:
                columns[name] = self._video(key, ep, table, n)
            elif key in self.image_keys:
                assert self.images is not None
                columns[name] = self._image(self.images[a:b][key])
            else:
                columns[name] = _arrow_to_numpy(table.column(key), n, spec.shape, spec.dtype)
        frames = self._core(columns, table, n)
        return frames, self._meta(ep, table, frames)

    def _video(self, key: str, ep: int, table: Any, n: int) -> np.ndarray:
        info = self.dataset.meta.episodes[ep]
        start = float(info[f"videos/{key}/from_timestamp"])
        stamps = table.column("timestamp").to_numpy().astype(np.float64)
        path = self.dataset.root / self.dataset.meta.get_video_file_path(ep, key)
        decoded = _decode_video_frames()(
            path,
            [start + float(s) for s in stamps],
            self.dataset.tolerance_s,
            self.dataset.video_backend,
        )
        frames = decoded.numpy()  # (n, C, H, W) float in [0, 1]
        if frames.shape[0] != n:
            raise ValueError(f"{key}: decoded {frames.shape[0]} frames for {n} timestamps")
        return np.clip(np.rint(frames * 255.0), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)

    @staticmethod
    def _image(images: np.ndarray) -> np.ndarray:
        array = np.asarray(images)
        if array.dtype != np.uint8:
            array = np.clip(np.rint(array * 255.0), 0, 255).astype(np.uint8)
        if array.ndim == 4 and array.shape[1] in (1, 3, 4) and array.shape[3] not in (1, 3, 4):
            array = array.transpose(0, 2, 3, 1)
        return array

    def _core(self, columns: dict[str, Any], table: Any, n: int) -> dict[str, Any]:
        names = set(table.column_names)
        frames = dict(columns)
        if "reward" not in frames:
            reward = table.column("next.reward") if "next.reward" in names else None
            frames["reward"] = (
                np.zeros(n, np.float32)
                if reward is None
                else _arrow_to_numpy(reward, n, (), "float32")
            )
        done = (
            _arrow_to_numpy(table.column("next.done"), n, (), "bool")
            if "next.done" in names
            else np.zeros(n, bool)
        )
        last = np.arange(n) == n - 1
        if "terminated" not in frames:
            # No terminal flag: the recording stopped (a time limit), not the task.
            frames["terminated"] = done & last & ~frames.get("truncated", np.zeros(n, bool))
        if "truncated" not in frames:
            frames["truncated"] = last & ~frames["terminated"]
        if "timestamp" not in frames:
            frames["timestamp"] = table.column("timestamp").to_numpy().astype(np.float64)
        if self.origin is not None:
            frames["origin"] = self.origin
        elif "origin" not in frames:
            frames["origin"] = "human"
        return frames

    def _meta(self, ep: int, table: Any, frames: dict[str, Any]) -> EpisodeMeta:
        if self.sidecar is not None:
            return EpisodeMeta.coerce(self.sidecar["episodes"][ep])
        task_ids = np.unique(table.column("task_index").to_numpy())
        tasks = [self.tasks.get(int(i), "") for i in task_ids]
        tags: dict[str, Any] = {"lerobot": {"repo_id": self.dataset.repo_id, "episode_index": ep}}
        if len(tasks) > 1:
            tags["tasks"] = tasks
        success = None
        if "next.success" in table.column_names:
            n = len(frames["reward"])
            success = bool(_arrow_to_numpy(table.column("next.success"), n, (), "bool")[-1])
        return EpisodeMeta(
            language_instruction=tasks[0] if tasks else "",
            success=success,
            robot=self.dataset.meta.robot_type or "",
            fps=float(self.dataset.fps),
            tags=tags,
        )
