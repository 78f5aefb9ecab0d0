"""BENCHMARKS.md rendering: top-level results and lent-GPU results in gpu/."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import render


def _write(path: Path, doc: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_report_renders_cpu_and_gpu_results(tmp_path: Path) -> None:
    cpu = {"cpu": "box", "usable_cores": 2, "python": "3.11", "packages": {}}
    _write(tmp_path / "sim.json", {"machine": cpu, "ratios": {"ours_over_raw": 0.97}})
    _write(
        tmp_path / "gpu" / "vla_gpu.json",
        {
            "machine": {"cpu": "xeon", "usable_cores": 16},
            "command": "unilab bench vla --quick",
            "gpu": {"name": "H200", "flow_update_b64_samples_per_s": 4023.0},
            "ratios": {"latency_budget_over_torch_b1": 3.4},
            "notes": ["ran on a lent GPU"],
        },
    )
    (tmp_path / "gpu" / "vla_gpu.png").write_bytes(b"\x89PNG")
    text = render(tmp_path)
    # The machine section is the CPU box's, not the lent GPU's.
    assert "- CPU: box (2 usable cores)" in text
    assert "| gpu/vla_gpu | `latency_budget_over_torch_b1` | 3.4 |" in text
    assert "Command: `unilab bench vla --quick`" in text
    assert "Machine: xeon, H200." in text
    assert "- `flow_update_b64_samples_per_s`: 4,023" in text
    assert "- ran on a lent GPU" in text
    assert "![gpu/vla_gpu](bench/results/gpu/vla_gpu.png)" in text
