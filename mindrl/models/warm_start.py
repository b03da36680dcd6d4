"""Warm starts for a tiny base: the copy a real base model arrives with.

A real base model has read text in which something is quoted and repeated; a random-init tiny
model has not, and reinforcement over a sparse reward did not teach it to repeat what a tool
answered (docs/guides/agentic.md, 12 runs of 150-500 steps). ``echo`` gives the tiny base that
skill before RL, as ReTool's cold start gives its base tool traces, and nothing of the task:

  R <tool_response> S </tool_response> S <|im_end|>

R is random text (printable characters, and the two call markers at CALL_MARKER_RATE each),
S a random string (half of them digits only). The loss covers R (a language model of random
text: every character, the call markers at their rate, so a call stays a chance event for RL
to find) and the copy of S with its end; never the inserted answer, as in RL. No arithmetic,
no prompt of the task and no call followed by its answer is ever seen: with the tool off the
warm base cannot add, and it still has to learn when to call.

``recall`` is the same skill for a base without tool markers, the LoRA recipe's
(docs/guides/lora.md): a random-init model's frozen output layer cannot make any token likely
(its logits are bounded near 2.6 nats above the rest), so adapters over it have nothing to
steer; a base that has learnt to predict does:

  X = c <eos>

X is random printable text without "=", c one of X's characters, chosen at random. The loss
covers X (a language model of random text) and c with its end. Nothing compares or computes:
which of X's characters to give is what RL must teach.

Plain torch over the HF model, before the Megatron conversion (prepare); everything RL trains
is Megatron's.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import List, Sequence, Tuple

import torch

from mindrl.config.names import WARM_START_TOKENIZERS
from mindrl.models.tokenizers import TOOL_MARKERS
from mindrl.staging import refuse_occupied, staged_dir

KINDS = tuple(WARM_START_TOKENIZERS)
MAX_RECALL = 12         # characters of X in a recall document
CALL_MARKER_RATE = 0.03        # each of <tool_call>, </tool_call> in R: a call is ~3% of turns
ALPHABET = tuple(chr(c) for c in range(33, 127))
DIGITS = tuple("0123456789")
MAX_PREFIX = 30         # text before the answer: a first turn that leaves the copy room
SHORT_PREFIX = 14       # ... after SHORT_SHARE of the steps on short ones: the copy forms
SHORT_SHARE = 0.5       # over short texts, then holds over long ones
MAX_ECHO = 6
BATCH = 64
LR = 5e-3
WARMUP = 50
TEXT_WEIGHT = 0.3      # R's loss beside the copy's: enough to keep the markers' rate
NONE, TEXT, COPY = 0, 1, 2

Document = Tuple[List[int], List[int]]      # input ids, the kind of each next-token target


def echo_document(rng: random.Random, char_ids: dict, markers: Sequence[int],
                  end_id: int, max_prefix: int = MAX_PREFIX) -> Document:
    """One document and what each position's next token is trained as: TEXT (R, the random
    text), COPY (the repeat and its end) or NONE (the inserted answer, and R's first token)."""
    call, call_end, answer, answer_end = markers
    prefix = [call if r < CALL_MARKER_RATE else call_end if r < 2 * CALL_MARKER_RATE
              else char_ids[rng.choice(ALPHABET)]
              for r in (rng.random() for _ in range(rng.randint(0, max_prefix)))]
    pool = DIGITS if rng.random() < 0.5 else ALPHABET
    echo = [char_ids[rng.choice(pool)] for _ in range(rng.randint(1, MAX_ECHO))]
    ids = prefix + [answer] + echo + [answer_end] + echo + [end_id]
    # kinds[t]: what predicting ids[t + 1] from position t counts as
    kinds = [TEXT] * max(len(prefix) - 1, 0) + [NONE] * (len(echo) + 1 + (1 if prefix else 0))
    kinds += [COPY] * (len(echo) + 1)
    return ids, kinds[:len(ids) - 1]


RECALL_ALPHABET = tuple(c for c in ALPHABET if c != "=")


def recall_document(rng: random.Random, char_ids: dict, end_id: int) -> Document:
    """X = c <eos>: TEXT for X's characters after the first, NONE for "=" (it follows X
    anywhere), COPY for c and the end."""
    text = [rng.choice(RECALL_ALPHABET) for _ in range(rng.randint(1, MAX_RECALL))]
    ids = [char_ids[c] for c in text] + [char_ids["="], char_ids[rng.choice(text)], end_id]
    kinds = [TEXT] * (len(text) - 1) + [NONE, COPY, COPY]
    return ids, kinds


def _char_ids(tokenizer, kind: str) -> dict:
    ids = {c: tokenizer.convert_tokens_to_ids(c) for c in ALPHABET}
    if any(i is None or i == tokenizer.unk_token_id for i in ids.values()):
        raise ValueError(f"warm start {kind} needs a character tokenizer (prepare.tokenizer: "
                         f"{' or '.join(WARM_START_TOKENIZERS[kind])})")
    return ids


def _document_maker(kind: str, tokenizer, rng: random.Random):
    """longest -> one document of `kind` (echo's random text grows with the curriculum)."""
    char_ids, end = _char_ids(tokenizer, kind), tokenizer.eos_token_id
    if kind == "echo":
        markers = tokenizer.convert_tokens_to_ids(list(TOOL_MARKERS))
        return lambda longest: echo_document(rng, char_ids, markers, end, longest)
    return lambda longest: recall_document(rng, char_ids, end)


def echo_batches(tokenizer, steps: int, seed: int, kind: str = "echo"):
    """(input ids, target kinds) tensors of BATCH documents of `kind`, right-padded, for each
    step."""
    document = _document_maker(kind, tokenizer, random.Random(seed))
    for step in range(steps):
        longest = SHORT_PREFIX if step < steps * SHORT_SHARE else MAX_PREFIX
        docs = [document(longest) for _ in range(BATCH)]
        width = max(len(ids) for ids, _ in docs)
        inputs = torch.full((BATCH, width), tokenizer.pad_token_id)
        kinds = torch.full((BATCH, width - 1), NONE)
        for row, (ids, targets) in enumerate(docs):
            inputs[row, :len(ids)] = torch.tensor(ids)
            kinds[row, :len(targets)] = torch.tensor(targets)
        yield inputs, kinds


def echo_loss(logits: torch.Tensor, inputs: torch.Tensor, kinds: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the copy's targets plus TEXT_WEIGHT x that of the random text's:
    the copy is a few tokens of a long document and would drown in the text's loss."""
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), inputs[:, 1:],
                                           reduction="none")
    loss = ce.new_zeros(())
    for kind, weight in ((COPY, 1.0), (TEXT, TEXT_WEIGHT)):
        where = kinds == kind
        if where.any():
            loss = loss + weight * ce[where].mean()
    return loss


def _refuse_occupied(out_dir: Path, overwrite: bool) -> None:
    refuse_occupied(out_dir, overwrite, FileExistsError, str(out_dir),
                    "remove it to warm-start again")


def warm_start(hf_dir: Path, out_dir: Path, kind: str, steps: int, seed: int) -> List[float]:
    """Train the HF model at hf_dir on `kind`'s documents for `steps` steps (AdamW, linear
    warm-up and decay) and write it, with hf_dir's tokenizer files, to out_dir atomically.
    Returns the loss of every step."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if kind not in KINDS:
        raise ValueError(f"prepare.warm_start={kind!r}: choose one of {list(KINDS)}")
    _refuse_occupied(Path(out_dir), False)         # before the work, and again at the rename
    tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, local_files_only=True,
                                                 dtype=torch.float32)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / WARMUP) * max(0.0, 1.0 - s / steps))
    losses = []
    model.train()
    for inputs, kinds in echo_batches(tokenizer, steps, seed, kind):
        loss = echo_loss(model(input_ids=inputs).logits, inputs, kinds)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    with staged_dir(out_dir, overwrite=False, check=_refuse_occupied) as tmp:
        for f in Path(hf_dir).iterdir():       # tokenizer and generation config as they were
            if f.is_file() and not f.name.endswith(".safetensors"):
                shutil.copy2(f, tmp / f.name)
        model.save_pretrained(tmp, safe_serialization=True)
    return losses
