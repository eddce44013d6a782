from __future__ import annotations

from pathlib import Path

import pytest

from anchorwatch.jobs.settings import JobSettings
from anchorwatch.settings import SettingsError, describe_fields
from anchorwatch.stack.stack import StackSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("ANCHORWATCH_"):
            monkeypatch.delenv(key)


def test_defaults() -> None:
    s = StackSettings.load()
    assert s.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert s.topics.baselines == "anchorwatch.baselines"
    assert s.stack.kafka_port == 9092


def test_env_then_file_then_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "aw.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "file:1"\n'
        '[topics]\nsnapshots = "from-file"\npartitions = 8\n'
        "[stack]\nkafka_port = 19092\n"
        "[job]\nwindow_size_s = 120\n"
    )
    monkeypatch.setenv("ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS", "env:1")
    monkeypatch.setenv("ANCHORWATCH_KAFKA__CLIENT_PROPERTIES", '{"security.protocol": "SSL"}')
    s = StackSettings.load(config)
    assert s.kafka.bootstrap_servers == "env:1"  # env beats file
    assert s.kafka.client_properties == {"security.protocol": "SSL"}
    assert s.topics.snapshots == "from-file"  # file beats default
    assert s.topics.partitions == 8
    assert s.topics.verdicts == "anchorwatch.verdicts"  # untouched default
    assert s.stack.kafka_port == 19092
    # The same file serves every service: the job reads its own section.
    assert JobSettings.load(config).job.window_size_s == 120
    # Explicit arguments (command-line options) beat everything, per field.
    s2 = StackSettings.load(config, stack={"kafka_port": 1234})
    assert s2.stack.kafka_port == 1234
    assert s2.stack.host == "127.0.0.1"


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "aw.toml"
    config.write_text("[stack]\ncontroller_port = 29093\n")
    monkeypatch.setenv("ANCHORWATCH_CONFIG", str(config))
    assert StackSettings.load().stack.controller_port == 29093


def test_errors_name_the_variable_and_the_file_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANCHORWATCH_STACK__KAFKA_PORT", "not-a-port")
    monkeypatch.setenv("ANCHORWATCH_TOPICS__SNAPSHOTS", "bad topic!")
    with pytest.raises(SettingsError) as info:
        StackSettings.load()
    text = str(info.value)
    assert "ANCHORWATCH_STACK__KAFKA_PORT" in text
    assert "[stack] kafka_port" in text
    assert "ANCHORWATCH_TOPICS__SNAPSHOTS" in text
    assert "letters, digits" in text


def test_unknown_key_in_a_section_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "aw.toml"
    config.write_text("[stack]\nkafka_prot = 1\n")
    with pytest.raises(SettingsError, match="kafka_prot"):
        StackSettings.load(config)


def test_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not found"):
        StackSettings.load(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[stack\n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        StackSettings.load(broken)


def test_every_setting_is_described() -> None:
    rows = describe_fields(StackSettings) + describe_fields(JobSettings)
    envs = {env for env, _ in rows}
    assert "ANCHORWATCH_KAFKA__BOOTSTRAP_SERVERS" in envs
    assert "ANCHORWATCH_JOB__WATERMARK_DELAY_MS" in envs
    assert all(text and not text.startswith(" [default") for _, text in rows), rows


def test_readme_documents_every_setting() -> None:
    from anchorwatch.cli import all_settings

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    rows = [row for cls in all_settings() for row in describe_fields(cls)]
    missing = sorted({env for env, _ in rows if env not in readme})
    assert not missing, f"README lacks: {missing}"
