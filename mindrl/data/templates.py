"""Prompt templates: named entries in configs/model/templates.json rendered as ChatML text.

Kept as data so that adding a template is one JSON entry, not code. Rendering is plain string
work (no Jinja) so the exact prompt text is visible in the JSON and testable by hand.
Fields: ``user`` (with a ``{question}`` placeholder; replaced literally, so braces such as
``\\boxed{}`` need no escaping), optional ``system``, ``chat`` (false = no ChatML turns) and
``assistant_prefix`` (text after the generation prompt, e.g. "<think>").

Image prompts (VL recipes) keep the dataset's ``<image>`` markers in the question: ``messages``
splits the rendered user text at them into image and text parts for the processor's own chat
template (the one place that knows the model's vision tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Union

from mindrl.models.tokenizers import IM_END, IM_START
from mindrl.paths import config_dir

PLACEHOLDER = "{question}"
IMAGE_MARKER = "<image>"        # where a dataset's question places an image (geometry3k)


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

    def user_parts(self, question: str) -> List[dict]:
        """The user turn as chat content parts: {"type": "image"} at each IMAGE_MARKER of the
        rendered user text, {"type": "text", "text"} between them (empty text dropped)."""
        pieces = self.user.replace(PLACEHOLDER, question).split(IMAGE_MARKER)
        parts: List[dict] = []
        for i, piece in enumerate(pieces):
            if i:
                parts.append({"type": "image"})
            if piece:
                parts.append({"type": "text", "text": piece})
        return parts

    def messages(self, question: str, system: Optional[str] = None) -> List[dict]:
        """Chat messages for a processor's chat template (chat templates only); no system
        message unless the template or row has one (the model's template adds its default)."""
        if not self.chat:
            raise ValueError(f"template {self.name!r} has chat: false; it has no messages")
        system = self.system if system is None else system
        turns = [{"role": "system", "content": system}] if system else []
        return turns + [{"role": "user", "content": self.user_parts(question)}]

    def render_with_processor(self, processor, question: str,
                              system: Optional[str] = None) -> str:
        """The prompt text of an image question: the processor's chat template over
        ``messages`` (one image placeholder per image, not expanded) plus assistant_prefix;
        a chat: false template writes the user text with each marker as the processor's
        image placeholder and no turns."""
        if not self.chat:
            image = _image_placeholder(processor)
            return "".join(image if part["type"] == "image" else part["text"]
                           for part in self.user_parts(question))
        text = processor.apply_chat_template(self.messages(question, system),
                                             add_generation_prompt=True, tokenize=False)
        return text + self.assistant_prefix


def _image_placeholder(processor) -> str:
    """What a Qwen2-VL chat template writes for one image: vision start, ONE pad, vision end."""
    tokenizer = processor.tokenizer
    start = getattr(tokenizer, "vision_start_token", None) or "<|vision_start|>"
    end = getattr(tokenizer, "vision_end_token", None) or "<|vision_end|>"
    return f"{start}{processor.image_token}{end}"


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
