"""The word vocabulary of task instructions: a token id is a word's position in WORDS.

Shipped with the code (no download) and append-only: ids of existing words never change,
so the token embedding of a trained policy stays valid. A task whose templates use a word
missing here fails at construction with the missing words named; add them at the END.
"""

WORDS: tuple[str, ...] = (
    "<pad>",
    "<unk>",
    # The tabletop family (arm_pick_place, arm_move_side, arm_stack, arm_around_obstacle).
    "a", "and", "around", "barrier", "block", "blocks", "blue", "bowl", "bowls", "bring",
    "build", "carry", "circle", "cube", "cyan", "disc", "drop", "each", "far", "from", "get",
    "green", "in", "into", "it", "left", "mark", "move", "near", "of", "on", "one", "onto",
    "orange", "other", "over", "past", "pick", "pink", "place", "purple", "put", "red",
    "right", "side", "stack", "table", "take", "the", "to", "top", "tower", "up", "wall",
    "yellow",
)  # fmt: skip
