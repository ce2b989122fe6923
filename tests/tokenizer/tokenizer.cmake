# Issue 30, byte-level BPE tokenizers: ids identical to Hugging Face `tokenizers` on the fixtures
# in tests/data/tokenizer (scripts/reference/make_tokenizer_fixture.py), with and without a
# Unicode normalizer (NFC, ...), malformed tokenizer.json refused by key, and
# prepare-data --tokenizer -> 16/32-bit shards -> data loader.
tierzero_test(test_tokenizer
  SOURCES tokenizer/test_tokenizer.cpp tokenizer/test_normalizer.cpp
  LIBS tz_train
  TIMEOUT 240)
target_compile_definitions(test_tokenizer PRIVATE
  TIERZERO_TOKENIZER_DATA="${PROJECT_SOURCE_DIR}/tests/data/tokenizer")
add_dependencies(test_tokenizer tierzero)
