"""Commands that read local files only refuse an object-store URL in one line that names the
next step; the four that read URLs (scan, inspect, verify, report) are not refused."""

from __future__ import annotations

import pytest

from inspector.cli import COMMANDS, main


@pytest.mark.parametrize("argv", [
    ["diff", "s3://bucket/a.pt", "s3://bucket/b.pt"],
    ["convert", "s3://bucket/a.pt"],
    ["manifest", "create", "s3://bucket/model/", "-o", "m.json"],
    ["watch", "gs://bucket/model/", "-m", "SHA256SUMS"],
    ["consistency", "s3://bucket/a.pt"],
    ["run", "latest", "s3://bucket/run"],
    ["telemetry", "--replay", "s3://bucket/log.csv"],
    ["merge", "s3://bucket/r0.jsonl", "-o", "r.json"],
])
def test_a_local_only_command_refuses_a_url_in_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    url = next(a for a in argv if "://" in a)
    assert line.startswith(f"ckpt-inspector {argv[0]}: {url}: {argv[0]} reads local files only")
    assert "aws s3 cp" in line and "scan, inspect, verify or report" in line
    assert ("--recursive" in line) == url.endswith("/")
    assert captured.out == "" and list(tmp_path.iterdir()) == []


def test_the_url_readers_are_the_four_commands_the_docs_name():
    assert [name for name, cmd in COMMANDS.items() if cmd.urls] == ["scan", "inspect", "verify",
                                                                    "report"]


def test_an_http_url_is_left_to_the_command(capsys):
    # telemetry --from-prometheus takes an http URL: its own error, not the refusal
    assert main(["telemetry", "--from-prometheus", "http://127.0.0.1:9"]) != 0
    assert "reads local files only" not in capsys.readouterr().err
