"""transformers' greedy answers of an HF Qwen2.5-VL folder on preprocessed image prompts: an
independent reading of a trained model (the learning test converts its checkpoint back)."""

import torch


def greedy_accuracy(hf_dir, prefix, max_tokens: int = 3) -> float:
    """Share of `prefix`'s rows whose greedy completion (images through the folder's own
    processor, as the trainer prepares them) starts with the row's label, `arith`'s rule."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    from mindrl.data.indexed import load_prompt_rows
    from mindrl.data.vl_prompts import VisionPrompts
    from mindrl.rewards.arith import arith

    processor = AutoProcessor.from_pretrained(str(hf_dir))
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(hf_dir)).eval()
    prompts, tok = VisionPrompts(processor), processor.tokenizer
    stop = {tok.eos_token_id, tok.pad_token_id}
    rows = load_prompt_rows(str(prefix))
    right = 0
    for i, row in enumerate(rows):
        prompt = prompts.prepare(row, f"row {i}")
        ids, out = torch.tensor([prompt.prompt_ids]), []
        with torch.no_grad():
            for _ in range(max_tokens):
                slots = (ids == prompts.image_pad_id).long()
                logits = model(input_ids=ids, pixel_values=prompt.pixel_values,
                               image_grid_thw=prompt.image_grid_thw,
                               mm_token_type_ids=slots).logits[0, -1]
                token = int(logits.argmax())
                if token in stop:
                    break
                out.append(token)
                ids = torch.cat([ids, torch.tensor([[token]])], 1)
        right += arith(tok.decode(out), row["label"]) == 1.0
    return right / len(rows)
