#!/usr/bin/env python3
"""Writes the byte-level BPE parity fixtures in tests/data/tokenizer/ with Hugging Face
`tokenizers` (pip install tokenizers). Run by hand, never by the tests:

    python3 scripts/reference/make_tokenizer_fixture.py [name ...]   # default: all fixtures

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
- qwen2: Qwen 2's pattern (single \\p{N}), <|endoftext|>, <|im_start|>, <|im_end|>, without
         Qwen 2's NFC normalizer.
- qwen2_nfc: the same with Qwen 2's "normalizer": {"type": "NFC"} (trained with it, as Qwen 2
         was), on the test corpus plus texts normalization changes (decomposed accents, Hangul
         jamo, the Angstrom/Ohm/Kelvin signs, CJK compatibility ideographs, marks that reorder,
         characters from after Unicode 9.0, a combining mark right after a special token).
- qwen2_nfkc, qwen2_nfd_sequence: qwen2_nfc's tokenizer.json with the normalizer replaced by
         NFKC (plus a `normalized` added token whose content NFKC changes) or by
         Sequence[NFKC, NFD]; their expected files say what to replace ("replace"), so the 37 KB
         tokenizer.json is not stored three times.
- normalizer_forms: `tokenizers`' NFC, NFD, NFKC and NFKD of the characters whose decomposition
         or combining class changed after Unicode 9.0 (its normalization tables are Unicode 9.0's;
         found against Python's unicodedata), and of random sequences of combining marks.

Where normalization changes the text, `tokenizers` decodes the ids to the normalized text; the
expected files record it as "decoded".
"""
import json
import os
import random
import sys
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

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


# Texts that Unicode normalization changes (or, for NFC, deliberately does not).
NORMALIZATION_CASES = [
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 fac\u0327ade Ångstro\u0308m A\u030angstro\u0308m",
    "Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u; Tiếng Việt có dấu",
    # Hangul: precomposed, fully decomposed jamo, and LV syllable + trailing jamo
    "한국어 \u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165 \uac00\u11a8 \u1100\u1161\u11a8",
    # singletons: Angstrom, Ohm and Kelvin signs, CJK compatibility ideographs, Greek tonos
    "\u212b \u2126 \u212a 5\u212a \uf900\uf901 \u1f71 \u0374 \u037e \u0387",
    # canonical ordering: marks of different combining classes in both orders
    "a\u0301\u0327 a\u0327\u0301 q\u0307\u0323 q\u0323\u0307 \u1e0b\u0323 e\u0302\u0323\u0301",
    # composition exclusions (Devanagari nukta, Hebrew presentation forms), Arabic/Hebrew marks
    "\u0958 \u0915\u093c \ufb2a \u05e9\u05c1 \u0627\u0653 \u0628\u0651\u064e",
    # compatibility characters: NFC keeps them, NFKC changes them
    "ﬁnance ﬂow ＡＢＣ１２３ ①②③ ㎏ ℌ x² ½ Ⅻ ｶﾀｶﾅ \u00a0nbsp \u2002en ™ ﬀ ﬃ ſt",
    # characters from after Unicode 9.0: `tokenizers` leaves them as they are
    "\u32ff \ua7f2 \U0001e030 \U0001f16c \U00011935\U00011930 a\U0001e08f\u0334 \u0d3b\u0334",
    # a combining mark just after a special token is normalized on its own
    "e<|endoftext|>\u0301x A<|im_start|>\u030a \u0301",
    # a long decomposed run (one pre-token of letters and marks)
    "e\u0301" * 150,
    "\u0301\u0301 starts with marks",
]


def special_cases(specials):
    a, b = specials[0], specials[-1]
    return [
        f"doc one{a}doc two {a} three{b}x",
        f"{a}{a}{b} start and end {a}",
        f"almost {a[:-1]} special <|{a}|>",
    ]


def train(pre_tokenizer, pattern_name, ignore_merges=False, normalizer=None):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
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


def expected_cases(name, ref, texts):
    """The ids `tokenizers` gives each text, and the text they decode to where it differs."""
    cases = []
    for t in texts:
        ids = ref.encode(t, add_special_tokens=False).ids
        case = {"text": t, "ids": ids}
        decoded = ref.decode(ids, skip_special_tokens=False)
        if decoded != t:
            case["decoded"] = decoded
        cases.append(case)
    return cases


def write_expected(name, fixture):
    with open(os.path.join(OUT, f"{name}.expected.json"), "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False)
        f.write("\n")


def finish(name, tok, specials, merges_as_strings, extra_vocab=None, extra_cases=()):
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
    cases = expected_cases(name, ref, TEST_CASES + list(extra_cases) + special_cases(specials))
    if j.get("normalizer") is None:
        for c in cases:  # without a normalizer, the ids decode to the text itself
            assert "decoded" not in c, (name, c["text"])
    with open(os.path.join(OUT, f"{name}.tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    write_expected(name, {"tokenizer": f"{name}.tokenizer.json", "cases": cases})
    return j


def variant(name, base_name, base, replace, texts):
    """Expected ids for `base` (a tokenizer.json already written) with top-level keys replaced;
    the expected file names the base file and the replacement, which the test applies."""
    j = dict(base)
    j.update(replace)
    ref = Tokenizer.from_str(json.dumps(j, ensure_ascii=False))
    cases = expected_cases(name, ref, texts)
    write_expected(
        name, {"tokenizer": f"{base_name}.tokenizer.json", "replace": replace, "cases": cases}
    )


FORMS = ["NFC", "NFD", "NFKC", "NFKD"]


def normalizer_forms():
    """`tokenizers`' four forms of the characters where Unicode versions after 9.0 differ from
    its tables (by Python's unicodedata, Unicode 14 in Python 3.11), plus random sequences of
    combining marks and letters that compose."""
    ref = {f: getattr(normalizers, f)() for f in FORMS}
    changed, marks = [], []
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.combining(c):
            marks.append(c)
        if any(unicodedata.normalize(f, c) != ref[f].normalize_str(c) for f in FORMS):
            changed.append(c)
    # A mark `tokenizers` gives class 0 stays before U+0334 (class 1); Unicode 10+ reorders it.
    late_marks = [
        m for m in marks
        if unicodedata.combining(m) > 1 and ref["NFD"].normalize_str(m + "\u0334")[0] == m
    ]
    rnd = random.Random(30)
    pool = marks[::7] + late_marks + list("AEOaeoqsuÅ") + ["\u1100", "\u1161", "\u11a8",
                                                          "\uac00", "\u0915", "\u0b47"]
    texts = changed + [m + "\u0334" for m in late_marks]
    texts += ["".join(rnd.choice(pool) for _ in range(rnd.randint(2, 6))) for _ in range(80)]
    print(f"normalizer_forms: {len(changed)} characters differ by version, "
          f"{len(late_marks)} late marks", file=sys.stderr)
    cases = [{"text": t, **{f: ref[f].normalize_str(t) for f in FORMS}} for t in texts]
    write_expected("normalizer_forms", {"cases": cases})


def main():
    os.makedirs(OUT, exist_ok=True)
    wanted = set(sys.argv[1:]) or {"gpt2", "llama3", "qwen2", "qwen2_nfc", "normalizer_forms"}
    if "gpt2" in wanted:
        gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), "gpt2")
        finish("gpt2", gpt2, ["<|endoftext|>"], merges_as_strings=True)
    if "llama3" in wanted:
        make_llama3()
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if "qwen2" in wanted:
        qwen2 = train(split_then_bytes(QWEN2_PATTERN), "qwen2")
        finish("qwen2", qwen2, qwen_specials, False)
    if "qwen2_nfc" in wanted:  # with its NFKC and Sequence variants
        nfc = train(split_then_bytes(QWEN2_PATTERN), "qwen2_nfc", normalizer=normalizers.NFC())
        j = finish("qwen2_nfc", nfc, qwen_specials, False, extra_cases=NORMALIZATION_CASES)
        texts = TEST_CASES + NORMALIZATION_CASES + special_cases(qwen_specials)
        fix = added(len(j["model"]["vocab"]) + len(qwen_specials), "<ﬁx>")
        fix.update(normalized=True, special=False)
        variant("qwen2_nfkc", "qwen2_nfc", j,
                {"normalizer": {"type": "NFKC"}, "added_tokens": j["added_tokens"] + [fix]},
                texts + ["<ﬁx> <fix> <ﬁx<ﬁx>>", "<|endoftext|>ﬁx"])
        seq = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]}
        variant("qwen2_nfd_sequence", "qwen2_nfc", j, {"normalizer": seq}, texts)
    if "normalizer_forms" in wanted:
        normalizer_forms()


def make_llama3():
    llama3 = train(split_then_bytes(LLAMA3_PATTERN), "llama3", ignore_merges=True)
    llama_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    # "ĠTierZero" is " TierZero" byte-mapped: a vocabulary entry no merge builds, so only
    # ignore_merges makes it one token. Its id, 128255, makes the vocabulary Llama 3's size
    # (128,256), so shards of this tokenizer's ids need 32-bit tokens.
    finish("llama3", llama3, llama_specials, False, extra_vocab={"\u0120TierZero": 128255})


if __name__ == "__main__":
    main()
