"""Input augmentation: random shifts move each image by at most `pad` pixels (edges
repeated), colour jitter stays in [0, 1], vector noise stays within its bound, per-sample
randomness, reproducible by seed."""

from __future__ import annotations

import torch

from unilab.policies.vla.augment import AugmentConfig, augment_images, random_shift, vector_noise


def test_shift_moves_each_image_by_at_most_pad_pixels() -> None:
    n, h, w, pad = 64, 12, 10, 3
    images = torch.zeros(n, h, w, 3, dtype=torch.uint8)
    images[:, 5, 4] = 255  # one bright pixel away from the borders
    out = random_shift(images, pad, torch.Generator().manual_seed(0))
    assert out.shape == images.shape and out.dtype == torch.uint8
    ys, xs = [], []
    for img in out:
        where = (img[..., 0] == 255).nonzero()
        assert where.shape[0] == 1  # moved, not smeared
        ys.append(int(where[0, 0]) - 5)
        xs.append(int(where[0, 1]) - 4)
    assert max(map(abs, ys)) <= pad and max(map(abs, xs)) <= pad
    assert len(set(zip(ys, xs, strict=True))) > 10  # per-sample shifts
    # Edges repeat: a constant image stays constant.
    flat = torch.full((4, h, w, 3), 77, dtype=torch.uint8)
    assert bool((random_shift(flat, pad) == 77).all())


def test_augment_returns_unit_floats_reproducibly() -> None:
    images = torch.randint(0, 256, (16, 8, 8, 3), dtype=torch.uint8)
    cfg = AugmentConfig(shift_pad=2, brightness=0.5, contrast=0.5, saturation=0.5)
    a = augment_images(images, cfg, torch.Generator().manual_seed(1))
    b = augment_images(images, cfg, torch.Generator().manual_seed(1))
    c = augment_images(images, cfg, torch.Generator().manual_seed(2))
    assert a.dtype == torch.float32 and a.shape == images.shape
    assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    torch.testing.assert_close(a, b)
    assert float((a - c).abs().max()) > 0.05
    off = AugmentConfig(shift_pad=0, brightness=0.0, contrast=0.0, saturation=0.0)
    torch.testing.assert_close(augment_images(images, off), images.float() / 255.0)


def test_vector_noise_is_bounded_per_entry_and_reproducible() -> None:
    x = torch.arange(4000, dtype=torch.float32).reshape(1000, 4)
    noisy = vector_noise(x, 0.01, torch.Generator().manual_seed(3))
    delta = noisy - x
    assert delta.abs().max() <= 0.01 + 1e-3  # float32 rounding of values up to 4000
    assert delta.min() < -0.009 and delta.max() > 0.009  # both signs, near the bound
    assert delta.std() > 0.005  # spread over the range, not a constant offset
    assert torch.equal(noisy, vector_noise(x, 0.01, torch.Generator().manual_seed(3)))
    assert vector_noise(x, 0.0) is x
