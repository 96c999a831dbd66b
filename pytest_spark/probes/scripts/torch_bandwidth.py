# G5 step of the torch child: device copy bandwidth (intrusive; opt-in).
# (Deepened by the machine-checks issue.)


def step_bandwidth(torch, cfg, cuda):
    begin("bandwidth", scale=3)
    data(bandwidth={"skipped": "bandwidth step not built yet"})
