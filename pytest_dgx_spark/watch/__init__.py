"""``spark-preflight watch``: the run itself watched (issue 32); :mod:`.run` is the command,
:mod:`.rules` the pure decisions, :mod:`.probes` the bounded reads. Nothing loads until used."""
