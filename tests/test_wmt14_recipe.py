"""The paper's WMT14 recipe as the README gives it, command by command, on TFDS mock data
(``tfds.testing.mock_data``: WMT14's real features, random sentences) with a tiny model:
prepare shards -> train configs/base.yaml from them -> average -> export -> evaluate on
newstest2014 (the real file, its first sentences)."""

import json

import pytest

from tests.conftest import REPO_ROOT

# What turns the paper's config into a test-sized run (the recipe's commands are unchanged).
TINY = [
    "model.preset=tiny",
    "data.tokens_per_batch=1024",
    "training.max_steps=4",
    "training.steps_per_epoch=2",
    "training.warmup_steps=2",
    "training.mixed_precision=null",
    "training.jit_compile=false",
    "training.xla_loss=false",
]


def test_wmt14_recipe_on_mock_data(tmp_path, data_dir, run_cli):
    tfds = pytest.importorskip("tensorflow_datasets")
    from pipelines import prepare

    shards = tmp_path / "prepared" / "wmt14_en_de_37k"  # the folder configs/base.yaml names
    with tfds.testing.mock_data(num_examples=200):  # TFDS is mocked in this process only
        status = prepare.main(
            [
                "--tfds",
                "wmt14_translate/de-en",
                "--source-lang",
                "en",
                "--target-lang",
                "de",
                "--splits",
                "train,validation",
                "--vocab-size",
                "500",
                "--num-shards",
                "1",
                "--workers",
                "1",
                "--output",
                str(shards),
            ]
        )  # the README's command, with a vocabulary the mock's 200 sentences allow
    assert status == 0
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["splits"]["train"]["kept"] == 200

    config = REPO_ROOT / "configs" / "base.yaml"
    steps = [
        ["train", "--config", config, "--run", "runs/wmt14_base", *TINY],
        ["average", "--run", "runs/wmt14_base", "--last", "2"],
        [
            "export",
            "--run",
            "runs/wmt14_base",
            "--weights",
            "averaged",
            "--output",
            "saved_models/wmt14_base",
            "--beam-size",
            "2",
            "--max-extra-length",
            "5",
        ],
    ]
    for args in steps:
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 0, f"{args[0]}: {result.stderr[-3000:]}"
    newstest = data_dir / "wmt14_en_de"
    for lang in ("en", "de"):
        lines = (newstest / f"newstest2014.{lang}").read_text(encoding="utf-8").splitlines()
        (tmp_path / f"newstest2014.{lang}").write_text("\n".join(lines[:8]) + "\n")
    result = run_cli(
        "evaluate",
        "--model",
        "saved_models/wmt14_base",
        "--src",
        "newstest2014.en",
        "--ref",
        "newstest2014.de",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BLEU" in result.stdout and "chrF" in result.stdout
