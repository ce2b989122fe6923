#!/usr/bin/env python3
"""Makes the corpora and the tokenizer of docs/benchmarks.md's NFC figures (tokenize.bpe with a
normalizer), and the ids Hugging Face `tokenizers` gives them, to compare with prepare-data's.
Run by hand (pip install tokenizers), never by the tests:

    python3 scripts/reference/make_nfc_bench.py OUT_DIR

Writes into OUT_DIR:
- english_code.txt: the licenses in /usr/share/common-licenses, then Python's standard library
  sources (no tests) up to ~13 MB: mostly ASCII, a few accents and symbols.
- multilingual.txt: every translated man page in /usr/share/man/<lang>/ (roff source; German,
  French, Russian, Japanese, Korean, Polish, ...), as Debian ships them: already NFC.
- multilingual_nfd.txt: the same in NFD (Python's unicodedata): every accent and Hangul syllable
  decomposed, so NFC has to rewrite them.
- qwen2_nfc_32k.json: a 32,000-entry Qwen-2-style tokenizer (Qwen 2's pattern and special
  tokens, "normalizer": NFC) trained on the first two; qwen2_32k_nonorm.json: the same without
  the normalizer (the baseline of the normalizer's cost).
- <corpus>.txt.hf_ids: uint32 ids from `tokenizers` (the document token <|endoftext|> first, as
  prepare-data writes it).
"""
import array
import glob
import gzip
import json
import os
import sys
import sysconfig
import unicodedata

sys.path.insert(0, os.path.dirname(__file__))
import make_tokenizer_fixture as fixture  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402


def english_code(limit=14_300_000):
    parts, n = [], 0
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(p):
            t = open(p, encoding="utf-8", errors="replace").read()
            parts.append(t)
            n += len(t.encode())
    lib = sysconfig.get_paths()["stdlib"]
    for root, dirs, files in sorted(os.walk(lib)):
        dirs.sort()
        if "site-packages" in root or "/test" in root:
            continue
        for f in sorted(files):
            if f.endswith(".py") and n < limit:
                try:
                    t = open(os.path.join(root, f), encoding="utf-8").read()
                except (UnicodeDecodeError, OSError):
                    continue
                parts.append(t)
                n += len(t.encode())
    return "".join(parts)


def multilingual():
    parts = []
    for lang in sorted(os.listdir("/usr/share/man")):
        if lang.startswith("man"):
            continue
        for p in sorted(glob.glob(f"/usr/share/man/{lang}/**/*.gz", recursive=True)):
            try:
                parts.append(gzip.open(p).read().decode("utf-8"))
            except (UnicodeDecodeError, OSError):
                pass
    return "".join(parts)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpora = {"english_code": english_code(), "multilingual": multilingual()}
    corpora["multilingual_nfd"] = unicodedata.normalize("NFD", corpora["multilingual"])
    for name, text in corpora.items():
        with open(os.path.join(out, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = fixture.split_then_bytes(fixture.QWEN2_PATTERN)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=32000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = corpora["english_code"].split("\n\n") + corpora["multilingual"].split("\n\n")
    tok.train_from_iterator(lines, trainer)
    j = json.loads(tok.to_str())
    first = len(j["model"]["vocab"])
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    j["added_tokens"] = [fixture.added(first + i, s) for i, s in enumerate(specials)]
    text = json.dumps(j, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(out, "qwen2_nfc_32k.json"), "w", encoding="utf-8") as f:
        f.write(text)
    j["normalizer"] = None
    with open(os.path.join(out, "qwen2_32k_nonorm.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")))
    ref = Tokenizer.from_str(text)
    for name, corpus in corpora.items():
        ids = ref.encode(corpus, add_special_tokens=False).ids
        with open(os.path.join(out, name + ".txt.hf_ids"), "wb") as f:
            array.array("I", [first] + ids).tofile(f)
        print(f"{name}: {len(corpus.encode())} bytes, {len(ids)} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
