"""Every setting is documented in the README, as datasette checks its settings."""

from pathlib import Path

from parallax.server.config import Settings

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_readme():
    missing = [n for n in Settings.model_fields if f"`PARALLAX_{n.upper()}`" not in README]
    assert missing == []


def test_readme_gives_the_two_commands():
    assert "make run" in README and "make test" in README
