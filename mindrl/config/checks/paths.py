"""The files a run reads exist: data, tokenizers (a VL role's with its image processor) and
checkpoints to load. Kept apart, under PATHS, because shipped GPU recipes name cluster paths
that do not exist on a laptop: plan mode reports them as warnings."""

from __future__ import annotations

import glob
import os

from mindrl.config import names
from mindrl.config.errors import PATHS, Problem, dedupe
from mindrl.config.hf_files import IMAGE_PROCESSOR_FILES, PROCESSOR_FILES, has_image_processor
from mindrl.config.schema import RunConfig


def _path_exists(path: str) -> bool:
    """A file, a directory, or an indexed-dataset prefix (PREFIX*.bin/.idx/.jsonl ...)."""
    return os.path.exists(path) or bool(glob.glob(glob.escape(path) + "*"))


def check_paths(run: RunConfig) -> list[Problem]:
    """Tokenizer, data and checkpoints to load exist; kept apart because shipped GPU recipes
    name cluster paths that do not exist on a laptop."""
    out = []
    data = run.megatron_training.data_path
    if data is None:
        out.append(Problem("megatron_training.data_path", "is not set",
                           "point it at the preprocessed prompts", None, PATHS))
    elif not _path_exists(data):
        out.append(Problem("megatron_training.data_path", "does not exist",
                           "run the data preprocessing (examples/data) or fix the path",
                           data, PATHS))
    for role in run.active_roles:
        cfg = run.role(role)
        tok = cfg.tokenizer_name_or_path
        if tok is None:
            out.append(Problem(names.role_key(run, role, "tokenizer_name_or_path"), "is not set",
                               "point it at a tokenizer directory", None, PATHS))
        elif not os.path.exists(tok):
            out.append(Problem(names.role_key(run, role, "tokenizer_name_or_path"), "does not "
                               "exist", "point it at a local tokenizer directory", tok, PATHS))
        else:
            out += check_processor_files(run, role)
        if cfg.load is not None and not os.path.exists(cfg.load):
            out.append(Problem(names.role_key(run, role, "load"), "does not exist",
                               "convert the HF checkpoint (examples/ckpt) or set load: null "
                               "for a random start", cfg.load, PATHS))
    out += check_search_corpus(run)
    return dedupe(out)


def check_search_corpus(run: RunConfig) -> list[Problem]:
    """A run with the search tool names its corpus, and the file exists: without one every
    search call would answer an error, step after step, instead of the run stopping here."""
    agent = run.agent_config
    if "search" not in agent.tools:
        return []
    fix = ("preprocess a search recipe (corpus_output of configs/datasets/"
           "search_r1_nq_hotpotqa_qwen25.yaml) and point agent_config.search_corpus at it")
    if not agent.search_corpus:
        return [Problem("agent_config.search_corpus", "is not set, and the search tool has "
                        "nothing to search", fix, None, PATHS)]
    if not os.path.isfile(agent.search_corpus):
        return [Problem("agent_config.search_corpus", "does not exist", fix,
                        agent.search_corpus, PATHS)]
    return []


def check_processor_files(run: RunConfig, role: str) -> list[Problem]:
    """A vision-language role's tokenizer directory holds its image processor: training and
    preprocessing load the processor from there (models.processors.load_vl_processor), and a
    converted checkpoint may come without it (a bare save_pretrained). Checked by file name
    before any worker starts."""
    spec, tok = run.models.get(role), run.role(role).tokenizer_name_or_path
    if spec is None or spec.vision is None or tok is None or has_image_processor(tok):
        return []
    missing = " nor ".join(os.path.join(tok, name) for name in IMAGE_PROCESSOR_FILES)
    return [Problem(names.role_key(run, role, "tokenizer_name_or_path"),
                    f"has no image processor (neither {missing} exists), which the "
                    f"vision-language model {spec.name} needs to train and to preprocess data",
                    f"copy the original HF model's processor files ({', '.join(PROCESSOR_FILES)}"
                    f") into it, or point the key at a folder that has them: the original "
                    f"download, or one converted with cli/convert_ckpt.py --tokenizer-model "
                    f"<the original model's folder>", tok, PATHS)]

