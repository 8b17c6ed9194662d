"""The boundary: what a confined process may see, write and reach, and the mechanisms that hold it.

Below :mod:`sandbox.agent` (which starts agents and commands in it) and above :mod:`sandbox.run`:
nothing here imports the agent layer, so the policy is decided in one package whatever starts the
process. :mod:`~sandbox.confine.policy` decides (paths, variables, limits, the network mode),
:mod:`~sandbox.confine.verdict` answers for one path under that policy, and the mechanisms carry it
out: :mod:`~sandbox.confine.bwrap` (Linux), :mod:`~sandbox.confine.seatbelt` (macOS),
:mod:`~sandbox.confine.hardening` and :mod:`~sandbox.confine.nslimits` (what the kernel adds),
:mod:`~sandbox.confine.envfilter` (the environment), :mod:`~sandbox.confine.proxy` and
:mod:`~sandbox.confine.bridge` (the network allowlist), :mod:`~sandbox.confine.spawn` (start and wait).
"""
