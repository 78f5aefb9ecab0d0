from __future__ import annotations

import time

import pytest
import torch

from unilab.utils.device import DeviceError, available_devices, select_device
from unilab.utils.profiler import Profiler


def test_auto_picks_the_best_present_device() -> None:
    device = select_device("auto")
    if torch.cuda.is_available():
        assert device.type == "cuda"
    else:
        assert device.type in ("mps", "xpu", "cpu")
        assert device.type == "cpu" or device.type in {d.split(":")[0] for d in available_devices()}


def test_cpu_is_always_available() -> None:
    assert select_device("CPU") == torch.device("cpu")


def test_absent_device_names_what_exists() -> None:
    absent = "cuda:63"
    with pytest.raises(DeviceError) as err:
        select_device(absent)
    assert "not present" in str(err.value) and "cpu" in str(err.value)


def test_nonsense_device_lists_valid_names() -> None:
    with pytest.raises(DeviceError, match="valid: auto, cpu"):
        select_device("gpu-please")


def test_profiler_sections_add_up() -> None:
    prof = Profiler()
    for _ in range(3):
        with prof.section("sleep"):
            time.sleep(0.01)
    assert prof.counts["sleep"] == 3
    assert 0.03 <= prof.totals["sleep"] < 0.5
    assert "sleep" in prof.report()
