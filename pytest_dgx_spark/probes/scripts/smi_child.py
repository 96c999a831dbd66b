# nvidia-smi sample child: G4's fallback series when NVML cannot be used from Python. It runs the
# query the parent proved to work every `interval` s for `seconds` and sends each raw answer back
# (the parent parses them). No timeout here on purpose: each call is a step, and the parent's
# watchdog kills this whole process group (nvidia-smi included) when one call hangs.
import subprocess as _subprocess


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
        out, err = proc.stdout[:65536], proc.stderr[:4096]
        event({"t": t, "rc": proc.returncode, "out": out.decode("utf-8", "replace"), "err": err.decode("utf-8", "replace")})
        n += 1
        if proc.returncode != 0 or _time.monotonic() - t0 >= seconds:
            break
        _time.sleep(interval)
    data(samples=n, seconds=round(_time.monotonic() - t0, 4))
    done()
