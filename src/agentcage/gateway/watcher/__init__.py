"""The watcher: what leaves for hosts the cage allows, judged over time, not one request at a
time, and narrowed when it looks like exfiltration.

The inspectors judge each request alone; a secret split over many requests, random data
dripped a few hundred bytes at a time, names spelled under an allowed wildcard zone, a steady
beacon, a fan-out over hosts granted at run time each pass them by design. The watcher keeps
budgets over a sliding window (`budgets.py`, `names.py`, `reassembly.py`; settings in
`settings.py`, cage.yaml's `watcher` section), and a crossing is a finding with its evidence
(host, window, amounts; never the bytes). Findings only ever narrow (`watch.py`): recorded; the
runtime grant involved revoked (never cage.yaml's allowlist); repeated findings quarantine the
cage to the model's hosts, with timed recovery and forgiveness after quiet (`ladder.py`).
Every action is an audit record (direction `watcher`), and the operator can undo it:
`agentcage watcher release NAME`, `agentcage watcher restore NAME GRANT`.
"""
