"""units: a typed component in Python (componentize-py).

It knows nothing of datanotes: the engine turns each function the world exports into a tool,
checks the arguments against the WIT types (wit/units.wit) and answers the results as JSON.
"""

from collections import Counter
import re

import wit_world
from componentize_py_types import Err
from wit_world import Unit

# Metres per unit.
METRES = {
    Unit.MM: 0.001,
    Unit.CM: 0.01,
    Unit.M: 1.0,
    Unit.KM: 1000.0,
    Unit.INCH: 0.0254,
    Unit.FOOT: 0.3048,
    Unit.MILE: 1609.344,
}

WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}


class WitWorld(wit_world.WitWorld):
    def convert(self, value: float, from_: Unit, to: Unit) -> float:
        return value * METRES[from_] / METRES[to]

    def word_counts(self, text: str, top):
        counts = Counter(w.lower() for w in re.findall(r"\w+", text))
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return ranked if top is None else ranked[:top]

    def parse_number(self, text: str) -> float:
        t = text.strip().lower()
        try:
            return float(t)
        except ValueError:
            pass
        total = 0
        for part in re.split(r"[\s-]+", t):
            if part not in WORDS:
                raise Err(f"{text!r} is not a number: {part!r} is not a number word")
            total += WORDS[part]
        return float(total)
