"""Prompt templates: named entries in configs/model/templates.json rendered as ChatML text.

Kept as data so that adding a template is one JSON entry, not code. Rendering is plain string
work (no Jinja) so the exact prompt text is visible in the JSON and testable by hand.
Fields: ``user`` (with a ``{question}`` placeholder; replaced literally, so braces such as
``\\boxed{}`` need no escaping), optional ``system``, ``chat`` (false = no ChatML turns) and
``assistant_prefix`` (text after the generation prompt, e.g. "<think>").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Union

from mindrl.models.tokenizers import IM_END, IM_START
from mindrl.paths import config_dir

PLACEHOLDER = "{question}"


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    user: str = PLACEHOLDER
    system: Optional[str] = None
    chat: bool = True
    assistant_prefix: str = ""
    description: str = ""

    def render(self, question: str, system: Optional[str] = None) -> str:
        """The full prompt text; ``system`` (e.g. from a dataset row) overrides the template's."""
        user = self.user.replace(PLACEHOLDER, question)
        if not self.chat:
            return user
        system = self.system if system is None else system
        text = f"{IM_START}system\n{system}{IM_END}\n" if system else ""
        text += f"{IM_START}user\n{user}{IM_END}\n"
        return text + f"{IM_START}assistant\n{self.assistant_prefix}"


def templates_path() -> Path:
    return config_dir() / "model" / "templates.json"


def load_templates(path: Union[str, Path, None] = None) -> Dict[str, PromptTemplate]:
    path = Path(path) if path is not None else templates_path()
    with open(path) as f:
        raw = json.load(f)
    known = set(PromptTemplate.__dataclass_fields__) - {"name"}
    out = {}
    for name, entry in raw.items():
        unknown = set(entry) - known
        if unknown:
            raise ValueError(f"{path}: template {name!r} has unknown field(s) {sorted(unknown)}; "
                             f"known: {sorted(known)}")
        if PLACEHOLDER not in entry.get("user", PLACEHOLDER):
            raise ValueError(f"{path}: template {name!r}: 'user' must contain {PLACEHOLDER}")
        out[name] = PromptTemplate(name=name, **entry)
    return out


def get_template(name: str, path: Union[str, Path, None] = None) -> PromptTemplate:
    templates = load_templates(path)
    if name not in templates:
        raise ValueError(f"unknown prompt template {name!r}; known: {sorted(templates)} "
                         f"(add one to {path or templates_path()})")
    return templates[name]


def render_prompt(name: str, question: str, system: Optional[str] = None) -> str:
    return get_template(name).render(question, system=system)
