"""CurveZMQ keys: generate, load, and the allowlist of client public keys.

`generate_keypair(dir, name)` writes

    <dir>/public/<name>.key          the public key (share it; copy it into an allowlist)
    <dir>/private/<name>.key_secret  public + secret key, mode 0600, directory 0700

in the czmq certificate format that `zmq.auth.load_certificate` reads. The secret file is
created with mode 0600 from the start (`os.open(..., 0o600)`), never chmod-ed afterwards,
so it is not readable by others for even a moment.

A robot host trusts exactly the `*.key` files in its allowlist directory (loaded by
pyzmq's `ThreadAuthenticator.configure_curve`). It refuses to start when that directory
holds a secret file or when its own secret file is readable by group or others.

    unilab teleop keygen --dir keys --name operator1
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth


class KeyFileError(ValueError):
    """A key file or allowlist that is missing, malformed or unsafe."""


@dataclass(frozen=True)
class KeyPair:
    public: bytes
    """Z85-encoded public key (40 bytes)."""
    secret: bytes
    public_path: Path
    secret_path: Path


def _write(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _cert_text(public: bytes, secret: bytes | None, name: str) -> str:
    lines = [
        f"#   ****  Generated on {time.strftime('%Y-%m-%d %H:%M:%S')} by unilab teleop keygen  ****",
        f"#   ZeroMQ CURVE {'**Secret**' if secret else 'Public'} Certificate for {name!r}",
        f"#   {'Keep this file private (mode 0600).' if secret else 'Share this file.'}",
        "",
        "metadata",
        f'    name = "{name}"',
        "curve",
        f'    public-key = "{public.decode("ascii")}"',
    ]
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def generate_keypair(directory: str | os.PathLike[str], name: str) -> KeyPair:
    """A new CURVE key pair under `directory` (see the module docstring). Refuses to
    overwrite an existing key of that name."""
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise KeyFileError(f"key name {name!r}: use letters, digits, '-', '_' or '.'")
    root = Path(directory)
    public_dir, private_dir = root / "public", root / "private"
    public_dir.mkdir(parents=True, exist_ok=True)
    private_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(private_dir, 0o700)
    public_path = public_dir / f"{name}.key"
    secret_path = private_dir / f"{name}.key_secret"
    for p in (public_path, secret_path):
        if p.exists():
            raise KeyFileError(f"{p} already exists; choose another name or remove it first")
    public, secret = zmq.curve_keypair()
    _write(secret_path, _cert_text(public, secret, name), 0o600)
    _write(public_path, _cert_text(public, None, name), 0o644)
    return KeyPair(public, secret, public_path, secret_path)


def load_secret(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(public, secret) from a `.key_secret` file that only its owner can read."""
    p = Path(path)
    if not p.is_file():
        raise KeyFileError(f"no secret key file at {p}; make one with `unilab teleop keygen`")
    mode = stat.S_IMODE(p.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"{p} is readable by group or others (mode {mode:o}); run `chmod 600 {p}`"
        )
    try:
        public, secret = zmq.auth.load_certificate(p)
    except (ValueError, OSError) as exc:
        raise KeyFileError(f"{p} is not a CURVE certificate: {exc}") from None
    if secret is None:
        raise KeyFileError(f"{p} holds no secret key (is it a public .key file?)")
    return public, secret


def load_public(path: str | os.PathLike[str]) -> bytes:
    """The public key from a `.key` (or `.key_secret`) certificate file."""
    p = Path(path)
    if not p.is_file():
        raise KeyFileError(f"no public key file at {p}")
    try:
        public, _ = zmq.auth.load_certificate(p)
    except (ValueError, OSError) as exc:
        raise KeyFileError(f"{p} is not a CURVE certificate: {exc}") from None
    return public


def check_allowlist(directory: str | os.PathLike[str]) -> list[bytes]:
    """The public keys a robot host will accept; errors when the directory is unsafe."""
    d = Path(directory)
    if not d.is_dir():
        raise KeyFileError(f"allowlist directory {d} does not exist")
    secrets = sorted(p.name for p in d.iterdir() if p.name.endswith(".key_secret"))
    if secrets:
        raise KeyFileError(
            f"allowlist {d} holds secret key file(s) {secrets}: it must hold only public "
            "*.key files; move the secrets out"
        )
    keys = [load_public(p) for p in sorted(d.glob("*.key"))]
    if not keys:
        raise KeyFileError(f"allowlist {d} holds no *.key files: no client could connect")
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="unilab teleop keygen",
        description="Make a CurveZMQ key pair: <dir>/public/<name>.key (share; copy into a "
        "robot host's allowlist directory) and <dir>/private/<name>.key_secret (mode 0600).",
    )
    parser.add_argument("--dir", default="keys", help="key directory (default: keys)")
    parser.add_argument("--name", required=True, help="key name, e.g. robot1 or operator-alice")
    args = parser.parse_args(argv)
    try:
        pair = generate_keypair(args.dir, args.name)
    except KeyFileError as exc:
        print(f"unilab teleop keygen: error: {exc}", file=sys.stderr)
        return 2
    print(f"public key: {pair.public_path}")
    print(f"secret key: {pair.secret_path} (mode 0600)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
