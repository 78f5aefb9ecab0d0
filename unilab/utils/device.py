"""Pick the learner device: CUDA (which also covers ROCm builds), then MPS, then XPU, else CPU."""

from __future__ import annotations

import torch

VALID = "auto, cpu, cuda, cuda:N, mps, xpu, xpu:N"


class DeviceError(ValueError):
    """`device=` names no device, or one this machine does not have; the message says which exist.

    The training entry point turns it into a config error (exit 2, one message)."""


def _has_mps() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _has_xpu() -> bool:
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _has_mps():
        found.append("mps")
    if _has_xpu():
        found += [f"xpu:{i}" for i in range(torch.xpu.device_count())]
    return found


def select_device(name: str) -> torch.device:
    """Resolve `device=` to a torch.device; an absent device is a DeviceError naming what exists."""
    name = name.strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        if _has_mps():
            return torch.device("mps")
        if _has_xpu():
            return torch.device("xpu", 0)
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(f"device={name!r} is not a device name; valid: {VALID}") from None
    present = available_devices()
    wanted = f"{device.type}:{device.index or 0}" if device.type in ("cuda", "xpu") else device.type
    if wanted not in present:
        raise DeviceError(
            f"device={name!r} was asked for but is not present on this machine; "
            f"available: {', '.join(present)}"
        )
    return device


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        hip = getattr(torch.version, "hip", None)
        kind = "ROCm" if hip else "CUDA"
        return f"{device} ({kind}: {torch.cuda.get_device_name(device)})"
    return str(device)
