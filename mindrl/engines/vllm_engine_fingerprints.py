"""The engine's side of a verified weight sync (weight_sync/target.py's fingerprint members):
digest the weights vLLM computes with (`VLLMEngine._view`, vllm_fingerprint.vllm_view) and
compare them with what the sender meant to send."""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from mindrl.ckpt.fingerprint import compare_fingerprints
from mindrl.errors import WeightSyncError


class EngineFingerprints:
    """Mixed into VLLMEngine: needs `_usable`, `_view`, `engine_name`, `dtype` and
    `_weights_epoch` (bumped by every weight change)."""

    _early_digest = None

    def fingerprint(self) -> Dict[str, torch.Tensor]:
        """{HF name: digest} of the weights vLLM computes with now (see `digest`); [k, 3] for a
        tensor vLLM uses in k places (a tied embedding / output head)."""
        self._usable()
        return {name: torch.stack(digests) if len(digests) > 1 else digests[0]
                for name, (_, digests, _) in self._view(with_digest=True).items()}

    def start_fingerprint(self) -> None:
        """Digest the weights now, for the next `check_fingerprint`: a verified sync asks for
        it before the actor computes its expected fingerprints, so both digests run at once
        (in separate processes). Used only if the weights have not changed since."""
        self._early_digest = (self._weights_epoch, self.fingerprint())

    def check_fingerprint(self, expected: Mapping[str, torch.Tensor], strict: bool = True) -> None:
        """Raise WeightSyncError naming every tensor whose digest differs from `expected`
        (e.g. `checkpoint_fingerprint` of the HF directory the trainer started from, or the
        fingerprints of the tensors just sent). strict: vLLM may hold nothing else.
        Names may be HF's or the engine's own."""
        self._usable()
        early, self._early_digest = self._early_digest, None
        actual = (early[1] if early is not None and early[0] == self._weights_epoch
                  else self.fingerprint())
        expected = {self.engine_name(name): digest for name, digest in expected.items()}
        problems = compare_fingerprints(actual, expected, self.dtype, strict)
        if problems:
            shown = "\n  ".join(problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise WeightSyncError(
                f"{len(problems)} vLLM tensor(s) differ from the expected weights; a wrong entry "
                f"in mindrl/ckpt/mapping/ or a broken reshard is the usual cause:\n  "
                f"{shown}{more}")
