"""Key generation and the allowlist rules."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import zmq.auth

from unilab.teleop.keys import (
    KeyFileError,
    check_allowlist,
    generate_keypair,
    load_public,
    load_secret,
)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_keygen_layout_and_modes(tmp_path: Path) -> None:
    pair = generate_keypair(tmp_path, "robot1")
    assert pair.public_path == tmp_path / "public" / "robot1.key"
    assert pair.secret_path == tmp_path / "private" / "robot1.key_secret"
    assert mode(pair.secret_path) == 0o600 and mode(tmp_path / "private") == 0o700
    assert zmq.auth.load_certificate(pair.public_path) == (pair.public, None)
    assert load_secret(pair.secret_path) == (pair.public, pair.secret)
    assert load_public(pair.public_path) == pair.public
    with pytest.raises(KeyFileError, match="already exists"):
        generate_keypair(tmp_path, "robot1")
    with pytest.raises(KeyFileError, match="key name"):
        generate_keypair(tmp_path, "../evil")


def test_unsafe_keys_and_allowlists_are_refused(tmp_path: Path) -> None:
    pair = generate_keypair(tmp_path, "op")
    os.chmod(pair.secret_path, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_secret(pair.secret_path)
    with pytest.raises(KeyFileError, match="holds no secret"):
        os.chmod(pair.public_path, 0o600)
        load_secret(pair.public_path)
    allow = tmp_path / "allow"
    allow.mkdir()
    with pytest.raises(KeyFileError, match=r"no \*\.key"):
        check_allowlist(allow)
    (allow / "op.key").write_bytes(pair.public_path.read_bytes())
    assert check_allowlist(allow) == [pair.public]
    (allow / "op.key_secret").write_bytes(b"x")
    with pytest.raises(KeyFileError, match="secret key file"):
        check_allowlist(allow)
    with pytest.raises(KeyFileError, match="does not exist"):
        check_allowlist(tmp_path / "nowhere")


def test_keygen_cli(tmp_path: Path) -> None:
    run = [
        sys.executable,
        "-m",
        "unilab.cli",
        "teleop",
        "keygen",
        "--dir",
        str(tmp_path),
        "--name",
        "alice",
    ]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert mode(tmp_path / "private" / "alice.key_secret") == 0o600
    again = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr
