# --python child: the judged interpreter says what it is, where it imports from and what it has
# installed. It runs after probes/packages.py's own source (list_distributions), so the package scan
# is the same code as for the interpreter running the checks, run by the interpreter being judged.


def main():
    begin("describe the interpreter")
    info = _sys.version_info
    data(executable=_sys.executable, version="%d.%d.%d" % (info[0], info[1], info[2]),
         prefix=_sys.prefix, base_prefix=getattr(_sys, "base_prefix", _sys.prefix),
         path=[p for p in _sys.path if p])
    begin("list distributions", scale=3)
    data(**list_distributions(None))
    done()
