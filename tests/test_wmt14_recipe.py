"""The paper's WMT14 recipe as docs/training.md gives it ("The paper's recipe: WMT14 en->de, base
model"): the commands are read from that section and run in order, each in a fresh process
(``python -m keras_transformer.cli``, the environment of ``fresh_process_environment``), with
sizes changed and nothing else: prepare (TFDS, ``--download``, train/validation/test) -> train
configs/base.yaml -> average the last 5 -> export -> evaluate on newstest2014. Then the exported
model's ``translate`` output is scored here with sacreBLEU, and ``evaluate``'s printed BLEU and
chrF must be those numbers.

TFDS is mocked in the children (``tests/_tfds_site/sitecustomize.py``, on their PYTHONPATH):
``wmt14_translate/de-en`` as the installed TFDS defines it, whose splits are the first lines of
the real newstest files (validation: newstest2013, test: newstest2014, as in WMT14; train: later
lines of newstest2013); ``download_and_prepare`` is a no-op that the mock records. evaluate's
``$KT_DATA_DIR`` is a folder of the same first lines of newstest2014.
"""

import json
import os
import re
import shlex
import shutil
import string

import pytest

from tests.conftest import REPO_ROOT, fresh_process_environment

RECIPE = REPO_ROOT / "docs" / "training.md"
HEADING = "## The paper's recipe: WMT14 en->de, base model"
MOCK_SITE = REPO_ROOT / "tests" / "_tfds_site"

# What the mock serves, as (file, first line, line count) of the real corpora.
SPLITS = {
    "train": ("newstest2013", 100, 300),
    "validation": ("newstest2013", 0, 32),
    "test": ("newstest2014", 0, 32),
}
TEST_LINES = SPLITS["test"][2]  # the newstest2014 that evaluate reads: the same first lines

# The only changes to the documented commands, all of them sizes: prepare's options (a vocabulary
# that 300 sentences can train, fewer shards) and train's overrides: a tiny model, in float32
# without XLA on a CPU, 300 steps (a minute here) in 5 epochs, so that there are the 5 checkpoints
# that `average --last 5` averages. 300 steps are what it takes for its translations to be words
# that the references have ("dass die die ..."): after 5 steps they were "enenen...", after 40
# empty, and BLEU 0.00 would check nothing.
PREPARE_SIZES = {"--vocab-size": "1000", "--num-shards": "2"}
TRAIN_SIZES = [
    "model.preset=tiny",
    "data.tokens_per_batch=1024",
    "training.max_steps=300",
    "training.steps_per_epoch=60",
    "training.warmup_steps=100",
    "training.mixed_precision=null",
    "training.jit_compile=false",
    "training.xla_loss=false",
]


def documented_commands() -> list[list[str]]:
    """The commands of the recipe's bash block, one list of words each (comments dropped)."""
    text = RECIPE.read_text(encoding="utf-8")
    assert HEADING in text and "```bash\n" in text.split(HEADING, 1)[1], f"{RECIPE}: {HEADING}"
    block = text.split(HEADING, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = block.replace("\\\n", " ").splitlines()
    return [words for words in (shlex.split(line, comments=True) for line in lines) if words]


def value_of(command: list[str], flag: str) -> str:
    assert flag in command, f"{flag} not in the documented command {shlex.join(command)}"
    return command[command.index(flag) + 1]


def sized(command: list[str]) -> list[str]:
    """``command``'s arguments after ``keras-transformer``, with the test's sizes."""
    args = list(command[1:])
    if args[0] == "prepare":
        for flag, value in PREPARE_SIZES.items():
            value_of(args, flag)
            args[args.index(flag) + 1] = value
    if args[0] == "train":
        args += TRAIN_SIZES
    return args


def printed_score(stdout: str, name: str) -> tuple[str, str]:
    """(score, signature) of evaluate's line ``NAME = 12.34  SIGNATURE``."""
    found = re.findall(rf"^{name} = (\d+\.\d\d)  (\S+)$", stdout, re.MULTILINE)
    assert len(found) == 1, stdout
    return found[0]


@pytest.mark.slow
def test_wmt14_recipe_as_documented(tmp_path, data_dir, run_cli):
    pytest.importorskip("tensorflow_datasets")
    sacrebleu = pytest.importorskip("sacrebleu")

    commands = documented_commands()
    assert [c[:2] for c in commands] == [
        ["keras-transformer", name]
        for name in ("prepare", "train", "average", "export", "evaluate")
    ]
    prepare, train, average, export, evaluate = commands

    # The corpora the children see: TFDS's splits, and $KT_DATA_DIR/wmt14_en_de/newstest2014.*.
    served = tmp_path / "tfds"
    corpora = tmp_path / "data" / "wmt14_en_de"
    served.mkdir()
    corpora.mkdir(parents=True)
    datasets = {}
    for split, (stem, start, count) in SPLITS.items():
        datasets[split] = {}
        for lang in ("en", "de"):
            lines = (data_dir / "wmt14_en_de" / f"{stem}.{lang}").read_text("utf-8").splitlines()
            (served / f"{split}.{lang}").write_text("\n".join(lines[start : start + count]) + "\n")
            datasets[split][lang] = str(served / f"{split}.{lang}")
            if split == "test":
                shutil.copy(served / f"test.{lang}", corpora / f"newstest2014.{lang}")
    log = tmp_path / "tfds_calls.jsonl"
    mock = tmp_path / "tfds_mock.json"
    mock.write_text(json.dumps({"datasets": {"wmt14_translate/de-en": datasets}, "log": str(log)}))
    child = {
        "PYTHONPATH": os.pathsep.join([str(MOCK_SITE), fresh_process_environment()["PYTHONPATH"]]),
        "KT_TEST_TFDS_MOCK": str(mock),
        "KT_DATA_DIR": str(tmp_path / "data"),
    }
    shutil.copytree(REPO_ROOT / "configs", tmp_path / "configs")  # --config configs/base.yaml

    def run(command: list[str]) -> str:
        """A documented command, sized, in a fresh process; its stdout."""
        args = [string.Template(word).substitute(child) for word in command]  # $KT_DATA_DIR
        result = run_cli(*sized(args), cwd=tmp_path, env=child)
        assert result.returncode == 0, f"{shlex.join(args)}:\n{result.stderr[-3000:]}"
        return result.stdout

    # prepare: TFDS was asked to download, and all three splits went into the shards.
    run(prepare)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert {(c["call"], c["dataset"]) for c in calls} == {
        ("download_and_prepare", "wmt14_translate/de-en"),
        ("as_dataset", "wmt14_translate/de-en"),
    }
    assert {c["split"] for c in calls if c["call"] == "as_dataset"} == set(SPLITS)
    manifest = json.loads((tmp_path / value_of(prepare, "--output") / "manifest.json").read_text())
    assert {split: entry["pairs"] for split, entry in manifest["splits"].items()} == {
        split: count for split, (_, _, count) in SPLITS.items()
    }
    run(train)
    assert f"Averaged {value_of(average, '--last')} checkpoints" in run(average)
    run(export)
    stdout = run(evaluate)

    # evaluate's scores against sacreBLEU on translate's output of the same model and sources.
    source = string.Template(value_of(evaluate, "--src")).substitute(child)
    reference = string.Template(value_of(evaluate, "--ref")).substitute(child)
    translations = tmp_path / "translations.de"
    result = run_cli(
        "translate",
        "--model",
        value_of(export, "--output"),
        "--input",
        source,
        "--output",
        translations,
        cwd=tmp_path,
        env=child,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hypotheses = translations.read_text(encoding="utf-8").splitlines()
    assert reference == str(corpora / "newstest2014.de")
    references = (corpora / "newstest2014.de").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(references) == TEST_LINES and any(hypotheses)
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()  # sacreBLEU's defaults
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    assert printed_score(stdout, "BLEU") == (f"{bleu.score:.2f}", str(bleu_metric.get_signature()))
    assert f"\n     {bleu}\n" in stdout  # n-gram precisions, brevity penalty, lengths
    assert printed_score(stdout, "chrF") == (f"{chrf.score:.2f}", str(chrf_metric.get_signature()))
    assert bleu.score > 0 and chrf.score > 0, hypotheses  # numbers that check something
    assert f"{TEST_LINES} sentences in " in stdout
