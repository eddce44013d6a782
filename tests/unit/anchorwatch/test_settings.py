from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, SecretStr

from anchorwatch.jobs.settings import JobSettings
from anchorwatch.settings import Section, ServiceSettings, SettingsError, describe_fields
from anchorwatch.stack.stack import StackSettings
from tools import settings_doc


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


def test_settings_doc_is_what_the_models_say() -> None:
    # Whole-file comparison: a variable's row removed, a default or a description changed
    # in the code or in the file, all fail here.
    current = settings_doc.DOC.read_text(encoding="utf-8")
    assert current == settings_doc.render(), (
        "docs/settings.md is stale: .venv/bin/python -m tools.settings_doc --write"
    )


def test_settings_doc_names_every_field_with_its_default() -> None:
    text = settings_doc.render()
    rows = [row for cls in settings_doc.settings_classes() for row in describe_fields(cls)]
    assert len(rows) > 100
    for env, _ in rows:
        # The variable in its own cell: a prefix of a longer name does not count.
        assert f"| `{env}` |" in text, env
    assert "| `ANCHORWATCH_STACK__FLINK` | `[stack] flink` | boolean | `false` |" in text
    assert "| `ANCHORWATCH_INGEST__MAX_BODY_BYTES` | `[ingest] max_body_bytes` |" in text
    assert "| `16777216` (16 MiB) | Larger request bodies are refused with 413. |" in text


def test_the_walk_finds_every_service_and_section() -> None:
    classes = settings_doc.settings_classes()
    sections = {name for cls in classes for name in cls.model_fields}
    assert {
        "kafka",
        "topics",
        "jvm",
        "stack",
        "job",
        "policy",
        "baseline",
        "ingest",
        "alerting",
        "slack",
        "jira",
        "routing",
        "retry",
    } <= sections
    assert StackSettings in classes
    assert JobSettings in classes
    assert ServiceSettings not in classes


def test_the_walk_follows_subclasses_of_subclasses(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "from anchorwatch.settings import ServiceSettings\n"
        "class First(ServiceSettings): ...\n"
        "class Unrelated: ...\n"
    )
    (tmp_path / "b.py").write_text(
        "import a\nclass Second(a.First): ...\nclass Third(Second): ...\n"
    )
    (tmp_path / "broken.py").write_text("class (:\n")
    modules = [(p.stem, p) for p in sorted(tmp_path.glob("*.py"))]
    assert settings_doc.find_settings_classes(modules) == [
        ("a", "First"),
        ("b", "Second"),
        ("b", "Third"),
    ]


class _Vault(Section):
    token: SecretStr | None = Field(
        SecretStr("hunter2-default"), description="A token with a default."
    )
    password: SecretStr = Field(SecretStr("swordfish"), description="Required-looking.")
    plain: str = Field("visible", description="Not a secret.")


class _VaultSettings(ServiceSettings):
    vault: _Vault = Field(default_factory=_Vault)


def test_secret_defaults_are_never_printed() -> None:
    text = settings_doc.render([_VaultSettings])
    assert "hunter2" not in text
    assert "swordfish" not in text
    assert "| `ANCHORWATCH_VAULT__TOKEN` | `[vault] token` | secret, optional |" in text
    assert text.count(settings_doc.HIDDEN_DEFAULT) == 2
    assert "`visible`" in text


def _here() -> Path:
    return Path.cwd() / "state"


class _Local(Section):
    where: Path = Field(default_factory=_here, description="Somewhere on this machine.")


class _LocalSettings(ServiceSettings):
    local: _Local = Field(default_factory=_Local)


def test_a_default_that_depends_on_the_machine_is_refused() -> None:
    with pytest.raises(settings_doc.SettingsDocError, match="docstring"):
        settings_doc.render([_LocalSettings])
