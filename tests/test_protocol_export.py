"""``echomq-chaos protocol export DIR``: the sound recording scripts as they are (the SHA1s the
echomq dialect knows), and a note of what each takes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.history.dialects.echomq import SCRIPTS

LUA = Path(__file__).resolve().parent.parent / "chaos" / "protocol" / "lua"


def test_export_writes_the_sound_scripts_byte_for_byte(tmp_path: Path, capsys):
    out = tmp_path / "scripts"
    assert main(["protocol", "export", str(out)]) == 0
    exported = sorted(path.name for path in out.glob("*.lua"))
    assert exported == ["claim.lua", "claim_many.lua", "complete.lua", "enqueue.lua", "extend.lua",
                        "reap.lua", "record.lua"]
    for name in exported:
        body = (out / name).read_bytes()
        assert body == (LUA / name).read_bytes()
        assert SCRIPTS[hashlib.sha1(body).hexdigest()] == name.removesuffix(".lua")
    note = (out / "README.md").read_text()
    for name in exported:
        assert f"## {name}" in note
    assert "ARGV[2] lease_ms" in note and "KEYS[1] pending" in note
    assert "MUTANT" not in note  # the broken variants stay inside the toolkit
    assert str(out / "claim.lua") in capsys.readouterr().out


def test_export_into_a_file_is_bad_input(tmp_path: Path, capsys):
    target = tmp_path / "taken"
    target.write_text("")
    assert main(["protocol", "export", str(target)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["protocol"], ["protocol", "export"]])
def test_usage_errors(argv: list[str]):
    assert main(argv) == 2
