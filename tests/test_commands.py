"""Bad arguments to the run commands (train, average, bleu-curve, attention, prepare, export),
each in a fresh process as a user types it: exit status 2, one line naming the argument and the
problem, no traceback, and nothing written."""

import pytest

from tests.conftest import _run_cli


def _user_error(result, *named):
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, result.stderr
    for text in named:
        assert text in lines[0], result.stderr


@pytest.fixture
def tiny_yaml(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("model: {preset: tiny}\ntraining: {max_steps: 2}\n")
    return path


def _is_start_up_noise(line):
    from tests.test_cli import START_UP_NOISE

    return any(marker in line for marker in START_UP_NOISE)


def _listing(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize(
    "override, named",
    [
        (["training.max_steps=abc"], ["training.max_steps", "abc"]),
        (["data.train_source=nowhere/train.en"], ["data.train_source", "nowhere/train.en"]),
        (["data.tokenizer=/no/such/tokenizer"], ["data.tokenizer", "/no/such/tokenizer"]),
        (["training.gradient_accumulation_steps"], ["training.gradient_accumulation_steps"]),
        (["model.d_model=32", "model.num_heads=5"], ["num_heads"]),
    ],
    ids=["non_numeric", "missing_corpus", "missing_tokenizer", "no_equals_sign", "bad_heads"],
)
def test_train_refuses_bad_settings_and_writes_nothing(tiny_yaml, tmp_path, override, named):
    before = _listing(tmp_path)
    result = _run_cli(
        "train", "--config", tiny_yaml, "--run", tmp_path / "r", *override, cwd=tmp_path
    )
    _user_error(result, *named)
    assert _listing(tmp_path) == before


def test_train_names_an_empty_corpus(tmp_path):
    for name in ("train.en", "train.de"):
        (tmp_path / name).write_text("")
    config = tmp_path / "empty.yaml"
    config.write_text(
        f"model: {{preset: tiny}}\ndata: {{train_source: {tmp_path / 'train.en'}, "
        f"train_target: {tmp_path / 'train.de'}, validation_source: null, "
        "validation_target: null}\ntraining: {max_steps: 2}\n"
    )
    result = _run_cli("train", "--config", config, "--run", tmp_path / "r", cwd=tmp_path)
    _user_error(result, "train.en")


@pytest.mark.parametrize(
    "command",
    [
        ["average", "--last", "abc"],
        ["bleu-curve", "--src", "a", "--ref", "b", "--output", "c.csv", "--beam-size", "four"],
        ["attention", "--text", "A dog.", "--output", "x.png", "--layer", "one"],
    ],
    ids=["average", "bleu-curve", "attention"],
)
def test_a_non_numeric_option_is_named(tmp_path, command):
    result = _run_cli(command[0], "--run", tmp_path, *command[1:], cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "invalid" in result.stderr and command[-2] in result.stderr
    assert _listing(tmp_path) == []


def test_bleu_curve_names_a_folder_that_is_not_a_run(tmp_path):
    folder = tmp_path / "not_a_run"
    folder.mkdir()
    args = ["--src", "a", "--ref", "b", "--output", tmp_path / "c.csv"]
    _user_error(_run_cli("bleu-curve", "--run", folder, *args, cwd=tmp_path), str(folder))
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.parametrize("problem", ["missing", "empty", "uneven"])
def test_prepare_names_the_bad_file(tmp_path, problem):
    source, target = tmp_path / "a.en", tmp_path / "a.de"
    if problem != "missing":
        source.write_text("" if problem == "empty" else "one\ntwo\n")
        target.write_text("" if problem == "empty" else "eins\n")
    output = tmp_path / "out"
    result = _run_cli(
        "prepare", "--source", source, "--target", target, "--output", output, cwd=tmp_path
    )
    _user_error(result, "a.en" if problem != "uneven" else "a.de")
    assert not output.exists()


def test_every_command_end_to_end_on_a_tiny_run(tmp_path, multi30k_dir, multi30k_tokenizer):
    """train -> average -> train --init-from -> bleu-curve -> export -> translate -> evaluate ->
    attention, as typed, each quiet (no TensorFlow start-up lines); export takes the config's
    ``search`` and ``export`` sections where its flags are left out."""
    import json

    import yaml

    from tests.conftest import small_multi30k

    data = small_multi30k(multi30k_dir, tmp_path, multi30k_tokenizer, 800, 20)
    config = tmp_path / "tiny.yaml"
    # 40 steps: enough for translations that are not empty (a few frequent words), which
    # evaluate's scores are checked on
    training = {"max_steps": 40, "steps_per_epoch": 20, "warmup_steps": 10, "keep_checkpoints": 2}
    training["xla_loss"] = False  # XLA's compile of each batch shape costs more than 40 steps
    model = {"preset": "tiny", "d_model": 32, "d_ff": 64}
    search = {"beam_size": 3, "alpha": 1.5}  # what export takes unless its flags say otherwise
    export = {"max_extra_length": 7, "share_cross_cache": False, "drop_finished": True}
    sections = dict(model=model, data=data, training=training, search=search, export=export)
    config.write_text(yaml.safe_dump(sections))
    run, cli = tmp_path / "run", lambda *a: _run_cli(*a, cwd=tmp_path, timeout=400)

    def ok(result):  # and quiet: no TensorFlow start-up lines (tests/test_cli.py)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
        noise = [line for line in result.stderr.splitlines() if _is_start_up_noise(line)]
        assert not noise, result.stderr
        return result

    ok(cli("train", "--config", config, "--run", run))
    assert "Averaged 2 checkpoints" in ok(cli("average", "--run", run, "--last", "2")).stdout
    _fine_tune_starts_from_the_averaged_weights(cli, ok, config, run, tmp_path / "ft")
    _fine_tune_with_a_new_vocabulary(cli, ok, config, run, tmp_path)
    val_en, val_de = tmp_path / "val.en", tmp_path / "val.de"
    ok(cli("bleu-curve", "--run", run, "--src", val_en, "--ref", val_de, "--output", "c.csv"))
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 3  # header + 2 checkpoints
    saved = tmp_path / "saved"
    ok(cli("export", "--run", run, "--output", saved, "--beam-size", 2,
           "--keep-finished", "--share-cross-cache"))  # fmt: skip
    settings = json.loads((saved / "assets.extra" / "translator.json").read_text())["translator"]
    assert settings["drop_finished"] is False  # the flag over the config's export.drop_finished
    assert settings["share_cross_cache"] is True  # and over its share_cross_cache: false
    assert (settings["beam_size"], settings["alpha"]) == (2, 1.5)  # flag, then config
    assert settings["max_extra_length"] == 7  # the config
    assert settings["max_batch_tokens"] == 4096  # neither: the default
    _ctranslate2_export_takes_what_applies(cli, ok, run, tmp_path / "ct2")
    out = tmp_path / "out.de"
    ok(cli("translate", "--model", saved, "--input", val_en, "--output", out))
    assert len(out.read_text(encoding="utf-8").splitlines()) == 20
    _evaluate_prints_what_sacrebleu_computes(cli, ok, saved, val_en, out, val_de)
    ok(cli("attention", "--run", run, "--text", "A dog runs.", "--output", tmp_path / "a.png"))
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def _ctranslate2_export_takes_what_applies(cli, ok, run, folder):
    """``--format ctranslate2`` of the averaged weights over a config written for the
    SavedModel: the config's
    ``max_extra_length`` and search go into the folder, its ``share_cross_cache: false`` (a
    SavedModel switch) is set aside, and the command says so."""
    import json

    out = ok(cli("export", "--run", run, "--weights", "averaged", "--output", folder,
                 "--format", "ctranslate2", "--max-batch-tokens", 0)).stdout  # fmt: skip
    assert "not using search.share_cross_cache of" in out and "CTranslate2, float32" in out
    settings = json.loads((folder / "translator.json").read_text())["translator"]
    assert (settings["beam_size"], settings["alpha"], settings["max_extra_length"]) == (3, 1.5, 7)
    assert settings["max_batch_tokens"] is None  # 0 on the command line: no limit


def _evaluate_prints_what_sacrebleu_computes(cli, ok, saved, sources, translated, val_de):
    """``evaluate``'s BLEU, chrF and lowercased BLEU are sacreBLEU's own command line on
    ``translate``'s output, to the printed 2 decimals. The references: half of them the real
    ones, half the translations themselves with every fifth word in capitals and one word added,
    so that the three scores are far from 0 and from each other (a tiny model scores near 0 on
    real references, where a wrong score could hide). The final weights of 40 steps translate
    into many words; the average of steps 20 and 40 into two, too few for a 4-gram."""
    import json
    import re
    import subprocess
    import sys

    hypotheses = translated.read_text(encoding="utf-8").splitlines()
    real = val_de.read_text(encoding="utf-8").splitlines()
    made = [
        " ".join(w.upper() if j % 5 == 1 else w for j, w in enumerate(h.split())) + " heute"
        if i % 2
        else real[i]
        for i, h in enumerate(hypotheses)
    ]
    references = translated.with_name("made_references.de")
    references.write_text("".join(line + "\n" for line in made), encoding="utf-8")

    def sacrebleu(*options):  # the reference implementation, as its users run it
        command = [sys.executable, "-m", "sacrebleu", str(references), "-i", str(translated)]
        result = subprocess.run(
            [*command, *options, "-b", "-w", "2"], capture_output=True, text=True, check=True
        )
        return json.loads(result.stdout if "[" in result.stdout else f"[{result.stdout}]")

    bleu, chrf = sacrebleu("-m", "bleu", "chrf")
    (lowercased,) = sacrebleu("-m", "bleu", "-lc")
    assert 10 < bleu < lowercased < 90 and 10 < chrf < 90, (bleu, lowercased, chrf, made[:2])
    printed = ok(
        cli("evaluate", "--model", saved, "--src", sources, "--ref", references, "--lowercase")
    ).stdout
    number = lambda label: float(re.search(rf"^{re.escape(label)} = ([0-9.]+)", printed, re.M)[1])
    assert number("BLEU") == bleu, printed
    assert number("chrF") == chrf, printed
    assert number("BLEU (lowercased)") == lowercased, printed


def _fine_tune_starts_from_the_averaged_weights(cli, ok, config, run, fine_tuned):
    """``train --init-from RUN``: the averaged weights (a rate of 1e-30 leaves them as they are),
    the run's tokenizer, a schedule of its own (2 updates, not the old run's 40 + 2)."""
    import json

    import keras
    import numpy as np

    from keras_transformer.training import TrainingConfig

    ok(cli("train", "--config", config, "--run", fine_tuned, "--init-from", run,
           "training.max_steps=2", "training.steps_per_epoch=2",
           "training.lr_scale=1e-30"))  # fmt: skip
    recorded = TrainingConfig.load(fine_tuned / "config.yaml").training.init_from
    assert recorded == str(run / "averaged.keras")
    assert json.loads((fine_tuned / "finished.json").read_text())["steps"] == 2
    piece_model = "tokenizer/assets.extra/sentencepiece.model"
    assert (fine_tuned / piece_model).read_bytes() == (run / piece_model).read_bytes()
    start = keras.models.load_model(run / "averaged.keras", compile=False).get_weights()
    after = keras.models.load_model(fine_tuned / "model.keras", compile=False).get_weights()
    assert len(start) == len(after)
    for a, b in zip(start, after):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def _fine_tune_with_a_new_vocabulary(cli, ok, config, run, tmp_path):
    """``train --init-from RUN --tokenizer NEW``: the new run holds NEW, and right after the
    update (a rate of 1e-30) a sentence of pieces both vocabularies hold gets the averaged
    model's logits for those pieces."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, SubwordTokenizer
    from keras_transformer.training.vocab_update import vocabulary_map

    old = SubwordTokenizer.load(run / "tokenizer")
    lines = (tmp_path / "val.de").read_text(encoding="utf-8").splitlines() * 20
    new = SubwordTokenizer.train(lines + ["Ein Känguru und ein Wombat."] * 50, vocab_size=600)
    new.save(tmp_path / "new_tokenizer")
    fine_tuned = tmp_path / "ft_vocab"
    printed = ok(cli("train", "--config", config, "--run", fine_tuned, "--init-from", run,
                     "--tokenizer", tmp_path / "new_tokenizer", "training.max_steps=2",
                     "training.steps_per_epoch=2", "training.lr_scale=1e-30")).stdout  # fmt: skip
    mapping = vocabulary_map(old.model_proto, new.model_proto)
    assert f"{mapping.kept} pieces kept their rows, {mapping.added} new ones" in printed
    assert mapping.added > 0 and new.vocab_size != old.vocab_size
    assert SubwordTokenizer.load(fine_tuned / "tokenizer").model_proto == new.model_proto
    before = keras.models.load_model(run / "averaged.keras", compile=False)
    after = keras.models.load_model(fine_tuned / "model.keras", compile=False)
    # The shared pieces of the first val lines, in their order: a sentence of shared pieces.
    new_ids = [i for line in lines[:3] for i in new.encode(line) if mapping.old_id[i] >= 0][:20]
    assert len(new_ids) == 20
    old_ids = [int(mapping.old_id[i]) for i in new_ids]
    shared = np.flatnonzero(mapping.old_id >= 0)

    def logits(model, ids):
        inputs = {"source": tf.constant([ids + [EOS_ID]]), "target": tf.constant([[BOS_ID] + ids])}
        return model(inputs).numpy()[0]

    np.testing.assert_allclose(
        logits(after, new_ids)[:, shared], logits(before, old_ids)[:, mapping.old_id[shared]],
        atol=1e-4,
    )  # fmt: skip


def _fake_run(folder, tokenizer):
    """A run directory as ``train`` leaves it, without training: config, tokenizer, weights."""
    from keras_transformer.config import ModelSettings, TransformerConfig
    from keras_transformer.training import TrainingConfig

    folder.mkdir()
    model = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size)
    TrainingConfig(model=ModelSettings.from_config(model)).save(folder / "config.yaml")
    tokenizer.save(folder / "tokenizer")
    (folder / "model.keras").write_bytes(b"weights")
    return folder


@pytest.mark.parametrize(
    "override, named",
    [
        (["--init-from", "old", "model.d_model=64"], ["model.d_model", "32", "64"]),
        (["training.init_from=nowhere"], ["training.init_from=nowhere"]),
        (["--init-from", "old/tokenizer"], ["old/tokenizer", "not a run directory"]),
    ],
    ids=["other_shape", "missing", "not_a_run"],
)
def test_fine_tuning_refuses_what_cannot_start(
    tiny_yaml, tmp_path, override, named, multi30k_tokenizer
):
    from keras_transformer.text.tokenizer import SubwordTokenizer

    _fake_run(tmp_path / "old", multi30k_tokenizer)
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat\n" * 20)
    other = SubwordTokenizer.train([text], vocab_size=290, output_dir=tmp_path / "build")
    other.save(tmp_path / "tok")
    before = _listing(tmp_path)
    args = ["--run", tmp_path / "new", *override]
    _user_error(_run_cli("train", "--config", tiny_yaml, *args, cwd=tmp_path), *named)
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    "export, flags, named",
    [
        ({"format": "onnx"}, [], ["export.format='onnx'", "config.yaml"]),
        (
            {"format": "ctranslate2", "jit_compile": True},  # jit_compile: in the search section
            [],
            ["ctranslate2 does not take search.jit_compile in", "config.yaml"],
        ),
        ({"format": "ctranslate2"}, ["--jit-compile"], ["ctranslate2 does not take --jit-compile"]),
        ({"format": "ctranslate2"}, ["--dtype", "bfloat16"], ["does not take --dtype"]),
        (
            {"quantization": "int8"},
            [],
            ["saved_model does not take export.quantization in", "config.yaml"],
        ),
        ({}, ["--quantization", "int8"], ["saved_model does not take --quantization"]),
        ({"max_batch_tokens": "many"}, [], ["export.max_batch_tokens", "many"]),
        ({"max_batch_tokens": -3}, [], ["config.yaml: export.max_batch_tokens=-3", ">= 1"]),
    ],
    ids=[
        "unknown_format",
        "ct2_with_xla",
        "ct2_xla_flag",
        "ct2_dtype",
        "int8",
        "int8_flag",
        "type",
        "negative",
    ],
)
def test_export_names_the_setting_of_the_wrong_format(
    tmp_path, export, flags, named, multi30k_tokenizer
):
    """A run config's ``export`` section is checked with the flags, before TensorFlow loads:
    the error names the flag, or the field and the config file it came from."""
    import yaml

    from keras_transformer.inference.settings import SearchSettings

    run = _fake_run(tmp_path / "run", multi30k_tokenizer)
    config = yaml.safe_load((run / "config.yaml").read_text())
    searching = {k: v for k, v in export.items() if k in SearchSettings.__dataclass_fields__}
    export = {k: v for k, v in export.items() if k not in searching}
    config = {**config, "search": {**config["search"], **searching}, "export": export}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    result = _run_cli("export", "--run", run, "--output", tmp_path / "out", *flags, cwd=tmp_path)
    _user_error(result, *named)
    assert not (tmp_path / "out").exists()
