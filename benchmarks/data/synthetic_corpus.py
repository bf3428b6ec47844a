"""A WMT14-sized English-German corpus made here, without a download, for the scale benchmarks.

WMT14 en-de (the paper's training set) has about 4.5 million pairs, 116M English and 110M German
words (Luong et al. 2015), about 26 English words a pair with a long tail of 80+ word
sentences, and a vocabulary that keeps growing with the corpus (names, numbers, compounds). None
of it is on this machine. This writes ``N`` line-aligned pairs (``train.en``, ``train.de``) that
share those costs:

- **Sentences**: each pair joins 1 to 4 real en-de pairs (Multi30k train/val/test and newstest
  2013/2014, about 37,000 pairs), English with English and German with German, in the same order
  on both sides, so the pairs stay translations of each other. Newstest pairs are drawn 4 times as
  often as their share (news sentences are longer). How many are joined is drawn so that the mean
  is about 26 English words with a tail past 100 (the script prints the length quantiles).
- **Vocabulary growth**: about one pair in three gets one to three made-up names (syllables from
  a fixed alphabet, the name's id drawn from a Zipf law with exponent 1.1 over 10 million ids), the
  same name at the same place on both sides, as a named entity is; one in eight gets a number.
  So distinct words grow with the corpus as in real text (Heaps' law), and the tokenizer meets
  rare words it must split into pieces.
- **Deterministic**: ``--seed`` fixes every draw; the pairs are written in chunks, so memory does
  not grow with ``N``.

What it does not resemble: the sentences repeat (37,000 real pairs, recombined), so a model would
learn far less from it than from WMT14, and its BLEU means nothing; the joined sentences do not
follow each other in meaning; there are no misaligned or noisy pairs (WMT14's Common Crawl part
has many); German compounds are only those of the real sentences.

Usage::

    python -m benchmarks.data.synthetic_corpus --pairs 4500000 --output /tmp/wmt_like/x1
    python -m benchmarks.data.synthetic_corpus --scale 0.1 --output /tmp/wmt_like/x0.1
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

WMT14_PAIRS = 4_500_000
CHUNK = 100_000
#: How many real pairs one synthetic pair joins (1..4) and how often.
JOIN_PROBABILITIES = (0.52, 0.32, 0.12, 0.04)
NEWS_WEIGHT = 4.0
NAME_RATE, NUMBER_RATE = 0.33, 0.125
NAME_IDS, NAME_ZIPF = 10_000_000, 1.1
SYLLABLES = [c + v for c in "bdfghklmnprstvwz" for v in "aeiou"] + ["an", "er", "in", "on", "ul"]


def _read_pairs(data_dir: pathlib.Path) -> tuple[list, list, np.ndarray]:
    """(English lines, German lines, drawing weight of each pair) of every en-de file here."""
    sources = [
        ("multi30k/train", 1.0),
        ("multi30k/val", 1.0),
        ("multi30k/test_2016_flickr", 1.0),
        ("wmt14_en_de/newstest2013", NEWS_WEIGHT),
        ("wmt14_en_de/newstest2014", NEWS_WEIGHT),
    ]
    english, german, weights = [], [], []
    for stem, weight in sources:
        en = (data_dir / f"{stem}.en").read_text(encoding="utf-8").splitlines()
        de = (data_dir / f"{stem}.de").read_text(encoding="utf-8").splitlines()
        if len(en) != len(de):
            raise SystemExit(f"{data_dir / stem}.en/.de differ in line count")
        kept = [i for i, (e, d) in enumerate(zip(en, de, strict=True)) if e.strip() and d.strip()]
        english += [en[i].strip() for i in kept]
        german += [de[i].strip() for i in kept]
        weights += [weight] * len(kept)
    weights = np.asarray(weights, dtype=np.float64)
    return english, german, weights / weights.sum()


def _name(name_id: int) -> str:
    """A made-up, capitalised name for an id: its syllables are the id's digits in base 85."""
    syllables = []
    value = int(name_id)
    while True:
        value, digit = divmod(value, len(SYLLABLES))
        syllables.append(SYLLABLES[digit])
        if value == 0:
            break
    if len(syllables) == 1:
        syllables.append("ra")
    return "".join(syllables).capitalize()


def _insert(words_en: list, words_de: list, token: str, place: float) -> None:
    """``token`` at the same relative place of both sides."""
    words_en.insert(int(place * (len(words_en) + 1)), token)
    words_de.insert(int(place * (len(words_de) + 1)), token)


def _chunk(rng, english, german, weights, size: int) -> tuple[list, list]:
    joins = rng.choice(len(JOIN_PROBABILITIES), size=size, p=JOIN_PROBABILITIES) + 1
    picks = rng.choice(len(english), size=int(joins.sum()), p=weights)
    names = rng.random(size) < NAME_RATE
    numbers = rng.random(size) < NUMBER_RATE
    out_en, out_de, start = [], [], 0
    for row in range(size):
        chosen = picks[start : start + joins[row]]
        start += joins[row]
        words_en = " ".join(english[i] for i in chosen).split(" ")
        words_de = " ".join(german[i] for i in chosen).split(" ")
        if names[row]:
            for _ in range(rng.integers(1, 4)):
                name_id = min(int(rng.zipf(NAME_ZIPF)), NAME_IDS)
                _insert(words_en, words_de, _name(name_id), rng.random())
        if numbers[row]:
            _insert(words_en, words_de, str(int(rng.zipf(1.3))), rng.random())
        out_en.append(" ".join(words_en))
        out_de.append(" ".join(words_de))
    return out_en, out_de


def write_corpus(data_dir, output, pairs: int, seed: int = 0) -> dict:
    """Write ``train.en``/``train.de`` with ``pairs`` lines under ``output``; return statistics."""
    english, german, weights = _read_pairs(pathlib.Path(data_dir))
    output = pathlib.Path(output)
    output.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lengths, vocabulary, growth = [], set(), []
    started = time.perf_counter()
    with (
        open(output / "train.en", "w", encoding="utf-8") as file_en,
        open(output / "train.de", "w", encoding="utf-8") as file_de,
    ):
        written = 0
        while written < pairs:
            size = min(CHUNK, pairs - written)
            lines_en, lines_de = _chunk(rng, english, german, weights, size)
            file_en.write("\n".join(lines_en) + "\n")
            file_de.write("\n".join(lines_de) + "\n")
            written += size
            sample = lines_en[:: max(1, size // 2000)]
            lengths += [len(line.split(" ")) for line in sample]
            for line in lines_en:  # distinct English words as the corpus grows (Heaps' law)
                vocabulary.update(line.split(" "))
            growth.append([written, len(vocabulary)])
    lengths = np.asarray(lengths)
    return {
        "pairs": pairs,
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 1),
        "bytes": {lang: os.path.getsize(output / f"train.{lang}") for lang in ("en", "de")},
        "english_words_per_pair": {
            "mean": round(float(lengths.mean()), 1),
            **{f"p{q}": int(np.percentile(lengths, q)) for q in (50, 90, 99, 99.9)},
            "max_in_sample": int(lengths.max()),
        },
        "distinct_english_words": growth,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--pairs", type=int)
    size.add_argument("--scale", type=float, help="in WMT14 sizes (1 = 4.5 million pairs)")
    parser.add_argument("--output", required=True, help="folder for train.en and train.de")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = args.pairs if args.pairs is not None else round(args.scale * WMT14_PAIRS)
    if pairs < 1:
        parser.error("--pairs/--scale: at least one pair")
    stats = write_corpus(args.data_dir, args.output, pairs, args.seed)
    (pathlib.Path(args.output) / "corpus.json").write_text(json.dumps(stats, indent=1) + "\n")
    growth = stats["distinct_english_words"]
    print(
        f"wrote {pairs:,} pairs to {args.output} in {stats['seconds']} s; English words a pair "
        f"{stats['english_words_per_pair']}; distinct English words {growth[-1][1]:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
