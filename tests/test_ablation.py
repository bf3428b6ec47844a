"""``keras-transformer ablate`` (Table 3 over one base config): rows around the base config's
values, a row that cannot be built and a row whose process crashes reported in the table with
their errors (exit status 1), a ``kill -9`` of the ablation during a row and a rerun that skips
the finished rows and completes the table, the plan file and the Python API giving the same rows,
and every number in the table checked against the run it came from."""

import doctest
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from tests.conftest import REPO_ROOT, small_multi30k

STEPS = 6
CUSTOM_ROWS = [
    {"id": "h3", "overrides": ["model.num_heads=3"]},  # 3 does not divide d_model=32
    {"id": "bad-strategy", "overrides": ["training.strategy=bogus"]},  # crashes inside train
]
COMMON = ["training.backup_every_steps=2"]  # the budget makes it one epoch of 6 steps


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory, multi30k_dir, multi30k_tokenizer):
    """A tiny base config (model preset tiny, 400 training pairs, 30 validation pairs) and a
    plan file over it: the base with 2 seeds and the two failing rows, 6 updates each."""
    folder = tmp_path_factory.mktemp("ablation")
    paths = small_multi30k(multi30k_dir, folder, multi30k_tokenizer, 400, 30)
    base = {
        "model": {"preset": "tiny", "d_model": 32, "d_ff": 64},
        "data": {**paths, "tokens_per_batch": 512, "max_sentence_length": 32},
        "training": {
            "max_steps": 1000,
            "steps_per_epoch": 50,
            "warmup_steps": 4,
            "xla_loss": False,
        },
    }
    (folder / "tiny.yaml").write_text(yaml.safe_dump(base))
    plan = {
        "config": str(folder / "tiny.yaml"),
        "steps": STEPS,
        "seeds": 2,
        "rows": CUSTOM_ROWS,
        "overrides": COMMON,
    }
    (folder / "plan.yaml").write_text(yaml.safe_dump(plan))
    return folder


def _environment():
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
    )
    return environment


def _state(output):
    path = output / "ablation.json"
    return json.loads(path.read_text()) if path.exists() else None


def _kill_during_second_seed(folder, output):
    """Starts the ablation as a user types it and kills it (SIGKILL) once the second base seed
    has started training (its run directory holds its config); returns the row's train pid."""
    command = [sys.executable, "-m", "keras_transformer.cli", "ablate"]
    command += ["--plan", str(folder / "plan.yaml"), "--output", str(output)]
    process = subprocess.Popen(
        command, cwd=folder, env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        state = _state(output)
        row = state and state["rows"].get("base-s1")
        if row and row["status"] == "running" and row.get("pid"):
            if (output / "base-s1" / "config.yaml").exists():
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                return row["pid"]
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        time.sleep(0.2)
    process.kill()
    pytest.fail("the second base seed never started")


@pytest.fixture(scope="module")
def ablated(tiny_plan, run_cli):
    """The plan's ablation killed during the second seed, then rerun with the same command."""
    output = tiny_plan / "out"
    stale = _kill_during_second_seed(tiny_plan, output)
    first = output / "base" / "finished.json"
    stamps = {path: path.stat().st_mtime_ns for path in (first, first.with_name("model.keras"))}
    rerun = run_cli("ablate", "--plan", tiny_plan / "plan.yaml", "--output", output, cwd=tiny_plan)
    return {"output": output, "rerun": rerun, "stamps": stamps, "stale": stale}


def test_a_killed_ablation_resumes_skips_finished_rows_and_reports_failures(ablated):
    from keras_transformer.table3.runner import _alive

    output, rerun = ablated["output"], ablated["rerun"]
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    assert "2 row(s) failed: h3, bad-strategy" in rerun.stderr
    assert "[1/4] base: finished before, skipped" in rerun.stdout
    for path, stamp in ablated["stamps"].items():  # the finished row was not trained again
        assert path.stat().st_mtime_ns == stamp, path
    assert (output / "logs" / "base.out").read_text().count("=== ") == 1
    assert not _alive(ablated["stale"], output / "base-s1")  # the killed attempt's process
    rows = _state(output)["rows"]
    assert [rows[i]["status"] for i in ("base", "base-s1", "h3", "bad-strategy")] == [
        "finished",
        "finished",
        "failed",
        "failed",
    ]
    assert rows["base"]["attempts"] == 1 and rows["base-s1"]["attempts"] == 2
    assert "must be divisible by num_heads=3" in rows["h3"]["error"]
    assert rows["bad-strategy"]["error"].startswith("ValueError: get_strategy")
    assert "Traceback" in (output / "logs" / "bad-strategy.err").read_text()
    table = _table_rows(output / "table3.md")
    assert list(table) == ["base", "base-s1", "h3", "bad-strategy"]
    assert table["h3"][4] == "**3**"  # the h it asked for
    assert table["h3"][9].startswith("failed: TransformerConfig.d_model=32: must be divisible")
    assert table["bad-strategy"][9].startswith("failed: ValueError: get_strategy: kind must")
    header = (output / "table3.md").read_text()
    assert "the same number of updates per row**: training.max_steps=6" in header
    assert (output / "table3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _table_rows(path) -> dict:
    rows = {}
    for line in path.read_text().splitlines():
        if line.startswith("| ") and not line.startswith("| row "):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].split(" ")[0]] = cells
    return rows


def _perplexity_by_hand(model, tokenizer, sources, targets, max_positions):
    """exp(mean -log p(label)) over real target tokens, one unpadded pair at a time."""
    import tensorflow as tf

    from keras_transformer.text.tokenizer import BOS_ID, EOS_ID

    total, count, pairs = 0.0, 0, 0
    for source, target in zip(sources, targets, strict=True):
        s, t = (tokenizer.tokenize(tf.constant([x])).to_list()[0] for x in (source, target))
        if not s or not t or len(s) + 1 > max_positions or len(t) + 1 > max_positions:
            continue
        inputs = {"source": np.int32([s + [EOS_ID]]), "target": np.int32([[BOS_ID] + t])}
        logits = np.asarray(model(inputs, training=False), np.float64)[0]
        log_p = logits - logits.max(-1, keepdims=True)
        log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
        total -= sum(log_p[i, label] for i, label in enumerate(t + [EOS_ID]))
        count, pairs = count + len(t) + 1, pairs + 1
    return float(np.exp(total / count)), count, pairs


def test_the_table_holds_each_runs_own_numbers(ablated, tiny_plan):
    import keras

    from keras_transformer.evaluation import corpus_bleu, translate_sentences
    from keras_transformer.text.tokenizer import SubwordTokenizer

    output = ablated["output"]
    rows, table = _state(output)["rows"], _table_rows(output / "table3.md")
    sources = (tiny_plan / "val.en").read_text().splitlines()
    references = (tiny_plan / "val.de").read_text().splitlines()
    for row in ("base", "base-s1"):
        run, result = output / row, rows[row]["result"]
        model = keras.models.load_model(run / "model.keras", compile=False)
        tokenizer = SubwordTokenizer.load(run / "tokenizer")
        assert result["params"] == model.count_params()
        assert table[row][9] == f"{model.count_params():,}"
        ppl, tokens, pairs = _perplexity_by_hand(model, tokenizer, sources, references, 64)
        assert result["val_perplexity"] == pytest.approx(ppl, rel=1e-4)
        assert (result["val_tokens"], result["val_pairs_scored"]) == (tokens, pairs)
        assert table[row][10] == f"{result['val_perplexity']:.2f}"
        greedy = translate_sentences(model, tokenizer, sources, beam_size=1)
        assert result["val_bleu"] == pytest.approx(corpus_bleu(greedy, references).score)
        assert table[row][11] == f"{result['val_bleu']:.2f}" and result["val_sentences"] == 30
        seconds = json.loads((run / "time_spent.json").read_text())["seconds"]
        assert result["minutes"] == pytest.approx(seconds / 60) and table[row][12] != ""
        assert result["updates"] == json.loads((run / "finished.json").read_text())["steps"]
        assert table[row][13] == str(STEPS) == str(result["updates"])
        trained = rows[row]["trained"]  # where the row was trained, in the table
        days = {time.strftime("%Y-%m-%d", time.gmtime(time.time() - d)) for d in (0, 86400)}
        assert trained["date"] in days  # today, or yesterday when the run crossed midnight
        assert trained["cpu"].endswith(f" x {os.cpu_count()}")
        assert table[row][14].startswith(f"{trained['date']}, {trained['cpu']}")
    configs = [
        yaml.safe_load((output / r / "config.yaml").read_text()) for r in ("base", "base-s1")
    ]
    assert [c["training"]["seed"] for c in configs] == [0, 1]
    assert [c["data"]["shuffle_seed"] for c in configs] == [0, 1]


def test_the_plan_file_and_the_python_api_give_the_same_rows(ablated, tiny_plan, capsys):
    from keras_transformer.table3.ablate import ablate, ablation_plan

    output = ablated["output"]
    by_api = dict(
        config=str(tiny_plan / "tiny.yaml"),
        rows=CUSTOM_ROWS,
        steps=STEPS,
        seeds=2,
        overrides=COMMON,
    )
    planned = ablation_plan(**by_api)
    assert planned == ablation_plan(plan=tiny_plan / "plan.yaml")
    state = _state(output)["rows"]
    assert [(r["id"], r["overrides"]) for r in planned] == [
        (i, state[i]["overrides"]) for i in ("base", "base-s1", "h3", "bad-strategy")
    ]
    assert planned[1]["train_overrides"][-2:] == ["training.seed=1", "data.shuffle_seed=1"]
    result = ablate(output=output, **by_api)  # everything done: nothing is trained again
    assert [r["id"] for r in result.rows] == [r["id"] for r in planned]
    assert result.failed == ["h3", "bad-strategy"]
    assert [r.get("result") for r in result.rows] == [state[r["id"]].get("result") for r in planned]
    for path, stamp in ablated["stamps"].items():
        assert path.stat().st_mtime_ns == stamp
    ablate(output=output, retry_failed=True, **{**by_api, "rows": CUSTOM_ROWS[:1]})
    printed = capsys.readouterr().out
    assert "base-s1: finished before, skipped" in printed
    assert "h3: failed: TransformerConfig.d_model=32" in printed  # tried again


def test_rows_vary_around_the_multi30k_base_config():
    from keras_transformer.table3 import rows as ablation_rows
    from keras_transformer.table3.ablate import ablation_plan
    from keras_transformer.training.run_config import TrainingConfig

    config = TrainingConfig.load(REPO_ROOT / "configs" / "multi30k.yaml")
    base = ablation_rows.base_values(config)
    assert [base[k] for k in ("N", "d_model", "d_ff", "h", "d_k", "P_drop", "eps_ls")] == [
        3,
        256,
        1024,
        4,
        64,
        0.2,
        0.1,
    ]
    rows = {row.id: row.overrides for row in ablation_rows.plan_rows(config, seeds=3)}
    assert rows["A-h1"] == ("model.num_heads=1",) and "A-h4" not in rows and "A-h16" in rows
    assert rows["B-dk16"] == ("model.key_dim=16", "model.value_dim=64") and "B-dk32" in rows
    assert {"C-N2", "C-N4", "C-d128", "C-d512", "C-ff512", "C-ff2048"} <= set(rows)
    assert [r for r in rows if r.startswith("D-")] == [
        "D-drop0",
        "D-drop0.1",
        "D-drop0.3",
        "D-ls0",
        "D-ls0.2",
    ]
    assert rows["D-ls0"] == ("training.label_smoothing=0.0",)
    assert rows["E-learned"] == ("model.positional=learned",)
    assert rows["E-learned-rms"] == ("model.positional=learned", "model.positional_stddev=0.7071")
    b_row = TrainingConfig.load(REPO_ROOT / "configs" / "multi30k.yaml", list(rows["B-dk16"]))
    resolved = b_row.model.model_config(8000)  # d_v stays the base's, as in the paper
    assert (resolved.head_dim, resolved.value_head_dim) == (16, 64)
    assert [ablation_rows.base_values(b_row)[k] for k in ("d_k", "d_v")] == [16, 64]
    assert [rows[f"R-r{r}"] for r in (4, 8, 16)] == [
        (f"model.attention_window={r}",) for r in (4, 8, 16)
    ]
    # A base that fixes its head sizes, even at d_model / h: rows A set them free to follow h
    for fixed in (["model.key_dim=64"], ["model.key_dim=64", "model.value_dim=64"]):
        config = TrainingConfig.load(REPO_ROOT / "configs" / "multi30k.yaml", fixed)
        heads = {r.id: r for r in ablation_rows.plan_rows(config, ["A"], seeds=1)}
        freed = [item.replace("64", "null") for item in fixed]
        assert heads["A-h1"].overrides == ("model.num_heads=1", *freed)
        row = TrainingConfig.load(
            REPO_ROOT / "configs" / "multi30k.yaml", [*fixed, *heads["A-h1"].overrides]
        )
        assert [ablation_rows.base_values(row)[k] for k in ("h", "d_k", "d_v")] == [1, 256, 256]
    shipped = ablation_plan(plan=REPO_ROOT / "configs" / "table3_multi30k.yaml")
    assert [r["id"] for r in shipped] == list(rows)
    assert "training.max_minutes=null" in shipped[0]["train_overrides"]
    result = doctest.testmod(ablation_rows, optionflags=doctest.ELLIPSIS)
    assert result.attempted and not result.failed


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "give one budget per row"),
        ({"steps": 5, "minutes": 1.0}, "give one budget per row"),
        ({"steps": 5, "rows": ["A", "Z-nothing"]}, "unknown row 'Z-nothing'"),
        ({"steps": 0}, "steps=0 must be a positive integer"),
        ({"steps": 5, "seeds": 0}, "seeds=0"),
    ],
)
def test_bad_settings_are_refused_before_anything_trains(tmp_path, arguments, message):
    from keras_transformer.table3.ablate import ablate

    config = REPO_ROOT / "configs" / "multi30k.yaml"
    with pytest.raises(ValueError, match=message):
        ablate(config=config, output=tmp_path / "out", **arguments)
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_another_budget_on_the_same_output(ablated, capsys):
    from keras_transformer.cli import main

    output = ablated["output"]
    status = main(
        [
            "ablate",
            "--plan",
            str(output.parent / "plan.yaml"),
            "--output",
            str(output),
            "--steps",
            "7",
        ]
    )
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(error) == 1
    assert "holds an ablation with other settings (budget: {'steps': 6} there" in error[0]


def test_a_new_output_folder_takes_the_finished_rows_from_the_tables_json(
    ablated, tiny_plan, tmp_path, capsys
):
    """The run folders gone (another machine): the table and its JSON, as committed, give the
    finished rows back, so only the others train; other settings ignore the JSON."""
    import shutil

    from keras_transformer.table3.ablate import _rows_of_the_table, ablate

    output = ablated["output"]
    recorded = json.loads((output / "table3.json").read_text())
    assert sorted(recorded["rows"]) == ["base", "base-s1"]  # the finished ones only
    assert recorded["rows"]["base"]["result"] == _state(output)["rows"]["base"]["result"]
    table = tmp_path / "results" / "table3.md"
    table.parent.mkdir()
    shutil.copy(output / "table3.json", table.with_suffix(".json"))
    result = ablate(plan=tiny_plan / "plan.yaml", output=tmp_path / "new", table=table,
                    rows=CUSTOM_ROWS[:1])  # fmt: skip
    printed = capsys.readouterr().out
    assert f"finished rows taken from {table.with_suffix('.json')}: base, base-s1" in printed
    assert "base: finished before, skipped" in printed and "base-s1: finished before" in printed
    assert not (tmp_path / "new" / "base").exists()  # nothing trained again
    done = {r["id"]: r.get("result") for r in result.rows}
    assert done["base"] == recorded["rows"]["base"]["result"] and done["h3"] is None
    assert list(_table_rows(table))[:2] == ["base", "base-s1"]
    other = {**recorded["settings"], "budget": {"steps": STEPS + 1}}
    assert _rows_of_the_table(table.with_suffix(".json"), other) == {}


def test_a_row_scored_later_says_where_it_was_trained(ablated, tiny_plan, tmp_path):
    """The row's record comes from its run's ``finished.json`` (where and when its training
    ended), not from the machine that scores it: a run finished elsewhere keeps its CPU."""
    import shutil

    from keras_transformer.table3.ablate import ablate

    output = ablated["output"]
    state = _state(output)["rows"]
    for row in ("base", "base-s1"):  # trained here: the record each run wrote
        finished = json.loads((output / row / "finished.json").read_text())
        assert state[row]["trained"] == finished["trained"]
    elsewhere = tmp_path / "new" / "base"
    shutil.copytree(output / "base", elsewhere)
    finished = json.loads((elsewhere / "finished.json").read_text())
    finished["trained"] = {"date": "2026-01-02", "cpu": "Other CPU x 64", "commit": "0abc123"}
    (elsewhere / "finished.json").write_text(json.dumps(finished))
    result = ablate(plan=tiny_plan / "plan.yaml", output=tmp_path / "new", rows=[], seeds=1)
    assert result.rows[0]["trained"] == finished["trained"]
    assert "| 2026-01-02, Other CPU x 64, 0abc123 |" in (tmp_path / "new" / "table3.md").read_text()


def test_one_noise_rule_for_the_column_and_the_summary(tmp_path):
    """Three base seeds: the bound is 2 s sqrt(1 + 1/3) with s their sample standard deviation;
    the column, the summary and the findings give each row the same verdict; a row carried from
    an ablation that did not record where it trained is marked."""
    import statistics

    from keras_transformer.table3.table import base_noise, write_table

    def row(id, group, bleu, ppl, trained=True):
        result = {"params": 1, "val_bleu": bleu, "val_perplexity": ppl, "minutes": 1.0}
        entry = {"id": id, "group": group, "status": "finished", "values": {}}
        entry["result"] = {**result, "updates": 10}
        if trained:
            entry["trained"] = {"date": "2026-12-07", "cpu": "cpu x 2", "commit": "abc"}
        return entry

    seeds = [33.0, 32.0, 34.0]  # mean 33, s = 1
    entries = [row(f"base-s{i}", "base", b, 6.0 + i / 100) for i, b in enumerate(seeds)]
    bound = 2 * statistics.stdev(seeds) * (1 + 1 / 3) ** 0.5  # 2.31
    entries += [row("A-h1", "A", 33.0 - 2.2, 6.1), row("A-h2", "A", 33.0 + 2.4, 5.9, False)]
    noise = base_noise(entries)
    assert noise["bleu"]["bound"] == pytest.approx(bound)
    assert noise["bleu"]["std"] == pytest.approx(1.0) and noise["seeds"] == 3
    path = write_table(tmp_path / "t.md", entries, ["header"])
    text = path.read_text()
    table = _table_rows(path)
    assert table["A-h1"][15] == "-2.20 (within noise)"
    assert table["A-h2"][15] == "+2.40 (beyond noise)"
    assert f"= {bound:.2f} BLEU" in text
    assert "the findings below give PPL too): A-h1. Beyond: A-h2." in text
    assert "A-h1 -2.20 BLEU (within)" in text and "A-h2 +2.40 BLEU (beyond)" in text
    assert table["A-h2"][14] == "earlier *" and table["A-h1"][14] == "2026-12-07, cpu x 2, abc"
    assert "\\* trained by an earlier ablation" in text


def test_a_row_redefined_since_it_was_trained_is_trained_again(tiny_plan, tmp_path, capsys):
    """A finished row whose overrides differ from the row's definition now (as row B's did when
    d_v was kept) goes back to pending, its old run folder set aside, not resumed; a row with
    the same overrides stays finished."""
    from keras_transformer.table3.ablate import _open_state
    from keras_transformer.table3.rows import base_values, plan_rows
    from keras_transformer.table3.runner import write_state
    from keras_transformer.table3.settings import load_base, resolve_settings

    settings = resolve_settings(tiny_plan / "plan.yaml", output=tmp_path / "out")
    base = load_base(settings)
    planned = plan_rows(base, settings.rows, settings.seeds)
    finished = {"status": "finished", "result": {"val_bleu": 1.0}, "attempts": 1}
    rows = {
        "base": {"id": "base", "group": "base", "overrides": [], **finished},
        "base-s1": {"id": "base-s1", "group": "base", "overrides": ["training.seed=7"], **finished},
    }
    settings.output.mkdir()
    write_state(settings.output, {"version": 1, "settings": settings.fingerprint(), "rows": rows})
    (settings.output / "base-s1").mkdir()
    (settings.output / "base-s1" / "finished.json").write_text("{}")
    state = _open_state(settings, planned, base_values(base))
    assert state["rows"]["base"]["status"] == "finished"
    again = state["rows"]["base-s1"]
    assert again["status"] == "pending" and "result" not in again
    assert again["overrides"] == ["training.seed=1", "data.shuffle_seed=1"]
    assert not (settings.output / "base-s1").exists()
    assert (settings.output / "base-s1.before-1" / "finished.json").exists()
    assert "base-s1: trained with training.seed=7, now" in capsys.readouterr().out


def test_rows_keep_table_3s_order_whenever_they_were_trained():
    """A row trained again after the others (A-h1 here) still lists first in its group."""
    from keras_transformer.table3.ablate import _ordered
    from keras_transformer.training.run_config import TrainingConfig

    config = TrainingConfig.load(REPO_ROOT / "configs" / "multi30k.yaml")
    ids = [("E-learned", "E"), ("A-h2", "A"), ("base", "base"), ("mine", "custom")]
    ids += [("A-h16", "A"), ("base-s1", "base"), ("A-h1", "A")]
    state = {"rows": {i: {"id": i, "group": g} for i, g in ids}}
    assert [e["id"] for e in _ordered(state, config)] == [
        "base",
        "base-s1",
        "A-h1",
        "A-h2",
        "A-h16",
        "E-learned",
        "mine",
    ]
