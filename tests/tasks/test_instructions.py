"""Instructions: every template of every tabletop task is covered by the shipped
vocabulary, token ids round-trip to the text, ids are stable, bad input is named."""

from __future__ import annotations

import numpy as np
import pytest

from unilab.tasks.instructions import (
    PAD_ID,
    UNK_ID,
    InstructionTable,
    InstructionTemplates,
    Vocabulary,
    split_words,
)
from unilab.tasks.registry import TASKS
from unilab.tasks.tabletop import TabletopTask

TABLETOP = [name for name, entry in TASKS.items() if issubclass(entry.task_cls, TabletopTask)]


def test_the_family_has_five_tasks() -> None:
    assert sorted(TABLETOP) == [
        "arm_around_obstacle",
        "arm_move_side",
        "arm_move_to_goal",
        "arm_pick_place",
        "arm_stack",
    ]


@pytest.mark.parametrize("name", TABLETOP)
def test_every_instruction_round_trips_through_token_ids(name: str) -> None:
    task_cls = TASKS.get(name).task_cls
    assert issubclass(task_cls, TabletopTask)
    table = InstructionTable(task_cls.templates, length=16)
    assert table.ids.dtype == np.int64 and table.ids.shape == (len(table.texts), 16)
    decoded = table.vocab.decode(table.ids)
    assert decoded == [" ".join(split_words(t)) for t in table.texts]
    assert (table.ids != UNK_ID).all()
    # Every slot value appears in the texts of its template (a variation the policy sees).
    for slot, values in task_cls.templates.slots.items():
        for value in values:
            assert any(value in t for t in table.texts), (slot, value)


def test_token_ids_are_stable() -> None:
    vocab = Vocabulary()
    # Append-only: these ids are baked into trained token embeddings.
    assert vocab.words[:4] == ("<pad>", "<unk>", "a", "and")
    assert PAD_ID == 0 and vocab.encode("put the red cube", 6).tolist() == [
        vocab.words.index(w) for w in ("put", "the", "red", "cube")
    ] + [0, 0]


def test_bad_instructions_are_named() -> None:
    vocab = Vocabulary()
    with pytest.raises(ValueError, match="has 5 words; the token length is 3"):
        vocab.encode("put the red cube away", 3)
    assert vocab.encode("put the zebra", 4).tolist()[2] == UNK_ID
    with pytest.raises(ValueError, match=r"\['feed', 'zebra'\] are not in the vocabulary"):
        InstructionTable(InstructionTemplates(("feed the {animal}",), {"animal": ("zebra",)}), 8)
    with pytest.raises(ValueError, match="instruction_length=2 is too short"):
        InstructionTable(InstructionTemplates(("put the {c} cube",), {"c": ("red",)}), 2)
    with pytest.raises(ValueError, match="every template must use exactly"):
        InstructionTemplates(("put the cube",), {"c": ("red",)})
    with pytest.raises(ValueError, match="must be in 0"):
        vocab.decode(np.array([len(vocab)]))


def test_draw_combines_template_and_slot_values() -> None:
    templates = InstructionTemplates(
        ("put the {colour} cube to the {side}", "move the {colour} block {side}"),
        {"colour": ("red", "blue"), "side": ("left", "right")},
    )
    table = InstructionTable(templates, 8)
    rng = np.random.default_rng(0)
    idx = table.draw(rng, 50, colour=np.ones(50, int), side=np.zeros(50, int))
    texts = {table.texts[i] for i in idx}
    assert texts == {"put the blue cube to the left", "move the blue block left"}
