"""`sweep --plot` over a user's file is refused before any cell is paid for; the grid's `report --plot` keeps it."""

from __future__ import annotations

from ragzoo.cli import main

from tests.grid.conftest import stub_lms, write_tiny


def test_sweep_plot_over_a_users_file_is_refused_before_any_request(tmp_path, stub_server, grid_env, capsys):
    grid = write_tiny(tmp_path / "tiny.toml", n=2, lms=stub_lms(stub_server))
    users = tmp_path / "mine.png"
    users.write_bytes(b"not ragzoo's")
    assert main(["sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet", "--plot", str(users)]) == 2
    assert "this command did not write it" in capsys.readouterr().err
    assert stub_server.requests == 0 and users.read_bytes() == b"not ragzoo's"
    ours = tmp_path / "grid.png"
    assert main(["sweep", str(grid), "--out", str(tmp_path / "g"), "--quiet", "--plot", str(ours)]) == 0
    assert ours.read_bytes()[:4] == b"\x89PNG"
    assert main(["report", str(tmp_path / "g"), "--plot", str(users)]) == 2
    assert users.read_bytes() == b"not ragzoo's"
    assert main(["report", str(tmp_path / "g"), "--plot", str(ours)]) == 0  # its own plot is replaced
