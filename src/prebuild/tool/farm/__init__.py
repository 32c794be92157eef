"""``prebuild farm``: many projects across torch x CUDA x Python x GPU arch, built into one
index that pip and uv install from. ``recipes`` (what to build), ``plan`` (the jobs and their
keys), ``ledger`` (what an index holds already), ``envs`` (one environment per torch, CUDA and
Python), ``build`` (running jobs on one machine), ``site`` (the index and its summary page)."""
