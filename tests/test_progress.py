"""Progress lines: live on a terminal, periodic when stderr is not one, silent when asked."""
import io
import re
import sys

import click
import pytest
from click.testing import CliRunner

from fwht_gpu.clitools import Progress, format_duration, progress_option


class Stream(io.StringIO):
    """A stderr stand-in that says whether it is a terminal."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    """A clock that moves only when told."""

    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(tty: bool, **kw):
    stream, clock = Stream(tty), Clock()
    return Progress(stream=stream, clock=clock, **kw), stream, clock


def tty_frames(text: str) -> list[str]:
    """The successive contents of the rewritten line(s), trailing blanks removed."""
    return [re.sub(r" +(\n?)$", r"\1", frame) for frame in text.split("\r") if frame]


@pytest.mark.parametrize("seconds, want", [
    (0, "0.0 s"), (4.2, "4.2 s"), (59.9, "59.9 s"), (59.96, "1 min 00 s"), (60, "1 min 00 s"),
    (185, "3 min 05 s"), (3599.4, "59 min 59 s"), (3600, "1 h 00 min"), (3720, "1 h 02 min"),
    (3745, "1 h 02 min"), (36000 + 59 * 60 + 50, "11 h 00 min"), (-3, "0.0 s")])
def test_format_duration(seconds, want):
    assert format_duration(seconds) == want


def test_tty_live_line_with_eta_and_final_newline():
    p, out, clock = make(True)
    clock.now += 2
    p("inner", 10, 100)             # the first call: no rate yet
    clock.now += 1
    p("inner", 20, 100)             # 10 per second since the first call: 80 left = 8 s
    clock.now += 1
    p("inner", 100, 100)
    frames = tty_frames(out.getvalue())
    assert frames == ["inner dimension: 10/100 (10%), 2.0 s elapsed, eta ?",
                      "inner dimension: 20/100 (20%), 3.0 s elapsed, eta 8.0 s",
                      "inner dimension: 100/100 (100%), 4.0 s elapsed\n"]
    assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1


def test_tty_eta_needs_a_second_or_five_percent():
    p, out, clock = make(True)
    p("tiles", 1, 1000)
    clock.now += 0.5
    p("tiles", 2, 1000)             # 0.1% more in 0.5 s: too little to extrapolate
    clock.now += 0.5
    p("tiles", 4, 1000)             # 1 s since the first call
    clock.now += 0.2
    p("tiles", 100, 1000)           # 9.9% since the first call, in 1.2 s
    frames = tty_frames(out.getvalue())
    assert frames[1].endswith("eta ?")
    assert frames[2].endswith("eta 5 min 32 s")     # 996 left at 3 per second
    assert frames[3].endswith("eta 10.9 s")         # 900 left at 99 per 1.2 s


def test_tty_clears_leftovers_of_a_longer_line():
    p, out, clock = make(True)
    p("tiles", 5, 10_000_000)
    clock.now += 120
    p("tiles", 9_000_000, 10_000_000)
    clock.now += 1
    p("tiles", 10_000_000, 10_000_000)
    first, second, third = out.getvalue().split("\r")[1:]
    assert second == "entries scanned: 9000000/10000000 (90%), 2 min 00 s elapsed, eta 13.3 s"
    assert len(first) < len(second)
    assert third.endswith(" \n") and len(third) == len(second) + 1  # blanks over the rest
    assert third.rstrip() == "entries scanned: 10000000/10000000 (100%), 2 min 01 s elapsed"


def test_tty_throttled_to_ten_redraws_a_second():
    p, out, clock = make(True)
    for done in range(1, 1001):     # 1000 calls in one second
        p("inner", done, 1000)
        clock.now += 0.001
    frames = tty_frames(out.getvalue())
    assert 10 <= len(frames) <= 12
    assert frames[0].startswith("inner dimension: 1/1000 ")        # the first one at once
    assert frames[-1].startswith("inner dimension: 1000/1000 (100%)")  # and the last one
    assert frames[-1].endswith("\n")


def test_not_a_tty_periodic_lines_first_and_last():
    p, out, clock = make(False)                     # auto: one line per 10 s
    for done in range(1, 61):                       # one call a second for a minute
        clock.now += 1
        p("inner", done, 60)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and out.getvalue().endswith("\n")
    assert [ln.split(" ")[2] for ln in lines] == \
        ["1/60", "11/60", "21/60", "31/60", "41/60", "51/60", "60/60"]
    assert lines[0] == "inner dimension: 1/60 (1%), 1.0 s elapsed, eta ?"
    assert lines[1] == "inner dimension: 11/60 (18%), 11.0 s elapsed, eta 49.0 s"
    assert lines[-1] == "inner dimension: 60/60 (100%), 1 min 00 s elapsed"


def test_not_a_tty_interval_and_always_mode():
    p, out, clock = make(False, interval=3)
    for done in range(1, 11):
        clock.now += 1
        p("tiles", done, 10)
    assert [ln.split(" ")[2] for ln in out.getvalue().splitlines()] == \
        ["1/10", "4/10", "7/10", "10/10"]
    p, out, clock = make(False, mode="always")    # a line every 2 s by default
    for done in range(1, 8):
        clock.now += 1
        p("tiles", done, 7)
    assert [ln.split(" ")[2] for ln in out.getvalue().splitlines()] == \
        ["1/7", "3/7", "5/7", "7/7"]
    assert Progress(mode="auto").interval == 10 and Progress(mode="always").interval == 2


def test_always_on_a_terminal_draws_the_live_line():
    p, out, clock = make(True, mode="always")
    p("inner", 1, 2)
    p("inner", 2, 2)
    assert out.getvalue().startswith("\r") and out.getvalue().endswith("\n")


@pytest.mark.parametrize("kw", [{"mode": "never"}, {"quiet": True}, {"quiet": True, "mode": "always"}])
@pytest.mark.parametrize("tty", [True, False])
def test_never_and_quiet_are_silent(kw, tty):
    p, out, clock = make(tty, **kw)
    p.message("compressing")
    for done in range(0, 11):
        clock.now += 5
        p("inner", done, 10)
    p.close()
    assert out.getvalue() == "" and not p.on


def test_old_positional_forms(monkeypatch):
    out = Stream(True)
    monkeypatch.setattr(sys, "stderr", out)         # the stream is looked up at call time
    quiet, loud = Progress(True), Progress(False)
    quiet("inner", 1, 1)
    assert out.getvalue() == ""
    loud("inner", 1, 1)
    assert out.getvalue().startswith("\rinner dimension: 1/1 (100%), ")
    assert out.getvalue().endswith(" elapsed\n")
    assert loud.mode == "auto" and quiet.mode == "never"
    with pytest.raises(ValueError, match="auto, always, never"):
        Progress(mode="sometimes")


def test_stage_change_and_new_run_reset_the_estimate():
    p, out, clock = make(False, interval=0)     # every call printed
    clock.now += 1
    p("inner", 50, 100)
    clock.now += 1
    p("inner", 100, 100)
    clock.now += 5                              # e.g. finishing the sketch
    p("tiles", 10, 100)                         # a new stage: timed from the last event
    clock.now += 10
    p("tiles", 20, 100)                         # 1 per second: 80 s left
    clock.now += 1
    p("tiles", 5, 100)                          # backwards: a new run of the same stage
    clock.now += 1
    p("tiles", 55, 100)                         # 50 per second in this run
    clock.now += 1
    p("tiles", 100, 100)
    clock.now += 1
    p("tiles", 100, 100)                        # a repeated final call is not shown again
    clock.now += 2
    p("tiles", 30, 100)                         # after a finished run: a new one
    assert out.getvalue().splitlines() == [
        "inner dimension: 50/100 (50%), 1.0 s elapsed, eta ?",
        "inner dimension: 100/100 (100%), 2.0 s elapsed",
        "entries scanned: 10/100 (10%), 5.0 s elapsed, eta ?",
        "entries scanned: 20/100 (20%), 15.0 s elapsed, eta 1 min 20 s",
        "entries scanned: 5/100 (5%), 1.0 s elapsed, eta ?",
        "entries scanned: 55/100 (55%), 2.0 s elapsed, eta 0.9 s",
        "entries scanned: 100/100 (100%), 3.0 s elapsed",
        "entries scanned: 30/100 (30%), 2.0 s elapsed, eta ?",
    ]


def test_new_stage_on_a_terminal_keeps_the_unfinished_line():
    p, out, clock = make(True)
    p("tiles", 3, 10)
    clock.now += 1
    p("inner", 1, 10)
    assert out.getvalue().startswith("\rentries scanned: 3/10 (30%), 0.0 s elapsed, eta ?\n\r")


def test_zero_total_is_complete():
    p, out, clock = make(False)
    p("inner", 0, 0)
    assert out.getvalue() == "inner dimension: 0/0 (100%), 0.0 s elapsed\n"


@pytest.mark.parametrize("tty", [True, False])
def test_message_ends_a_pending_line_and_starts_the_clock(tty):
    p, out, clock = make(tty)
    clock.now += 30                                 # reading the inputs
    p.message("compressing 3 x 4 times 4 x 5")
    clock.now += 2
    p("inner", 1, 4)
    p.message("halfway")
    clock.now += 2
    p("inner", 4, 4)
    p.close()                                       # nothing pending: writes nothing
    text = out.getvalue()
    if tty:
        assert text == ("compressing 3 x 4 times 4 x 5\n"
                        "\rinner dimension: 1/4 (25%), 2.0 s elapsed, eta ?\n"
                        "halfway\n"
                        "\rinner dimension: 4/4 (100%), 4.0 s elapsed\n")
    else:
        assert text == ("compressing 3 x 4 times 4 x 5\n"
                        "inner dimension: 1/4 (25%), 2.0 s elapsed, eta ?\n"
                        "halfway\n"
                        "inner dimension: 4/4 (100%), 4.0 s elapsed\n")


def test_close_ends_an_unfinished_terminal_line():
    p, out, clock = make(True)
    p("tiles", 1, 3)
    p.close()
    p.close()
    assert out.getvalue().count("\n") == 1 and out.getvalue().endswith("eta ?\n")


def test_progress_option():
    @click.command()
    @progress_option
    def cmd(progress):
        click.echo(progress)

    runner = CliRunner()
    assert runner.invoke(cmd, []).output == "auto\n"
    for mode in ("auto", "always", "never"):
        assert runner.invoke(cmd, ["--progress", mode]).output == f"{mode}\n"
    bad = runner.invoke(cmd, ["--progress", "sometimes"])
    assert bad.exit_code == 2
    help_text = runner.invoke(cmd, ["--help"]).output
    assert "--progress [auto|always|never]" in help_text and "terminal" in help_text
