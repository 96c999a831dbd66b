"""``spark-preflight watch``: the run itself watched (issue 32). :mod:`.run` is the command (its line
:mod:`.args`, its output and timeline :mod:`.output`, its Prometheus textfile :mod:`.textfile`);
:mod:`.sample` one tick's readings, typed; :mod:`.rules` (with :mod:`.gpu_rules`, :mod:`.conditions`,
:mod:`.events`) the pure decisions; :mod:`.probes` the bounded reads; :mod:`.postmortem` a failed
job's diagnosis. Nothing loads until used."""
