"""How verbs are declared, found and run.

A verb module is any module of this package with a module-level `VERBS` list; adding one is
the only change a new verb needs (see `unilab/cli/__init__.py`). Each `Verb` names a function
that fills its own `argparse` parser and a `run(args) -> exit code` that calls a library
function. Dispatch walks the leading words (`unilab data info ...`) to a leaf verb, then parses
the rest with `parse_intermixed_args`, so options and `key=value` overrides come in any order.

Exit codes: 0 done, 2 bad input (one message, no traceback, nothing started), 3 an optional
part this environment lacks, 130 interrupted; a verb may return others (deploy: 4).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from unilab.config.errors import ConfigError
from unilab.registry import UnknownNameError

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_NOT_AVAILABLE = 3
EXIT_INTERRUPTED = 130

PROG = "unilab"


class NotAvailableError(RuntimeError):
    """An optional part (a package, a device) that this environment does not have."""


@dataclass(frozen=True)
class Verb:
    """One command: `unilab <name>`, or `unilab <parent> <name>` for a sub-verb."""

    name: str
    help: str
    """One line, shown in the parent's `--help`."""
    run: Callable[[argparse.Namespace], int] | None = None
    """Does the work; None makes this verb a group of the verbs that name it as parent."""
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds the verb's options and positionals to its parser."""
    description: str = ""
    """The paragraph of the verb's own `--help` (default: `help`)."""
    parent: str = ""
    """Words of the group this verb belongs to, e.g. "data" or "teleop"."""
    order: int = 50
    """Position in the parent's `--help` (then declaration order)."""
    raw: bool = False
    """Pass every following word unparsed as `args.rest` (a verb that parses its own)."""
    more_help: Callable[[argparse.Namespace], str] | None = None
    """Extra text after `--help` that depends on the other arguments (train: config keys)."""
    epilog: str = ""

    @property
    def path(self) -> str:
        return f"{self.parent} {self.name}".strip()


@dataclass
class _Node:
    verb: Verb | None
    children: dict[str, _Node] = field(default_factory=dict)


def discover(package: str = "unilab.cli") -> list[Verb]:
    """Every `VERBS` entry of every module of the package (but `_private` ones and
    `__main__`)."""
    pkg = importlib.import_module(package)
    verbs: list[Verb] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        verbs += list(getattr(module, "VERBS", ()))
    return verbs


def _tree(verbs: Sequence[Verb]) -> _Node:
    root = _Node(None)
    by_path: dict[str, _Node] = {"": root}
    # Stable sort: verbs of equal order keep their declaration order.
    for verb in sorted(verbs, key=lambda v: (v.parent.count(" "), v.parent, v.order)):
        parent = by_path.get(verb.parent)
        if parent is None:
            raise RuntimeError(f"verb {verb.path!r}: no group verb {verb.parent!r} declares it")
        if verb.name in parent.children:
            raise RuntimeError(f"verb {verb.path!r} is declared twice")
        node = parent.children[verb.name] = _Node(verb)
        by_path[verb.path] = node
    return root


def _group_parser(node: _Node, words: list[str]) -> argparse.ArgumentParser:
    verb = node.verb
    parser = argparse.ArgumentParser(
        prog=" ".join([PROG, *words]),
        description=(verb.description or verb.help)
        if verb
        else "Train robot policies on batched MuJoCo; export, play, evaluate and deploy them.",
        epilog=f"Run `{' '.join([PROG, *words])} <verb> --help` for a verb's options.",
    )
    sub = parser.add_subparsers(metavar="<verb>", title="verbs")
    for name, child in node.children.items():  # already in order (see _tree)
        assert child.verb is not None
        sub.add_parser(name, help=child.verb.help.replace("%", "%%"))
    return parser


def leaf_parser(verb: Verb) -> argparse.ArgumentParser:
    """The parser of a verb that runs; `-h/--help` prints its help (and `more_help`)."""
    text = verb.description or verb.help
    parser = argparse.ArgumentParser(
        prog=f"{PROG} {verb.path}",
        description="\n\n".join(textwrap.fill(par, 88) for par in text.split("\n\n")),
        epilog=verb.epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=verb.more_help is None,
    )
    if verb.more_help is not None:
        parser.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    if verb.arguments is not None:
        verb.arguments(parser)
    return parser


def _choose(node: _Node, words: list[str], word: str) -> int:
    parser = _group_parser(node, words)
    close = difflib.get_close_matches(word, list(node.children), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    parser.print_usage(sys.stderr)
    print(
        f"{parser.prog}: error: unknown verb {word!r}{hint} (verbs: {', '.join(node.children)})",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def dispatch(argv: Sequence[str], verbs: Sequence[Verb]) -> int:
    """Run the verb the leading words of argv name; see the module doc for exit codes."""
    node, words, rest = _tree(verbs), list[str](), list(argv)
    while node.verb is None or node.verb.run is None:
        if not rest:
            parser = _group_parser(node, words)
            parser.print_usage(sys.stderr)
            print(
                f"{parser.prog}: error: choose a verb: {', '.join(node.children)}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        word = rest.pop(0)
        if word in ("-h", "--help"):
            _group_parser(node, words).print_help()
            return EXIT_OK
        if word == "--version" and not words:
            from unilab import __version__

            print(f"{PROG} {__version__}")
            return EXIT_OK
        if word not in node.children:
            return _choose(node, words, word)
        node = node.children[word]
        words.append(word)
    verb, run = node.verb, node.verb.run
    try:
        if verb.raw:
            args = argparse.Namespace(rest=rest)
        else:
            parser = leaf_parser(verb)
            args = parser.parse_intermixed_args(rest)
            if verb.more_help is not None and args.help:
                parser.print_help()
                print()
                print(verb.more_help(args))
                return EXIT_OK
        return int(run(args))
    except SystemExit as exc:  # argparse (ours or a raw verb's own): usage error or --help
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or EXIT_OK
        print(exc.code, file=sys.stderr)
        return 1
    except (ConfigError, UnknownNameError) as exc:
        print(f"{PROG} {verb.path}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NotAvailableError as exc:
        print(f"{PROG} {verb.path}: {exc}", file=sys.stderr)
        return EXIT_NOT_AVAILABLE
    except KeyboardInterrupt:
        print(f"{PROG} {verb.path}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
