"""`unilab bench vla`: what the flow-matching VLA costs on this machine.

- training: samples/s of one `bc_flow` / `bc_mse` gradient step at batch 64 (augmentation,
  loss, backward, AdamW, EMA; batch already in memory), and of `train_offline` reading a real
  episode store through `FrameDataset` (data loading included);
- inference: latency per action chunk (H actions) at K Euler steps, batch 1 and 64, with
  torch and with onnxruntime on the exported graph, at 1 thread and at all usable cores;
- memory: peak resident memory added by training (Linux VmHWM, reset before training),
  and on CUDA the peak allocated GPU memory;
- the same training and torch-inference figures on CUDA where a GPU exists.

The inputs mirror the tabletop task family's defaults (proprioception 30, action 5, cameras
front and wrist at 64 x 64, 16-word instructions); the model is `VLAConfig()`'s default.
Latencies are medians of repeated calls after warm-up; run it under
`flock /work/bench.lock` on a shared machine and read the load averages in the JSON.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unilab.algos.bc_flow import BCFlow, BCFlowConfig
from unilab.algos.bc_mse import BCMSE, BCMSEConfig
from unilab.algos.behavior_cloning import BehaviorCloning
from unilab.algos.offline import train_offline
from unilab.bench.common import machine_info, print_table, usable_cores, write_json
from unilab.policies.vla.config import VLAConfig
from unilab.policies.vla.policy import VLAPolicy, count_parameters

DEFAULT_OUT = "bench/results/vla.json"
LATENCY_BUDGET_MS = 25.0
"""A robot at 30 Hz executing >= 4 actions per chunk has ~133 ms per chunk; the issue asks
for <= 25 ms at batch 1 so a chunk never holds the control loop up."""
TARGETS = {"latency_budget_over_onnx_b1": 1.0, "latency_budget_over_torch_b1": 1.0}
PACKAGES = ("numpy", "torch", "onnx", "onnxruntime")


def shapes(cameras: list[str], size: int, proprio: int, instruction: int) -> dict[str, Any]:
    out: dict[str, Any] = {"policy": proprio, "instruction": instruction}
    out.update({f"images/{c}": (size, size, 3) for c in cameras})
    return out


def frame_batch(
    policy: VLAPolicy, n: int, proprio_field: str = "obs/policy", seed: int = 0
) -> dict[str, torch.Tensor]:
    """A batch of frames as FrameDataset returns it (random content, right shapes)."""
    g = torch.Generator().manual_seed(seed)
    spec, cfg = policy.inputs, policy.cfg
    out = {
        proprio_field: torch.randn(n, spec.proprio_dim, generator=g),
        "obs/instruction": torch.randint(
            1, spec.vocab_size, (n, spec.instruction_len), generator=g
        ),
        "action": torch.randn(n, cfg.horizon, spec.action_dim, generator=g) * 0.5,
        "action_is_pad": torch.zeros(n, cfg.horizon, dtype=torch.bool),
        "token": torch.full((n,), -1, dtype=torch.int32),
    }
    for cam, (h, w) in spec.cameras.items():
        out[f"images/{cam}"] = torch.randint(0, 256, (n, h, w, 3), generator=g).to(torch.uint8)
    return out


def policy_obs(policy: VLAPolicy, n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    spec = policy.inputs
    obs = {
        "policy": torch.randn(n, spec.proprio_dim, generator=g),
        "instruction": torch.randint(1, spec.vocab_size, (n, spec.instruction_len), generator=g),
    }
    for cam, (h, w) in spec.cameras.items():
        obs[f"images/{cam}"] = torch.randint(0, 256, (n, h, w, 3), generator=g).to(torch.uint8)
    return obs


def timings_ms(
    fn: Callable[[], Any], repeats: int, warmup: int = 2, sync: bool = False
) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if sync:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def median_ms(fn: Callable[[], Any], repeats: int, warmup: int = 2, sync: bool = False) -> float:
    return statistics.median(timings_ms(fn, repeats, warmup, sync))


def make_learner(
    head: str, model: VLAConfig, obs_shapes: dict[str, Any], action_dim: int, device: torch.device
) -> BehaviorCloning:
    if head == "flow":
        return BCFlow(BCFlowConfig(model=model, vocab_size=64), obs_shapes, action_dim, device)
    return BCMSE(BCMSEConfig(model=model, vocab_size=64), obs_shapes, action_dim, device)


def training_rate(learner: BehaviorCloning, batch: dict[str, torch.Tensor], steps: int) -> float:
    dev = learner.device
    on_dev = {k: v.to(dev) for k, v in batch.items()}
    sync = dev.type == "cuda"
    ms = median_ms(lambda: learner.update(on_dev), steps, warmup=3, sync=sync)
    return batch["action"].shape[0] / (ms / 1e3)


def _vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def memory_probe(head: str, steps: int) -> dict[str, float]:
    """Run in a fresh process: RSS once the learner and a batch exist, then the peak RSS
    (VmHWM) over `steps` training steps: the growth is what training itself needs
    (activations, gradients, optimizer state, allocator caches)."""
    torch.set_num_threads(1)
    model = VLAConfig()
    learner = make_learner(
        head, model, shapes(["front", "wrist"], 64, 30, 16), 5, torch.device("cpu")
    )
    batch = frame_batch(learner.policy, 64)
    learner.fit_normalizers(batch)
    before = _vm_kib("VmRSS")
    for _ in range(steps):
        learner.update(batch)
    peak = _vm_kib("VmHWM")
    return {"rss_before_mib": before / 1024, "peak_rss_mib": peak / 1024,
            "training_increase_mib": (peak - before) / 1024}  # fmt: skip


def peak_training_memory(head: str, steps: int) -> dict[str, float] | None:
    """`memory_probe` in a subprocess (Linux; None elsewhere or on failure)."""
    if not Path("/proc/self/status").exists():
        return None
    import json
    import sys

    code = (
        "import json; from unilab.bench.vla import memory_probe; "
        f"print(json.dumps(memory_probe({head!r}, {steps})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=False
    )
    if proc.returncode != 0:
        print(f"memory probe failed: {proc.stderr[-500:]}")
        return None
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def store_training_rate(
    model: VLAConfig, obs_shapes: dict[str, Any], action_dim: int, steps: int, workdir: Path
) -> float:
    """samples/s of train_offline reading a real store (images decoded per batch)."""
    from unilab.data import EpisodeStore, FieldSpec, StoreSchema
    from unilab.data.dataset import FrameDataset

    cams = {
        k.removeprefix("images/"): v[:2] for k, v in obs_shapes.items() if k.startswith("images/")
    }
    schema = StoreSchema.build(
        obs={"policy": obs_shapes["policy"]}, action=action_dim, images=cams,
        extra={"obs/instruction": FieldSpec((obs_shapes["instruction"],), "int64")},
    )  # fmt: skip
    rng = np.random.default_rng(0)
    length, episodes = 50, 24
    path = workdir / "bench_vla.zarr"
    with EpisodeStore.create(path, schema, overwrite=True) as store:
        for _ in range(episodes):
            frames: dict[str, Any] = {
                "obs/policy": rng.standard_normal((length, obs_shapes["policy"])).astype(
                    np.float32
                ),
                "obs/instruction": rng.integers(1, 64, (length, obs_shapes["instruction"])),
                "action": rng.standard_normal((length, action_dim)).astype(np.float32),
                "reward": np.zeros(length, np.float32),
                "terminated": np.arange(length) == length - 1,
                "truncated": np.zeros(length, bool),
                "origin": "sim",
            }
            for cam, (h, w) in cams.items():
                frames[f"images/{cam}"] = rng.integers(0, 256, (length, h, w, 3), dtype=np.uint8)
            store.append_episode(frames, {"fps": 10.0})
    ds = FrameDataset(path, action_horizon=model.horizon)
    learner = make_learner("flow", model, obs_shapes, action_dim, torch.device("cpu"))
    learner.cfg.val_fraction = 0.0
    train_offline(learner, ds, steps=3)  # warm-up (normalizers, first calls)
    result = train_offline(learner, ds, steps=3 + steps)
    ds.close()
    return result.samples_per_s


def onnx_latencies(
    policy: VLAPolicy, path: Path, threads: list[int], repeats: dict[int, int]
) -> dict[str, float]:
    from unilab.deploy.vla_onnx_policy import OnnxVLAPolicy

    out = {}
    for th in threads:
        runner = OnnxVLAPolicy(path, threads=th)
        for n, reps in repeats.items():
            obs = {k: v.numpy() for k, v in policy_obs(policy, n).items()}
            noise = np.random.default_rng(0).standard_normal((n, policy.horizon, policy.action_dim))
            noise = noise.astype(np.float32)
            times = timings_ms(functools.partial(runner.plan, obs, noise), reps)
            out[f"onnx_b{n}_t{th}_ms"] = statistics.median(times)
            out[f"onnx_b{n}_t{th}_min_ms"] = min(times)
    return out


def torch_latencies(
    policy: VLAPolicy, threads: list[int], repeats: dict[int, int], device: torch.device
) -> dict[str, float]:
    out: dict[str, float] = {}
    policy = policy.to(device).eval()
    before = torch.get_num_threads()
    for th in threads:
        torch.set_num_threads(th)
        for n, reps in repeats.items():
            obs = {k: v.to(device) for k, v in policy_obs(policy, n).items()}
            noise = torch.randn(n, policy.horizon, policy.action_dim, device=device)
            sync = device.type == "cuda"
            key = f"torch_b{n}_t{th}_ms" if device.type == "cpu" else f"cuda_b{n}_ms"
            times = timings_ms(functools.partial(policy.sample, obs, noise=noise), reps, sync=sync)
            out[key] = statistics.median(times)
            out[key.replace("_ms", "_min_ms")] = min(times)
        if device.type != "cpu":
            break
    torch.set_num_threads(before)
    return out


def uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unilab bench vla", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (about a minute)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="JSON output path")
    parser.add_argument("--cameras", default="front,wrist", help="comma-separated camera names")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--proprio", type=int, default=30)
    parser.add_argument("--action-dim", type=int, default=5)
    parser.add_argument("--instruction", type=int, default=16)
    parser.add_argument("--width", type=int, default=None, help="override VLAConfig.width")
    parser.add_argument("--steps", type=int, default=None, help="override K (default 10)")
    args = parser.parse_args(argv)
    q = args.quick
    start_uptime = uptime()
    cameras = [c for c in args.cameras.split(",") if c]
    model = VLAConfig()
    if args.width:
        model.width = args.width
    if args.steps:
        model.num_steps = args.steps
    obs_shapes = shapes(cameras, args.image_size, args.proprio, args.instruction)
    cores = usable_cores()
    threads = sorted({1, cores})
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    print(f"VLA bench: {cameras} at {args.image_size}px, H={model.horizon}, K={model.num_steps},"
          f" width {model.width}; {start_uptime}")  # fmt: skip

    # -- training ---------------------------------------------------------------------------
    batch_size = 64
    train_rows: list[dict[str, Any]] = []
    training: dict[str, float] = {}
    params: dict[str, Any] = {}
    for head in ("flow", "mse"):
        learner = make_learner(head, model, obs_shapes, args.action_dim, cpu)
        batch = frame_batch(learner.policy, batch_size)
        learner.fit_normalizers(batch)
        if head == "flow":
            params = count_parameters(learner.policy)
        for th in threads:
            torch.set_num_threads(th)
            rate = training_rate(learner, batch, 4 if q else 12)
            training[f"{head}_update_t{th}_samples_per_s"] = rate
            train_rows.append(
                {"case": f"bc_{head} update, batch {batch_size}, cpu, {th} thread(s)",
                 "samples_s": rate}
            )  # fmt: skip
    torch.set_num_threads(1)
    memory = {head: peak_training_memory(head, 3 if q else 8) for head in ("flow",)}
    with tempfile.TemporaryDirectory() as tmp:
        rate = store_training_rate(model, obs_shapes, args.action_dim, 5 if q else 30, Path(tmp))
    training["flow_store_samples_per_s"] = rate
    train_rows.append(
        {"case": "bc_flow train_offline from a store, 1 thread (data loading incl.)",
         "samples_s": rate}
    )  # fmt: skip

    # -- inference ----------------------------------------------------------------------------
    policy = make_learner("flow", model, obs_shapes, args.action_dim, cpu).actor
    for p in policy.parameters():  # trained-looking: the zero-initialised gates open
        if p.abs().sum() == 0:
            torch.nn.init.normal_(p, 0.0, 0.02)
    repeats = {1: 10 if q else 50, 64: 3 if q else 10}
    latency = torch_latencies(policy, threads, repeats, cpu)
    from unilab.export.vla_onnx import example_inputs, export_vla_onnx, vla_onnx_max_abs_diff

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = export_vla_onnx(policy, Path(tmp) / "vla.onnx")
        export_s = time.perf_counter() - t0
        diff = vla_onnx_max_abs_diff(path, policy, example_inputs(policy, 8, seed=1))
        latency.update(onnx_latencies(policy, path, threads, repeats))
        onnx_mib = path.stat().st_size / 2**20

    # -- GPU ------------------------------------------------------------------------------------
    gpu: dict[str, Any] | None = None
    if torch.cuda.is_available():
        dev = torch.device("cuda")
        gpu = {"name": torch.cuda.get_device_name(0)}
        for head in ("flow", "mse"):
            learner = make_learner(head, model, obs_shapes, args.action_dim, dev)
            for n in (64, 256):
                batch = frame_batch(learner.policy, n)
                learner.fit_normalizers({k: v.to(dev) for k, v in batch.items()})
                torch.cuda.reset_peak_memory_stats()
                gpu[f"{head}_update_b{n}_samples_per_s"] = training_rate(
                    learner, batch, 10 if q else 30
                )
                gpu[f"{head}_peak_gpu_mib_b{n}"] = torch.cuda.max_memory_allocated() / 2**20
        gpu.update(torch_latencies(policy, [1], {1: 50, 64: 20, 1024: 5}, dev))
        policy.to(cpu)

    # -- report -----------------------------------------------------------------------------------
    lat_rows: list[dict[str, Any]] = []
    for key, v in latency.items():
        if key.endswith("_min_ms"):
            continue
        parts = key.removesuffix("_ms").split("_")  # torch_b1_t1, onnx_b64_t2, cuda_b1
        n = int(parts[1][1:])
        lat_rows.append(
            {"runtime": parts[0], "batch": n, "threads": parts[2][1:] if len(parts) > 2 else "",
             "ms_per_chunk": v, "min_ms": latency[key.replace("_ms", "_min_ms")],
             "ms_per_action": v / model.horizon / n}
        )  # fmt: skip
    print()
    print_table(train_rows, ["case", "samples_s"])
    print()
    print_table(
        lat_rows, ["runtime", "batch", "threads", "ms_per_chunk", "min_ms", "ms_per_action"]
    )
    print(f"\nparameters: {params}")
    print(f"training memory: {memory}")
    print(f"export {export_s:.1f} s, {onnx_mib:.1f} MiB, onnxruntime vs torch max diff {diff:.2g}")
    if gpu:
        print(f"GPU: {gpu}")
    # Medians (not the minimum): what a control loop meets on this machine as loaded.
    best_torch = min(
        r["ms_per_chunk"] for r in lat_rows if r["runtime"] == "torch" and r["batch"] == 1
    )
    best_onnx = min(
        r["ms_per_chunk"] for r in lat_rows if r["runtime"] == "onnx" and r["batch"] == 1
    )
    ratios = {
        "latency_budget_over_torch_b1": LATENCY_BUDGET_MS / best_torch,
        "latency_budget_over_onnx_b1": LATENCY_BUDGET_MS / best_onnx,
    }
    # Fastest call: the uncontended cost, when other processes load the machine.
    fastest = {
        rt: min(r["min_ms"] for r in lat_rows if r["runtime"] == rt and r["batch"] == 1)
        for rt in ("torch", "onnx")
    }
    ratios_fastest = {
        f"latency_budget_over_{rt}_b1": LATENCY_BUDGET_MS / v for rt, v in fastest.items()
    }
    end_uptime = uptime()
    print(f"\nratios (>= 1 meets the {LATENCY_BUDGET_MS:.0f} ms budget): medians {ratios}, "
          f"fastest calls {ratios_fastest}\n{end_uptime}")  # fmt: skip
    doc = {
        "benchmark": "vla",
        "quick": q,
        "machine": machine_info(PACKAGES),
        "sizes": {
            "cameras": cameras,
            "image_size": args.image_size,
            "proprio": args.proprio,
            "action_dim": args.action_dim,
            "instruction": args.instruction,
            "batch_size": batch_size,
            "threads": threads,
        },
        "model": {k: getattr(model, k) for k in model.__dataclass_fields__},
        "parameters": params,
        "training": training,
        "latency_ms": latency,
        "memory": memory,
        "export": {"seconds": export_s, "mib": onnx_mib, "max_abs_diff": diff},
        "gpu": gpu,
        "rows": train_rows + lat_rows,
        "ratios": ratios,
        "ratios_fastest_call": ratios_fastest,
        "targets": TARGETS,
        "targets_met": {k: ratios[k] >= v for k, v in TARGETS.items()},
        "uptime_start": start_uptime,
        "uptime_end": end_uptime,
        "load_average_at_end": list(os.getloadavg()),
        "command": "unilab bench vla" + (" --quick" if q else ""),
    }
    print(f"wrote {write_json(args.out, doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
