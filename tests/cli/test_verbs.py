"""The verb machinery: every verb answers --help, options and overrides come in any order,
a new verb is one module, and the LeRobot verbs say where lerobot lives when it is absent."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from unilab.cli import main
from unilab.cli.options import split_items
from unilab.cli.verb import Verb, discover, dispatch, leaf_parser

VERBS = discover("unilab.cli")


def _paths() -> list[list[str]]:
    return [v.path.split() for v in VERBS]


def test_every_verb_group_and_the_top_level_answer_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in VERBS:
        if not verb.parent:
            assert verb.name in out
    for words in _paths():
        verb = next(v for v in VERBS if v.path == " ".join(words))
        if verb.raw:
            continue  # a benchmark's own parser; checked below for one
        assert main([*words, "--help"]) == 0, words
        out = capsys.readouterr().out
        assert out.startswith(f"usage: unilab {' '.join(words)}"), out[:200]
    assert main(["bench", "report", "--help"]) == 0
    assert "usage: unilab bench report" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["data"],
            "choose a verb: info, validate, repair, export-lerobot, import-lerobot, segment, curate",
        ),
        (["bench"], "choose a verb: sim, runtime"),
        (["dta", "info"], "unknown verb 'dta'; did you mean data?"),
        (["bench", "warp-speed"], "unknown verb 'warp-speed'"),
        (["play", "--episods", "3"], "unrecognized arguments: --episods"),
        (["play", "a", "b"], "takes one run directory, policy.onnx or 'expert', got ['a', 'b']"),
    ],
)
def test_bad_words_exit_2_with_one_message(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["RUN", "--episodes", "200", "record=X", "task.obs_noise=0.1"],
        ["--episodes", "200", "RUN", "record=X", "task.obs_noise=0.1"],
        ["record=X", "--episodes", "200", "task.obs_noise=0.1", "RUN"],
        ["record=X", "RUN", "task.obs_noise=0.1", "--episodes=200"],
    ],
)
def test_options_target_and_overrides_in_any_order(argv: list[str]) -> None:
    play = next(v for v in VERBS if v.path == "play")
    args = leaf_parser(play).parse_intermixed_args(argv)
    assert args.episodes == 200
    assert split_items(args.items, "play", "run") == ("RUN", ["record=X", "task.obs_noise=0.1"])
    train = next(v for v in VERBS if v.path == "train")
    args = leaf_parser(train).parse_intermixed_args(["algo.lr=3e-4", "--quiet", "task=arm_reach"])
    assert args.quiet and args.items == ["algo.lr=3e-4", "task=arm_reach"]


def test_a_new_verb_is_one_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / "extra_cli"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "demo.py").write_text(
        textwrap.dedent(
            """
            from unilab.cli.verb import Verb

            def _arguments(p):
                p.add_argument("--out", default="keys")
                p.add_argument("items", nargs="*")

            def _run(args):
                print("mkpair", args.out, args.items)
                return 0

            VERBS = [
                Verb("demo", "demo tools"),
                Verb("mkpair", "make a key pair", _run, _arguments, parent="demo"),
            ]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    verbs = [*VERBS, *discover("extra_cli")]
    assert dispatch(["demo", "mkpair", "a=1", "--out", "k", "b=2"], verbs) == 0
    assert capsys.readouterr().out.strip() == "mkpair k ['a=1', 'b=2']"
    assert dispatch(["demo", "--help"], verbs) == 0
    assert "make a key pair" in capsys.readouterr().out
    orphan = Verb("orphan-verb", "x", lambda a: 0, parent="no-such-group")
    with pytest.raises(RuntimeError, match="no group verb 'no-such-group'"):
        dispatch(["orphan-verb"], [*VERBS, orphan])


@pytest.mark.parametrize("verb", ["export-lerobot", "import-lerobot"])
def test_lerobot_verbs_point_at_the_lerobot_environment(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A None entry makes `import lerobot...` fail as it does where lerobot is not installed.
    for name in ("lerobot", "lerobot.datasets", "lerobot.datasets.lerobot_dataset"):
        monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / "out"
    args = [str(tmp_path / "s.zarr"), str(out), "me/demo"] if verb == "export-lerobot" else []
    if verb == "import-lerobot":
        args = [str(tmp_path / "dataset"), str(tmp_path / "s.zarr"), "--origin", "human"]
    assert main(["data", verb, *args]) == 3
    err = capsys.readouterr().err
    assert "make test-lerobot" in err and ".venv-lerobot" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "s.zarr").exists()


def test_lerobot_verbs_check_their_own_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "export-lerobot", "s", "o", "r", "--episodes", "1-x"]) == 2
    assert "--episodes '1-x' must be episode indices" in capsys.readouterr().err
    assert main(["data", "export-lerobot", "s", "o", "r", "--images", "gif"]) == 2
    assert "invalid choice: 'gif'" in capsys.readouterr().err
