#!/usr/bin/env python3
"""Writes the byte-level BPE parity fixtures in tests/data/tokenizer/ with Hugging Face
`tokenizers` (pip install tokenizers). Run by hand, never by the tests:

    python3 scripts/reference/make_tokenizer_fixture.py

The real GPT-2, Llama 3 and Qwen 2 tokenizer.json files are several MB, so this trains small
(~1.5k) byte-level BPE vocabularies with each model's own pre-tokenizer regex and special-token
layout, then records the ids `tokenizers` gives for a test corpus (Unicode, whitespace runs,
digits, contractions, emoji, special tokens inside text). TierZero's tokenizer must give the same
ids (tests/tokenizer/test_tokenizer.cpp).

- gpt2:  ByteLevel(use_regex=True) pre-tokenizer (GPT-2's built-in pattern), merges written as
         "a b" strings as in GPT-2's own tokenizer.json, <|endoftext|> as the last id.
- llama3: Sequence[Split(Llama 3 pattern, \\p{N}{1,3}, (?i:'s|...)), ByteLevel(use_regex=False)],
         ignore_merges=True (plus one vocabulary entry no merge reaches, so it matters, at id
         128255: the vocabulary is Llama 3's size and its shards need 32-bit tokens), merges as
         [a, b] pairs, Llama 3's special tokens after the vocabulary.
- qwen2: Qwen 2's pattern (single \\p{N}), <|endoftext|>, <|im_start|>, <|im_end|>. Qwen 2's
         NFC normalizer is left out: TierZero refuses normalizers it does not implement.
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tokenizer")

GPT2_PATTERN = None  # ByteLevel(use_regex=True) carries it
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 2024; we'll see what they've done.",
    "Café, naïve façade, résumé, Ångström, Žluťoučký kůň úpěl ďábelské ódy, größer, Straße.",
    "日本語のテキストを分割します。中文文本处理很有趣。한국어 텍스트도 있습니다.",
    "שלום עולם, זהו טקסט בעברית. مرحبا بالعالم، هذا نص عربي.",
    "Numbers: 1, 12, 123, 1234, 12345, 3.14159, 2024-11-26, 1,000,000 and ٣٤٥.",
    "Emoji: 👋🏽 hello 🇫🇷 family 👨‍👩‍👧 love ❤️ robot 🤖 party 🎉🎉🎉",
    "def main(argv):\n    for i in range(10):\n        print(f'{i}: {argv[i]!r}')\n\treturn 0\r\n",
    "Привет, мир! Ελληνικά γράμματα. हिन्दी पाठ। ภาษาไทย",
]


def training_corpus():
    lines = []
    for name in ("GPL-3", "Apache-2.0", "GFDL-1.3"):
        path = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                lines.extend(f.read().split("\n\n"))
    lines.extend(MULTILINGUAL * 30)
    return lines


TEST_CASES = [
    "Hello world! It's a test. We're done, aren't we? I'LL SEE YOU'D BETTER'VE 'S",
    "Café naïve façade résumé — Ångström, Žluťoučký kůň úpěl ďábelské ódy; ÉCOLE",
    "日本語のテキスト、中文文本，한국어 텍스트 mixed with English日本",
    "שלום עולם مرحبا بالعالم (RTL) עם English בתוך",
    "a  b   c\t\td\n\n\ne \r\n f\r\n\r\n   \n  g    ",
    "   leading spaces and trailing   ",
    "\n\n\nnewlines first\n",
    "1 12 123 1234 12345 1234567 3.14159 2024-11-26 x1y22z333 ٣٤٥ ½ Ⅻ",
    "👋🏽 hi 🇫🇷 👨‍👩‍👧 ❤️ 🤖🤖 x🎉y",
    "def f(x):\n    return x**2  # comment\r\n\tpass\n",
    "no\u00a0break\u3000ideographic\u2003em space\u2028line\u0085next",
    " TierZero trains TierZero",
    "",
    " ",
    "\t",
    "ß ẞ ǅ ﬁ ſ 'ſ",
    # long pre-tokens (TierZero merges these with a heap, short ones by a scan)
    " " * 300 + "x" + "\t" * 70 + "\n",
    "ab" * 200 + " " + "a" * 100 + " " + "1" * 90,
]


def special_cases(specials):
    a, b = specials[0], specials[-1]
    return [
        f"doc one{a}doc two {a} three{b}x",
        f"{a}{a}{b} start and end {a}",
        f"almost {a[:-1]} special <|{a}|>",
    ]


def train(pre_tokenizer, pattern_name, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1500,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_corpus(), trainer)
    print(f"{pattern_name}: vocab {tok.get_vocab_size()}", file=sys.stderr)
    return tok


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def added(tid, content):
    return {
        "id": tid,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def finish(name, tok, specials, merges_as_strings, extra_vocab=None):
    """Adds the special tokens and extra vocabulary entries by
    editing the JSON, reloads it (so `tokenizers` itself checks the file), and writes the
    tokenizer and the expected ids of every test case."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    vocab.update(extra_vocab or {})
    # `tokenizers` gives an added token its vocabulary id, or the next id from the vocabulary's
    # size on: the ids declared here are the ones it assigns when it loads the file.
    first = len(vocab)
    j["added_tokens"] = [added(first + i, s) for i, s in enumerate(specials)]
    if merges_as_strings:
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    text = json.dumps(j, ensure_ascii=False, separators=(",", ":"))
    ref = Tokenizer.from_str(text)
    cases = []
    for t in TEST_CASES + special_cases(specials):
        ids = ref.encode(t, add_special_tokens=False).ids
        cases.append({"text": t, "ids": ids})
        assert ref.decode(ids, skip_special_tokens=False) == t, (name, t)
    with open(os.path.join(OUT, f"{name}.tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(OUT, f"{name}.expected.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer": f"{name}.tokenizer.json", "cases": cases}, f, ensure_ascii=False)
        f.write("\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), "gpt2")
    finish("gpt2", gpt2, ["<|endoftext|>"], merges_as_strings=True)

    llama3 = train(split_then_bytes(LLAMA3_PATTERN), "llama3", ignore_merges=True)
    llama_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    # "ĠTierZero" is " TierZero" byte-mapped: a vocabulary entry no merge builds, so only
    # ignore_merges makes it one token. Its id, 128255, makes the vocabulary Llama 3's size
    # (128,256), so shards of this tokenizer's ids need 32-bit tokens.
    finish("llama3", llama3, llama_specials, False, extra_vocab={"\u0120TierZero": 128255})

    qwen2 = train(split_then_bytes(QWEN2_PATTERN), "qwen2")
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    finish("qwen2", qwen2, qwen_specials, False)


if __name__ == "__main__":
    main()
