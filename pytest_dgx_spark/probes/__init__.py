"""The machine-probe layer: everything that reads or runs something on the machine, apart from
the checks that decide on it. Every probe has a timeout, never raises into the caller, and returns
plain JSON-compatible data, so one probe's answer can be shared by xdist workers."""
