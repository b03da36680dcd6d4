"""Normalise a final answer before math-verify grades it: degree marks, units, LaTeX spacing.

Geometry answers arrive as `60^\\circ`, `\\text{60 degrees}`, `48\\,cm^2`, `\\$48`: EasyR1's grader
(mathruler) strips such decorations, and math-verify handles only some of them. Everything here
removes a decoration, never a digit or an operator, so two answers that differ in value still
differ after it. Digits split by spaces are left alone on purpose ("4 8" is not 48), although
mathruler's space-deleting normaliser accepts them.

Linear-time string work only: callers bound the answer length first (math_verifiers.MAX_ANSWER_CHARS).
"""

from __future__ import annotations

import re

from mindrl.rewards.extract import braced_from

# Thin/medium/thick/negative spaces, the control space, `~`, quads: all plain spaces here.
_LATEX_SPACES = re.compile(r"\\[,:;! ]|\\q?quad\b|~")

# Wrappers that carry no meaning when they enclose the whole answer.
# `\text{ }` and the like: nothing but spacing.
_EMPTY_TEXT = re.compile(r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*\}")

_WRAPPERS = ("\\text", "\\textrm", "\\textbf", "\\mathrm", "\\mathbf", "\\mbox")

# A degree mark: `^\circ`, `^{\circ}`, `^°`, `°`, `\degree`, with inner spaces; a bare `\circ`
# only right after a number or a group (elsewhere it is composition, an operator).
_DEGREE = re.compile(
    r"\^\s*\{\s*(?:\\circ|°)\s*\}|\^\s*(?:\\circ\b|°)|°|\\degree\b|(?<=[\d}.])\s*\\circ\b"
)
# Trigonometry reads its argument in degrees or radians: never drop a degree mark there.
_TRIG = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)\b|\b(?:sin|cos|tan)\s*\(")

_UNIT_WORDS = (
    "square units", "sq units", "sq. units", "units", "unit",
    "degrees", "degree", "deg",
    "square centimeters", "square meters", "square feet", "square inches",
    "centimeters", "centimeter", "centimetres", "centimetre",
    "millimeters", "millimeter", "kilometers", "kilometer",
    "meters", "meter", "metres", "metre", "inches", "inch", "feet", "foot",
    "yards", "yard", "miles", "mile",
    "cm", "mm", "km", "ft", "yd", "m",
)
_UNIT = "|".join(re.escape(u) for u in sorted(_UNIT_WORDS, key=len, reverse=True))
_POWER = r"(?:\s*\^\s*\{?\s*[23]\s*\}?|[²³])?"
# A trailing unit after a space, or inside a trailing \text{}/\mathrm{}/\mbox{} group.
_TRAILING_UNIT = re.compile(
    rf"(?:\s+(?:{_UNIT})\.?{_POWER}"
    rf"|\s*\\(?:text|textrm|mathrm|mbox)\s*\{{\s*(?:{_UNIT})\.?\s*\}}{_POWER})\s*$"
)


def normalize_answer(text: str) -> str:
    """`text` without the decorations that do not change its value (see the module docstring).

    Returns `text` stripped when normalising would leave nothing with a digit in it, so a word
    answer ("\\text{yes}", "m") is graded as written.
    """
    raw = text.strip()
    s = _LATEX_SPACES.sub(" ", raw)
    s = _EMPTY_TEXT.sub(" ", s).replace("\\$", "").replace("√", "\\sqrt").replace("−", "-")
    s = " ".join(s.split())
    for _ in range(4):  # wrappers and units nest a few deep at most: \text{60 \text{cm}}
        before = s
        s = _unwrap(s)
        s = _TRAILING_UNIT.sub("", s).strip()
        if not _TRIG.search(s):
            s = _DEGREE.sub("", s).strip()
        if s == before:
            break
    return s if any(c.isdigit() for c in s) else raw


def _unwrap(s: str) -> str:
    """`\\text{...}` (or another wrapper) enclosing the whole of `s` -> its content; else `s`."""
    for wrapper in _WRAPPERS:
        if s.startswith(wrapper):
            rest = s[len(wrapper) :].lstrip()
            if rest.startswith("{") and rest.endswith("}") and _closes_at_end(rest):
                return rest[1:-1].strip()
    if s.startswith("{") and s.endswith("}") and _closes_at_end(s):
        return s[1:-1].strip()
    return s


def _closes_at_end(s: str) -> bool:
    """Whether the `{` at s[0] is closed by the `}` at s[-1] (and not earlier)."""
    return braced_from(s, 0) == s[1:-1]
