"""The conversion command's refusals: said plainly, exit status 2, nothing written."""

from __future__ import annotations

import json

from loongsage.training.megatron.hf_convert import main


def test_a_missing_directory_is_named(tmp_path, capsys):
    assert main(["hf-to-megatron", str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'nope'}: no such directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_directory_without_config_json_is_not_an_hf_directory(tmp_path, capsys):
    (tmp_path / "weights").mkdir()
    assert main(["hf-to-megatron", str(tmp_path / "weights"), str(tmp_path / "out")]) == 2
    assert "is not a Hugging Face model directory: config.json is missing" in capsys.readouterr().err


def test_an_unmapped_architecture_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    assert main(["hf-to-megatron", str(tmp_path / "gpt2"), str(tmp_path / "out")]) == 2
    assert "architectures=['GPT2LMHeadModel']" in capsys.readouterr().err


def test_an_existing_output_is_not_overwritten(tmp_path, tiny_model_path, capsys):
    (tmp_path / "out").mkdir()
    assert main(["hf-to-megatron", tiny_model_path, str(tmp_path / "out")]) == 2
    assert "exists" in capsys.readouterr().err


def test_megatron_to_hf_wants_a_checkpoint_from_hf_to_megatron(tmp_path, tiny_model_path, capsys):
    assert main(["megatron-to-hf", tiny_model_path, str(tmp_path / "out")]) == 2
    assert "is not a checkpoint written by `hf-to-megatron`: loongsage_convert.json is missing" in capsys.readouterr().err
