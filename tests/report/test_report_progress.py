"""The progress bars draw on stderr only when asked (a terminal), and never get in the way."""

from hwc.report.progress import steps, waiting, work


def test_progress_bars_draw_when_enabled_and_stay_silent_otherwise(capsys):
    for enabled in (False, True):
        with steps("synthesis", total=3, enabled=enabled) as step:
            for name in ("yosys", "nextpnr", "ecppack"):
                step(name)
        with work("measuring", enabled=enabled) as bar:
            bar.queued(2)
            bar.done("a")
            bar.queued(1)
            bar.done("b")
            bar.done("c")
        assert bar.total == 3
        with waiting("RTL simulation", enabled=enabled):
            pass
        out, err = capsys.readouterr()
        assert out == ""
        assert (err != "") == enabled
