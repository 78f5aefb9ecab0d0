"""Per-frame label scores against a known truth: accuracy, per-class recall and precision,
and the confusion matrix (rows: true label, columns: predicted), over SEGMENTS codes."""

from __future__ import annotations

from typing import Any

import numpy as np

from unilab.data.schema import SEGMENTS


def confusion(true: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """(len(SEGMENTS), len(SEGMENTS)) int64 counts; rows true, columns predicted."""
    true, pred = np.asarray(true), np.asarray(pred)
    if true.shape != pred.shape:
        raise ValueError(f"true labels {true.shape} and predictions {pred.shape} differ in shape")
    k = len(SEGMENTS)
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (true.astype(np.int64), pred.astype(np.int64)), 1)
    return cm


def scores(cm: np.ndarray) -> dict[str, Any]:
    """Accuracy, per-class frames / recall / precision (None where undefined), the matrix."""
    total = int(cm.sum())
    per_class = {}
    for c in range(1, len(SEGMENTS)):  # "none" is never a true label of a scored frame
        row, col = int(cm[c].sum()), int(cm[:, c].sum())
        per_class[SEGMENTS[c]] = {
            "frames": row,
            "recall": float(cm[c, c] / row) if row else None,
            "precision": float(cm[c, c] / col) if col else None,
        }
    return {
        "frames": total,
        "accuracy": float(np.trace(cm) / total) if total else None,
        "per_class": per_class,
        "confusion": {"rows_true_cols_predicted": list(SEGMENTS), "matrix": cm.tolist()},
    }
