# nvidia-smi sample child: G4's fallback series when NVML cannot be used from
# Python but nvidia-smi exists. It runs the query the parent already proved to
# work, every `interval` seconds for `seconds`, and sends each raw answer back;
# the parent parses them (one parser for the snapshot and the series).
# No timeout here on purpose: each call is a step, and the parent's progress
# watchdog kills this child's whole process group (nvidia-smi included) when
# one call hangs, which a timeout in here could not do for a grandchild.
import subprocess as _subprocess
import time as _time


def main():
    cfg = config()
    argv = list(cfg.get("argv") or [])
    seconds = float(cfg.get("seconds", 1.0))
    interval = max(float(cfg.get("interval", 0.5)), 0.05)
    t0 = _time.monotonic()
    n = 0
    while True:
        begin("nvidia-smi sample %d" % n)
        t = round(_time.monotonic() - t0, 4)
        try:
            proc = _subprocess.run(argv, stdin=_subprocess.DEVNULL, capture_output=True)
        except OSError as exc:
            event({"t": t, "rc": None, "out": "", "err": error_text(exc)})
            break
        event(
            {
                "t": t,
                "rc": proc.returncode,
                "out": proc.stdout[:65536].decode("utf-8", "replace"),
                "err": proc.stderr[:4096].decode("utf-8", "replace"),
            }
        )
        n += 1
        if proc.returncode != 0 or _time.monotonic() - t0 >= seconds:
            break
        _time.sleep(interval)
    data(samples=n, seconds=round(_time.monotonic() - t0, 4))
    done()
