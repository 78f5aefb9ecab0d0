"""Language instructions: templates with slots, a shipped word vocabulary, token ids.

A task declares `InstructionTemplates`: sentences with `{slot}` fields and, per slot, the
words it may take (colours, sides, ...). Every combination is enumerated once at start-up,
so drawing an episode's instruction is an index computation (no string work per step), and
its token ids come from a table: (n, length) int64, padded with PAD_ID (0).

The vocabulary is `unilab.tasks.vocabulary.WORDS`, a list in the repo: ids are positions in
it and never change, so a trained policy's token embedding stays valid when words are
added (at the end). `Vocabulary.check_covers` names any template word missing from it.
"""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from unilab.tasks.vocabulary import WORDS

PAD = "<pad>"
UNK = "<unk>"
PAD_ID = 0
UNK_ID = 1
_WORD = re.compile(r"[a-z0-9]+")


def split_words(text: str) -> list[str]:
    """Lower-case words of a sentence; punctuation is dropped."""
    return _WORD.findall(text.lower())


class Vocabulary:
    """Word <-> id; id 0 pads, id 1 stands for a word the vocabulary lacks."""

    def __init__(self, words: Sequence[str] = WORDS) -> None:
        if tuple(words[:2]) != (PAD, UNK):
            raise ValueError(f"a vocabulary starts with {PAD!r} and {UNK!r}, got {list(words[:2])}")
        if len(set(words)) != len(words):
            dup = sorted({w for w in words if list(words).count(w) > 1})
            raise ValueError(f"the vocabulary lists {dup} more than once")
        self.words = tuple(words)
        self._ids = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def missing(self, texts: Iterable[str]) -> list[str]:
        """Words of texts that the vocabulary lacks, sorted."""
        return sorted({w for t in texts for w in split_words(t) if w not in self._ids})

    def check_covers(self, texts: Iterable[str], what: str) -> None:
        missing = self.missing(texts)
        if missing:
            raise ValueError(
                f"{what}: words {missing} are not in the vocabulary "
                "(unilab/tasks/vocabulary.py); append them at the end of WORDS"
            )

    def encode(self, text: str, length: int) -> np.ndarray:
        """(length,) int64 ids, padded with PAD_ID; a ValueError when text is too long."""
        words = split_words(text)
        if len(words) > length:
            raise ValueError(
                f"instruction {text!r} has {len(words)} words; the token length is {length}"
            )
        ids = np.full(length, PAD_ID, dtype=np.int64)
        ids[: len(words)] = [self._ids.get(w, UNK_ID) for w in words]
        return ids

    def decode(self, ids: np.ndarray) -> list[str]:
        """(n, length) or (length,) ids -> text per row (padding dropped)."""
        arr = np.asarray(ids)
        rows = arr[None] if arr.ndim == 1 else arr
        if rows.ndim != 2:
            raise ValueError(f"token ids must be (length,) or (n, length), got shape {arr.shape}")
        if rows.size and (rows.min() < 0 or rows.max() >= len(self.words)):
            raise ValueError(f"token ids must be in 0..{len(self.words) - 1}")
        return [" ".join(self.words[i] for i in row if i != PAD_ID) for row in rows.tolist()]


@dataclass(frozen=True)
class InstructionTemplates:
    """Sentences with `{slot}` fields and the words each slot takes.

    `slots` maps a slot name to its values in a fixed order: a task picks values by index
    (e.g. the colour index of the named cube), and `index(template, **values)` combines
    them. Every template must use every slot (ask the same question in different words).
    """

    templates: tuple[str, ...]
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.templates:
            raise ValueError("InstructionTemplates needs at least one template")
        for t in self.templates:
            used = {f for _, f, _, _ in string.Formatter().parse(t) if f}
            if used != set(self.slots):
                raise ValueError(
                    f"template {t!r} uses slots {sorted(used)}; every template must use "
                    f"exactly {sorted(self.slots)}"
                )
        for name, values in self.slots.items():
            if not values:
                raise ValueError(f"slot {name!r} has no values")

    @property
    def slot_names(self) -> tuple[str, ...]:
        return tuple(self.slots)

    def texts(self) -> list[str]:
        """Every instruction, in index order: template-major, then slots in declared order."""
        names = self.slot_names
        combos = list(itertools.product(*(self.slots[n] for n in names)))
        return [
            t.format(**dict(zip(names, c, strict=True))) for t in self.templates for c in combos
        ]

    def index(self, template: np.ndarray, **values: np.ndarray) -> np.ndarray:
        """Flat instruction index per env from a template index and one value index per slot."""
        idx = np.asarray(template, dtype=np.int64)
        for name in self.slot_names:
            idx = idx * len(self.slots[name]) + np.asarray(values[name], dtype=np.int64)
        return idx


class InstructionTable:
    """Token ids of every instruction of some templates, for drawing by index."""

    def __init__(
        self, templates: InstructionTemplates, length: int, vocab: Vocabulary | None = None
    ) -> None:
        self.templates = templates
        self.vocab = vocab or Vocabulary()
        self.length = int(length)
        self.texts = templates.texts()
        self.vocab.check_covers(self.texts, "instruction templates")
        longest = max(len(split_words(t)) for t in self.texts)
        if longest > self.length:
            raise ValueError(
                f"instruction_length={self.length} is too short: the longest instruction has "
                f"{longest} words"
            )
        self.ids = np.stack([self.vocab.encode(t, self.length) for t in self.texts])

    def draw(self, rng: np.random.Generator, n: int, **values: np.ndarray) -> np.ndarray:
        """(n,) instruction indices: a random template each, the given slot value indices."""
        template = rng.integers(0, len(self.templates.templates), n)
        return self.templates.index(template, **values)
