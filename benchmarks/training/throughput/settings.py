"""What is compared (settings, systems, sizes) and where its files are (corpus, tokenizer cache)."""

from __future__ import annotations

import hashlib
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = "benchmarks.training.train_throughput"  # each subprocess runs this module again

SETTINGS = {  # name -> (dtype policy, jit_compile)
    "fp32": (None, False),
    "fp32_jit": (None, True),
    "bf16": ("mixed_bfloat16", False),
    "bf16_jit": ("mixed_bfloat16", True),
}
SYSTEMS = ("ours", "baseline")

# Sizes shared by both systems (the issue: 3+3 layers, d_model 256, 8 heads, d_ff 1024).
NUM_LAYERS, D_MODEL, NUM_HEADS, D_FF, DROPOUT = 3, 256, 8, 1024, 0.1
OURS_TOKENS_PER_BATCH = 4096
OURS_MAX_POSITIONS = 128  # positional table of our model
OURS_MAX_SENTENCE_LENGTH = 128  # training-pair filter of our pipeline (subwords per side)
RECIPE_CONFIG = REPO / "configs" / "multi30k.yaml"  # ours uses the BLEU recipe's vocabulary size
BASE_VOCAB, BASE_SEQUENCE_LENGTH, BASE_BATCH = 15000, 40, 64
WORDPIECE_RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


def baseline_batch(args) -> int:
    """The baseline's pairs per step: the recipe's 64, or with ``--baseline-batch tokens`` as many
    as fill our per-step token budget once padded to 40 (4096 // 40 = 102: 4,080 token slots a side
    against our buckets of at most 4,096)."""
    if args.baseline_batch == "tokens":
        return OURS_TOKENS_PER_BATCH // BASE_SEQUENCE_LENGTH
    return int(args.baseline_batch)


def recipe_vocab_size() -> int:
    """``data.vocab_size`` of the Multi30k BLEU recipe (configs/multi30k.yaml)."""
    import yaml

    return int(yaml.safe_load(RECIPE_CONFIG.read_text())["data"]["vocab_size"])


def file_digest(paths, *extra) -> str:
    """12 hex digits of sha256 over the files' bytes and ``repr`` of ``extra``: a cache key."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(pathlib.Path(path).read_bytes())
    for item in extra:
        digest.update(repr(item).encode())
    return digest.hexdigest()[:12]


def corpus(args):
    """The Multi30k training files ``(train.en, train.de)`` under ``--data-dir``."""
    root = pathlib.Path(args.data_dir) / "multi30k"
    return root / "train.en", root / "train.de"


def sp_model_path(args) -> pathlib.Path:
    """Cached SentencePiece model for ``--vocab-size`` and these exact corpus files."""
    src, tgt = corpus(args)
    return pathlib.Path(args.cache_dir) / f"sp{args.vocab_size}-{file_digest([src, tgt])}.model"


def wordpiece_paths(args):
    """Cached WordPiece vocabularies ``(en, de)`` of the baseline."""
    src, tgt = corpus(args)
    key = file_digest([src, tgt], BASE_VOCAB, WORDPIECE_RESERVED)
    cache = pathlib.Path(args.cache_dir)
    return cache / f"wordpiece-en-{key}.txt", cache / f"wordpiece-de-{key}.txt"
