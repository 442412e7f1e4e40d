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
