from __future__ import annotations

import os
from pathlib import Path

import pytest

from spec.version import __version__
from transport.cli import main
from transport.settings import default_workers, load_settings


def test_version_prints_distribution_and_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "serve" in capsys.readouterr().out


def test_workers_come_from_the_flag_the_config_file_or_the_cores(tmp_path: Path) -> None:
    config = tmp_path / "server.toml"
    config.write_text("[server]\nworkers = 3\n")
    assert load_settings(config).workers == 3
    assert load_settings(config, workers=5).workers == 5  # the flag wins
    assert load_settings().workers is None
    assert default_workers("cpu") == (os.cpu_count() or 1)
    assert default_workers("scripted") == (os.cpu_count() or 1)
    assert default_workers("gpu") == 1  # its models fill the GPUs once
    for bad in ("0", '"two"', "1.5"):
        config.write_text(f"[server]\nworkers = {bad}\n")
        with pytest.raises(ValueError, match="workers must be a whole number of at least 1"):
            load_settings(config)


def test_serve_refuses_workers_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--workers", "0"])
    assert info.value.code == 2
    assert "--workers: must be at least 1" in capsys.readouterr().err


def test_host_id_comes_from_the_config_file_and_a_bad_one_is_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "server.toml"
    assert load_settings().host_id is None  # default: session ids name no host
    config.write_text('[server]\nhost_id = "eu-1"\n')
    assert load_settings(config).host_id == "eu-1"
    # a `.` would end the host id early in a session id; upper case, a leading `-`,
    # more than 32 characters, and a number are refused too
    for bad in ('"eu.1"', '"EU-1"', '"-eu"', '""', f'"{"a" * 33}"', "1"):
        config.write_text(f"[server]\nhost_id = {bad}\n")
        with pytest.raises(ValueError, match=r"server\.host_id must be 1 to 32 characters"):
            load_settings(config)
    assert main(["serve", "--config", str(config)]) == 2  # refused before anything starts
    assert "joyduplex: server.host_id must be" in capsys.readouterr().err
    # the flag (one config file for every host, each started with its own name)
    assert load_settings(None, host_id="eu-2").host_id == "eu-2"
    assert main(["serve", "--host-id", "EU"]) == 2
    assert "joyduplex: server.host_id must be" in capsys.readouterr().err


def test_the_cpu_voice_engine_comes_from_the_config_file_and_a_bad_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "server.toml"
    config.write_text('[backend]\ntts = "piper"\n')
    assert load_settings(config).backend_options["tts"] == "piper"
    assert load_settings(config, backend_options={"tts": "hibari"}).backend_options == {
        "tts": "hibari"
    }  # the flag wins
    for bad in ('"espeak"', "1"):
        config.write_text(f"[backend]\ntts = {bad}\n")
        with pytest.raises(ValueError, match=r"backend\.tts must be one of hibari, piper"):
            load_settings(config)
    assert main(["serve", "--config", str(config)]) == 2  # refused before anything starts
    assert "backend.tts" in capsys.readouterr().err
